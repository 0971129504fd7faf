"""The Slurm source (docs/sources/slurm.md): lines ``slurm-step`` (:func:`read_step`) and
``slurm-allocation`` (:func:`read_allocation`). Each rule names the SchedMD/slurm file it
follows; recorded Slurm 22.05 (tests/fixtures/recorded/README.md) wins over a description.
What only this task can check is :attr:`Report.problem`, raised only when no inner source is
seen: Hydra copies it into every rank (mpich-in-sbatch).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe, shorten
from derive_env.sources.managers.slurm_hostlist import (
    arbitrary_master,
    expand_checked,
    expand_tasks_per_node,
    parse_resv_ports,
)
from derive_env.sources.report import Processes, Report, parsed
from derive_env.topology import nodes_of
from derive_env.validation import PER_NODE, parse_int, variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source

_COPIED = ("this task's own Slurm variables contradict the step it names, as when a "
           "launcher inside the step (MPICH's mpiexec) copied them from another process; "
           "run derive-env directly under srun, or under an MPI launcher derive-env reads")
#: What to do, first: derive-env in the wrong place (the batch script, or around srun).
RUN_IN_SRUN = ("run derive-env inside srun, after it: srun --ntasks-per-node=1 derive-env -- "
               "torchrun ..., or one task per GPU: srun --ntasks-per-node=<GPUs per node> "
               "derive-env -- python train.py")
_STEP_ORDER = ("SLURM_STEP_NODELIST order: Slurm's node index in the step, as SLURM_NODEID "
               "counts it (slurmstepd, src/slurmd/slurmstepd/task.c)")
_JOB_ORDER = ("SLURM_JOB_NODELIST order: the job's nodes in slurm.conf node order "
              "(src/common/hostlist.c hostlist_ranged_string)")
#: Set only in a heterogeneous job or step: Slurm 20.02+ (env.c), older releases.
_HET_SIZES = ("SLURM_HET_SIZE", "SLURM_PACK_SIZE")
#: Per-component suffixes; group 0 is in ordinary steps too (recorded): a group above 0 only.
_HET_GROUPS = ("_HET_GROUP_", "_PACK_GROUP_")
#: Set by Flux's job shell for each task it starts (flux-core src/shell/task.c).
FLUX_TASK = "FLUX_TASK_RANK"


def alloc_problem(value: str, step: str | None = None) -> str:
    """The message for a batch script or salloc shell of a multi-node job; inside srun step
    ``step`` (the allocation line chosen alone, ``--source``), the step's."""
    if step is not None:
        return describe(
            "SLURM_JOB_NUM_NODES", value,
            f"1 when the allocation is read alone: this process runs in srun step "
            f"{shorten(step, 40)} (SLURM_STEP_ID), and the step, not the allocation, states "
            "the nodes that run the job's processes. Read the step: --source slurm-step (or "
            "DERIVE_ENV_SOURCE=slurm-step), or no --source")
    return (f"{RUN_IN_SRUN}. Here it runs in a batch script or salloc shell (no srun step; "
            "derive-env -- srun ... runs it there too), one process on one node of the job's "
            f"SLURM_JOB_NUM_NODES={shorten(value)!r}: only srun starts processes on the others")


def files_needed(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """``SLURM_HOSTFILE`` of an ``srun -m arbitrary`` step (its first host is rank 0's,
    srun.1 "arbitrary"), for the edge to read; else none."""
    if name == "slurm-step" and _arbitrary(environ) and environ.get("SLURM_HOSTFILE"):
        return (environ["SLURM_HOSTFILE"],)
    return ()


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    if line.name == "slurm-step":
        return read_step(environ, line.title, files or {})
    return read_allocation(environ, line.title)


def _arbitrary(environ: Mapping[str, str]) -> bool:
    """``srun -m arbitrary`` (``SLURM_DISTRIBUTION`` from ``-m``, src/common/env.c
    ``_setup_distribution`` writes ``arbitrary``; a ``:socket`` part may follow)."""
    return environ.get("SLURM_DISTRIBUTION", "").startswith("arbitrary")


# -- the rules of both lines ----------------------------------------------------------------



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
    found = next((n for n in _HET_SIZES if environ.get(n)), None) or next(
        (key for key in environ for marker in _HET_GROUPS
         if key.partition(marker)[2] not in ("", "0") and environ[key]), None)
    if found:
        raise TopologyError(describe(
            found, environ[found],
            "unset: this is a heterogeneous Slurm job (srun ... : ..., #SBATCH hetjob), whose "
            "ranks and node lists span its components, and derive-env does not read those "
            "yet; run one homogeneous step per derive-env (srun --het-group=0 derive-env -- "
            "...), or set the framework variables yourself"))


def gpus_on_node(environ: Mapping[str, str], inputs: dict[str, tuple[str, ...]]) -> int | None:
    """``SLURM_GPUS_ON_NODE`` (srun.1, sbatch.1: OUTPUT ENVIRONMENT VARIABLES), its input
    added to ``inputs``."""
    if not environ.get("SLURM_GPUS_ON_NODE"):
        return None
    inputs["gpus"] = ("SLURM_GPUS_ON_NODE",)
    return variable_int(environ, "SLURM_GPUS_ON_NODE", 0, maximum=PER_NODE)


class Step:
    """The step's node variables, checked against each other and the job's ``job_hosts``, if any."""

    __slots__ = ("hosts", "node_id", "num_nodes")

    def __init__(self, environ: Mapping[str, str], job_hosts: tuple[str, ...] | None) -> None:
        self.num_nodes = variable_int(environ, "SLURM_STEP_NUM_NODES", 1)
        self.node_id = variable_int(environ, "SLURM_NODEID", 0)
        same_list = environ.get("SLURM_JOB_NODELIST") == environ["SLURM_STEP_NODELIST"]
        self.hosts = job_hosts if same_list and job_hosts else parsed(
            environ, "SLURM_STEP_NODELIST", expand_checked)
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
    """The MPI plugins' variables naming step ``this`` equal its ``facts``: ``PMI_JOBID``
    (src/plugins/mpi/pmi2/setup.c), ``PMIX_NAMESPACE=slurm.pmix.<job>.<step>``
    (pmix/pmixp_info.c), ``PALS_APID`` (cray_shasta/mpi_cray_shasta.c); another step's: a
    launcher inside it."""
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


# -- slurm-step --------------------------------------------------------------------------------


def _gtids(environ: Mapping[str, str]) -> tuple[int, ...] | None:
    """``SLURM_GTIDS``: the global ranks on this node (src/common/env.c ``setup_env``)."""
    value = environ.get("SLURM_GTIDS")
    if not value:
        return None
    try:
        return tuple(parse_int(item, minimum=0) for item in value.split(","))
    except ValueError:
        raise TopologyError(describe(
            "SLURM_GTIDS", value, "a comma-separated list of task ids such as 0,1")) from None


def _self_checks(environ: Mapping[str, str], files: Mapping[str, str | None], info: Step,
                 processes: Processes) -> tuple[str | None, list[str]]:
    """``(master, problems)``: rank 0's host when ``-m arbitrary`` proves it; what only this
    task can check (``SLURM_GTIDS``, ``SLURMD_NODENAME``, its hostfile line, rank 0's node)."""
    hosts, node_id = info.hosts, info.node_id
    rank, local_rank, _, local_world = processes[:4]
    problems: list[str] = []
    gtids = _gtids(environ)
    if gtids is not None:
        if len(gtids) != local_world:
            problems.append(describe(
                "SLURM_GTIDS", environ["SLURM_GTIDS"],
                f"{local_world} task ids, the count of node SLURM_NODEID={node_id} in "
                f"SLURM_STEP_TASKS_PER_NODE={environ['SLURM_STEP_TASKS_PER_NODE']!r}"))
        elif gtids[local_rank] != rank:
            problems.append(describe(
                "SLURM_GTIDS", environ["SLURM_GTIDS"],
                f"SLURM_PROCID={rank} at position SLURM_LOCALID={local_rank}"))
    node_name = environ.get("SLURMD_NODENAME")
    if node_name and node_name != hosts[node_id]:
        problems.append(describe(
            "SLURMD_NODENAME", node_name,
            f"{hosts[node_id]!r}, node SLURM_NODEID={node_id} of SLURM_STEP_NODELIST="
            f"{environ['SLURM_STEP_NODELIST']!r}"))
    master: str | None = None
    if _arbitrary(environ):
        master, own_line = arbitrary_master(environ, files, hosts, rank)
        if own_line is not None and own_line != hosts[node_id]:
            problems.append(
                f"SLURM_HOSTFILE={shorten(environ['SLURM_HOSTFILE'])!r}: expected line {rank + 1} "
                f"(rank SLURM_PROCID={rank}) to name this task's node {hosts[node_id]!r} "
                f"(SLURM_NODEID={node_id}), not {own_line!r}")
    # Rank 0's node, checked where this task can: it is rank 0, or its node holds rank 0.
    master_host = master or hosts[0]
    if (rank == 0 or (gtids is not None and 0 in gtids)) and hosts[node_id] != master_host:
        which = "SLURM_PROCID=0" if rank == 0 else f"SLURM_GTIDS={environ['SLURM_GTIDS']!r}"
        problems.append(
            f"{which} on node {hosts[node_id]!r} (SLURM_NODEID={node_id}): expected rank 0 "
            f"on {master_host!r}, " + ("the first host of SLURM_HOSTFILE" if master else
                                        "the first node of the step for distribution "
                                        f"{environ.get('SLURM_DISTRIBUTION') or 'block'}"))
    return master, problems


def _ports(environ: Mapping[str, str], inputs: dict[str, tuple[str, ...]]) -> tuple[int, ...]:
    """``SLURM_STEP_RESV_PORTS``, else none (the job and step ids seed the ports); adds the
    input to ``inputs``."""
    if not environ.get("SLURM_STEP_RESV_PORTS"):
        inputs["ports"] = ("SLURM_JOB_ID", "SLURM_STEP_ID")
        return ()
    inputs["ports"] = ("SLURM_STEP_RESV_PORTS",)
    return parsed(environ, "SLURM_STEP_RESV_PORTS", parse_resv_ports)


def _pty_notes(environ: Mapping[str, str], world: int,
               rank: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(notes, warnings)`` for ``SLURM_PTY_PORT``, never refused (recorded, tests/data/
    slurm-extra: ``srun -N2 --pty`` runs the command on both tasks, task 0 with the tty)."""
    if not environ.get("SLURM_PTY_PORT"):
        return (), ()
    notes = (f"SLURM_PTY_PORT is set: an srun --pty step, or a step started from one "
             f"({world} task(s))",)
    if world > 1 and rank == 0:
        return notes, (
            f"SLURM_PTY_PORT is set and the step has {world} tasks: if derive-env runs "
            "from an interactive srun --pty shell, the other tasks' shells ended at "
            "once (srun.1 --pty: only task 0 has the terminal) and the job will wait "
            "for them; start the shell with srun -N1 -n1 --pty and the job with srun "
            "from it",)
    return notes, ()


def read_step(environ: Mapping[str, str], title: str,
              files: Mapping[str, str | None] = {}) -> Report:
    """A task of an ``srun`` step: never the job's ``SLURM_NTASKS`` (kept by ``srun -E``,
    env.c); ``master`` only for ``-m arbitrary``; ``job`` = ("slurm", job, step).
    TopologyError: malformed or disagreeing values, another or a heterogeneous job, an
    unreadable hostfile, MPI plugin variables."""
    refuse_het(environ)
    job = job_id(environ)
    step = environ["SLURM_STEP_ID"]
    variable_int(environ, "SLURM_STEP_ID", 0)
    info = Step(environ, parsed(environ, "SLURM_JOB_NODELIST", expand_checked)
                if environ.get("SLURM_JOB_NODELIST") else None)
    processes = step_tasks(environ, info)
    rank, world = processes.rank, processes.world_size
    facts = {"SLURM_PROCID": rank, "SLURM_STEP_NUM_TASKS": world, "SLURM_NODEID": info.node_id}
    check_mpi_plugin(environ, f"{job}.{step}", facts)
    inputs: dict[str, tuple[str, ...]] = {
        "nodes": ("SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES"), "node_rank": ("SLURM_NODEID",),
        "processes": ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS",
                      "SLURM_STEP_TASKS_PER_NODE"),
        "rank": ("SLURM_PROCID",), "local_rank": ("SLURM_LOCALID",),
        "world_size": ("SLURM_STEP_NUM_TASKS",),  # and this node's entry of the list:
        "local_world_size": ("SLURM_STEP_TASKS_PER_NODE", "SLURM_NODEID")}
    master, problems = _self_checks(environ, files, info, processes)
    if _arbitrary(environ):
        inputs["master"] = ("SLURM_DISTRIBUTION", "SLURM_HOSTFILE")
    notes, warnings = _pty_notes(environ, world, rank)
    return Report(  # the ports' errors before the GPUs'
        source="slurm-step", title=title, nodes=_nodes(info.hosts), node_rank=info.node_id,
        processes=processes, master=master, reserved_ports=_ports(environ, inputs),
        job=("slurm", job, step), gpus=gpus_on_node(environ, inputs), session_id=job,
        inputs=inputs, order=_STEP_ORDER, notes=notes, warnings=warnings,
        problem=(f"{'; '.join(problems)}: {_COPIED}" if problems else None))


#: The nodes of a host list (cached: both lines of a step usually share the job's list).
_nodes = lru_cache(maxsize=4)(nodes_of)


# -- slurm-allocation --------------------------------------------------------------------------


def _allocation_node(
    environ: Mapping[str, str], hosts: tuple[str, ...], in_step: bool,
    inputs: dict[str, tuple[str, ...]],
) -> tuple[int | None, list[str], int | None]:
    """``(node rank, notes, gpus)``, the rank only when proven: in a step ``SLURM_NODEID``'s
    place (task.c); the batch script (``ENVIRONMENT=BATCH``, env.c
    ``env_array_for_batch_job``): 0 (sbatch.1), with GPUs; else none (salloc: a login node?)."""
    node_rank: int | None = None
    notes: list[str] = []
    gpus: int | None = None
    if environ.get(FLUX_TASK):
        # flux run copies the submitter's environment into every task (flux-run(1), --env):
        # SLURM_NODEID is the node of the process that submitted the Flux job, not this one.
        notes.append(f"a Flux task ({FLUX_TASK} set): Slurm's per-task variables (SLURM_NODEID, "
                     "SLURM_PROCID) were copied by flux run from the process that submitted "
                     "the job, so they are not this task's node")
    elif environ.get("SLURM_STEP_NODELIST") and environ.get("SLURM_NODEID"):
        if not environ.get("SLURM_STEP_NUM_NODES"):
            raise TopologyError(describe(
                "SLURM_STEP_NODELIST", environ["SLURM_STEP_NODELIST"],
                "SLURM_STEP_NUM_NODES to be set as well (srun sets both, src/common/env.c "
                "env_array_for_step)"))
        info = Step(environ, hosts)
        node_rank = hosts.index(info.hosts[info.node_id])
        inputs["node_rank"] = ("SLURM_STEP_NODELIST", "SLURM_NODEID", "SLURM_JOB_NODELIST")
        notes.append(f"in step {environ.get('SLURM_STEP_ID', '?')} of the job: its node "
                     f"SLURM_NODEID={info.node_id} is {info.hosts[info.node_id]!r}")
    elif in_step:
        notes.append("step variables incomplete (SLURM_STEP_NODELIST and SLURM_NODEID): "
                     "this process's node is not known")
    elif environ.get("ENVIRONMENT") == "BATCH" and environ.get("SLURMD_NODENAME") == hosts[0]:
        node_rank = 0
        inputs["node_rank"] = ("ENVIRONMENT", "SLURMD_NODENAME")
        notes.append("the batch script, on the job's first node")
        gpus = gpus_on_node(environ, inputs)
    elif len(hosts) == 1:
        notes.append("an salloc shell, or a process outside the job's node, of a one-node job")
    else:
        notes.append("an salloc shell or another process outside a step: its node is unknown")
    return node_rank, notes, gpus


def read_allocation(environ: Mapping[str, str], title: str) -> Report:
    """The job's allocation: ``SLURM_JOB_NODELIST`` against ``SLURM_JOB_NUM_NODES`` (and
    ``SLURM_NNODES`` outside a step, where srun rewrites it: ompi-in-sbatch); ``job`` =
    ("slurm", job, "allocation") in a step or not, so that ports agree. TopologyError:
    malformed or disagreeing values, a heterogeneous job, a step's node outside the job."""
    refuse_het(environ)
    job = job_id(environ)
    hosts = parsed(environ, "SLURM_JOB_NODELIST", expand_checked)
    count = variable_int(environ, "SLURM_JOB_NUM_NODES", 1)
    if count != len(hosts):
        raise TopologyError(describe(
            "SLURM_JOB_NUM_NODES", environ["SLURM_JOB_NUM_NODES"],
            f"the number of nodes in SLURM_JOB_NODELIST={environ['SLURM_JOB_NODELIST']!r} "
            f"({len(hosts)}); Slurm writes both for one job (src/common/env.c), so one was "
            "set by hand or inherited"))
    in_step = bool(environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_STEP_ID"))
    if not in_step and environ.get("SLURM_NNODES"):
        same_as(environ, ("SLURM_NNODES", variable_int(environ, "SLURM_NNODES", 1)),
                ("SLURM_JOB_NUM_NODES", count))
    inputs: dict[str, tuple[str, ...]] = {"nodes": ("SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES")}
    node_rank, notes, gpus = _allocation_node(environ, hosts, in_step, inputs)
    if len(hosts) == 1:
        node_rank = 0
        inputs.setdefault("node_rank", ("SLURM_JOB_NUM_NODES",))
    inputs["ports"] = ("SLURM_JOB_ID",)
    return Report(
        source="slurm-allocation", title=title, nodes=_nodes(hosts), node_rank=node_rank,
        job=("slurm", job, "allocation"), gpus=gpus, session_id=job, inputs=inputs,
        order=_JOB_ORDER, notes=tuple(notes),
        problem=alloc_problem(environ["SLURM_JOB_NUM_NODES"],
                              environ.get("SLURM_STEP_ID", "?") if in_step else None)
        if len(hosts) > 1 else None)
