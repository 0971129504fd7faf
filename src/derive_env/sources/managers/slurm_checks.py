"""The consistency rules of Slurm's variables (docs/sources/slurm.md), shared by both
lines of sources/managers/slurm.py: a value that is wrong whatever runs inside the step raises
:class:`TopologyError`, naming the variable, its value and the Slurm file that writes it.

* the job id and its old name (:func:`job_id`); a heterogeneous job (:func:`refuse_het`);
* host lists, expanded (sources/managers/slurm_hostlist.py) and checked (:func:`hosts_of`);
* the step's node variables against each other and the job's (:class:`Step`), its tasks
  (:func:`step_tasks`), and Slurm's own MPI plugins' variables (:func:`check_mpi_plugin`);
* ``SLURM_GPUS_ON_NODE`` (:func:`gpus_on_node`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import TypeVar

from derive_env.errors import TopologyError, describe
from derive_env.hosts import check_hosts, repeated_host
from derive_env.sources.managers.slurm_hostlist import expand_hostlist, expand_tasks_per_node
from derive_env.sources.report import Processes
from derive_env.validation import PER_NODE, variable_int

_T = TypeVar("_T")

#: Variables present only in a heterogeneous job or step (``srun ... : ...``, ``sbatch``
#: with ``hetjob``): Slurm 20.02+ writes ``SLURM_HET_SIZE`` (``env.c``
#: ``env_array_for_batch_job`` / ``env_array_for_step``), older releases ``SLURM_PACK_SIZE``.
_HET_SIZES = ("SLURM_HET_SIZE", "SLURM_PACK_SIZE")
#: Per-component suffixes (``SLURM_JOB_NODELIST_HET_GROUP_1``). Group 0 alone is also
#: written for ordinary steps (``SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0`` in every recorded
#: step inside an allocation), so only a group above 0 proves a second component.
_HET_GROUPS = ("_HET_GROUP_", "_PACK_GROUP_")


@lru_cache(maxsize=4)
def _expand_checked(value: str) -> tuple[str, ...]:
    """``value`` expanded and checked; cached because both lines of a step read the same
    ``SLURM_JOB_NODELIST`` (and most steps span the whole job). Raises ValueError whose
    text completes "expected ..."."""
    hosts = expand_hostlist(value)
    if not hosts:
        raise ValueError("a Slurm host list of at least one node")
    twice = repeated_host(hosts)
    if twice is not None:
        raise ValueError(f"every node once (Slurm never lists a node twice), not {twice!r} "
                         "twice")
    bad = check_hosts(hosts)
    if bad:
        raise ValueError(f"{bad[2]}, not {bad[1]!r}")
    return hosts


def parsed(environ: Mapping[str, str], name: str, parse: Callable[[str], _T]) -> _T:
    """``parse(environ[name])``; its ValueError (text completing "expected ...") becomes a
    TopologyError naming the variable and its value."""
    try:
        return parse(environ[name])
    except ValueError as exc:
        raise TopologyError(describe(name, environ[name], str(exc))) from None


def hosts_of(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """Expand host list ``name`` (src/common/hostlist.c grammar) and check every host."""
    return parsed(environ, name, _expand_checked)


def job_id(environ: Mapping[str, str]) -> str:
    """``SLURM_JOB_ID``, checked against its old name ``SLURM_JOBID`` (src/common/env.c
    ``setup_env`` writes both from one value)."""
    job = environ["SLURM_JOB_ID"]
    variable_int(environ, "SLURM_JOB_ID", 1)
    alias = environ.get("SLURM_JOBID")
    if alias and alias != job:
        raise TopologyError(describe(
            "SLURM_JOBID", alias,
            f"the same job id as SLURM_JOB_ID={job!r} (Slurm sets both from one value); one "
            "of them was inherited from another job or set by hand: unset the stale one"))
    return job


def refuse_het(environ: Mapping[str, str]) -> None:
    """Refuse a heterogeneous job: its ids and lists span components (task.c, env.c)."""
    found = next((n for n in _HET_SIZES if environ.get(n)), None)
    if found is None:
        for key in environ:
            for marker in _HET_GROUPS:
                at = key.find(marker)
                if at != -1 and key[at + len(marker):] not in ("", "0") and environ[key]:
                    found = key
                    break
            if found:
                break
    if found:
        raise TopologyError(describe(
            found, environ[found],
            "unset: this is a heterogeneous Slurm job (srun ... : ..., #SBATCH hetjob), whose "
            "ranks and node lists span its components, and derive-env does not read those "
            "yet; run one homogeneous step per derive-env (srun --het-group=0 derive-env -- "
            "...), or set the framework variables yourself"))


def gpus_on_node(environ: Mapping[str, str]) -> tuple[int | None, tuple[str, ...]]:
    """``SLURM_GPUS_ON_NODE``: the GPUs allocated on this node, an integer (srun.1 and
    sbatch.1, OUTPUT ENVIRONMENT VARIABLES); never ``SLURM_GPUS_PER_NODE``, the request
    (``a100:4``, docs/sources/slurm.md)."""
    if not environ.get("SLURM_GPUS_ON_NODE"):
        return None, ()
    return (variable_int(environ, "SLURM_GPUS_ON_NODE", 0, maximum=PER_NODE),
            ("SLURM_GPUS_ON_NODE",))


class Step:
    """The step's node variables, validated against each other and against the job's host
    list ``job_hosts`` when set (docs/sources/slurm.md).

    :ivar hosts: ``SLURM_STEP_NODELIST`` expanded; :ivar node_id: ``SLURM_NODEID``, this
        task's index in it; :ivar num_nodes: ``SLURM_STEP_NUM_NODES``.
    """

    __slots__ = ("hosts", "node_id", "num_nodes")

    def __init__(self, environ: Mapping[str, str], job_hosts: tuple[str, ...] | None) -> None:
        self.num_nodes = variable_int(environ, "SLURM_STEP_NUM_NODES", 1)
        self.node_id = variable_int(environ, "SLURM_NODEID", 0)
        same_list = environ.get("SLURM_JOB_NODELIST") == environ["SLURM_STEP_NODELIST"]
        self.hosts = job_hosts if same_list and job_hosts else hosts_of(
            environ, "SLURM_STEP_NODELIST")
        if len(self.hosts) != self.num_nodes:
            raise TopologyError(describe(
                "SLURM_STEP_NUM_NODES", environ["SLURM_STEP_NUM_NODES"],
                f"the number of nodes in SLURM_STEP_NODELIST={environ['SLURM_STEP_NODELIST']!r}"
                f" ({len(self.hosts)}); srun writes both for one step (src/common/env.c "
                "env_array_for_step), so one was set by hand or inherited"))
        if self.node_id >= self.num_nodes:
            raise TopologyError(describe(
                "SLURM_NODEID", environ["SLURM_NODEID"],
                f"a node index below SLURM_STEP_NUM_NODES={self.num_nodes}"))
        if job_hosts is not None and not same_list:
            outside = set(self.hosts).difference(job_hosts)
            if outside:
                raise TopologyError(describe(
                    "SLURM_STEP_NODELIST", environ["SLURM_STEP_NODELIST"],
                    f"nodes of this job's SLURM_JOB_NODELIST={environ['SLURM_JOB_NODELIST']!r}"
                    f", not {sorted(outside)[0]!r}: the step variables were inherited from "
                    "another job (a job submitted from inside a step); unset SLURM_STEP_* "
                    "before sbatch/salloc, or submit with --export=NONE"))


def job_hosts_if_set(environ: Mapping[str, str]) -> tuple[str, ...] | None:
    """``SLURM_JOB_NODELIST`` as :func:`hosts_of` reads it, ``None`` when it is unset."""
    return hosts_of(environ, "SLURM_JOB_NODELIST") if environ.get("SLURM_JOB_NODELIST") else None


def same_as(environ: Mapping[str, str], mine: tuple[str, int], other: tuple[str, int]) -> None:
    """Raise unless ``mine`` ``(variable, its value parsed)`` equals ``other``'s value."""
    (name, number), (other, expected) = mine, other
    if number != expected:
        raise TopologyError(describe(
            name, environ[name],
            f"{expected}, as {other}={environ[other]!r}: both are Slurm's own for this step, "
            "so one was set by hand or inherited"))


#: (the variable naming the step, a plugin's variable, its minimum, the step's own variable).
_MPI_PLUGINS = (("PMI_JOBID", "PMI_RANK", 0, "SLURM_PROCID"),
                ("PMI_JOBID", "PMI_SIZE", 1, "SLURM_STEP_NUM_TASKS"),
                ("PMIX_NAMESPACE", "PMIX_RANK", 0, "SLURM_PROCID"),
                ("PALS_APID", "PALS_RANKID", 0, "SLURM_PROCID"),
                ("PALS_APID", "PALS_NODEID", 0, "SLURM_NODEID"))


def check_mpi_plugin(environ: Mapping[str, str], this: str, facts: Mapping[str, int]) -> None:
    """The variables of Slurm's own MPI plugins must agree with the step's.

    Only when they name this step: ``srun --mpi=pmi2`` sets ``PMI_RANK``, ``PMI_SIZE`` and
    ``PMI_JOBID=<job>.<step>`` (src/plugins/mpi/pmi2/setup.c); ``--mpi=pmix`` sets
    ``PMIX_RANK`` and ``PMIX_NAMESPACE=slurm.pmix.<job>.<step>`` (src/plugins/mpi/pmix/
    pmixp_info.c); ``--mpi=cray_shasta`` sets ``PALS_RANKID``, ``PALS_NODEID`` and
    ``PALS_APID=<job>.<step>`` (src/plugins/mpi/cray_shasta/mpi_cray_shasta.c; recorded).
    Values naming another job step come from a launcher inside the step (the resolver
    composes those); they are not read here.

    :param this: the step, ``<job>.<step>``.
    :param facts: the step's ``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS``, ``SLURM_NODEID``.
    """
    names = {"PMI_JOBID": this, "PMIX_NAMESPACE": f"slurm.pmix.{this}", "PALS_APID": this}
    for marker, name, minimum, fact in _MPI_PLUGINS:
        if environ.get(marker) == names[marker] and environ.get(name):
            same_as(environ, (name, variable_int(environ, name, minimum)),
                    (fact, facts[fact]))


def step_tasks(environ: Mapping[str, str], info: Step) -> Processes:
    """The step's process layer: ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_STEP_NUM_TASKS``
    and ``SLURM_STEP_TASKS_PER_NODE``, checked against each other and the step's nodes."""
    world = variable_int(environ, "SLURM_STEP_NUM_TASKS", 1)
    rank = variable_int(environ, "SLURM_PROCID", 0)
    local_rank = variable_int(environ, "SLURM_LOCALID", 0)
    tasks_per_node = parsed(environ, "SLURM_STEP_TASKS_PER_NODE", expand_tasks_per_node)
    if len(tasks_per_node) != info.num_nodes:
        raise TopologyError(describe(
            "SLURM_STEP_TASKS_PER_NODE", environ["SLURM_STEP_TASKS_PER_NODE"],
            f"one task count per node of the step, SLURM_STEP_NUM_NODES={info.num_nodes}, "
            f"not {len(tasks_per_node)}"))
    if sum(tasks_per_node) != world:
        raise TopologyError(describe(
            "SLURM_STEP_TASKS_PER_NODE", environ["SLURM_STEP_TASKS_PER_NODE"],
            f"task counts adding up to SLURM_STEP_NUM_TASKS={world}, not {sum(tasks_per_node)}"))
    if rank >= world:
        raise TopologyError(describe(
            "SLURM_PROCID", environ["SLURM_PROCID"],
            f"a rank below SLURM_STEP_NUM_TASKS={world}"))
    local_world = tasks_per_node[info.node_id]
    if local_rank >= local_world:
        raise TopologyError(describe(
            "SLURM_LOCALID", environ["SLURM_LOCALID"],
            f"a local rank below {local_world}, the task count of node SLURM_NODEID="
            f"{info.node_id} in SLURM_STEP_TASKS_PER_NODE="
            f"{environ['SLURM_STEP_TASKS_PER_NODE']!r}"))
    return Processes(rank, local_rank, world, local_world, tasks_per_node)
