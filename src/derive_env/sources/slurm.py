"""The Slurm source: what a task of an ``srun`` step and a batch script / salloc shell see.

Two table lines share this module (sources/__init__.py ``SOURCES``):

* ``slurm-step`` (sources.md 3.1): a task ``srun`` started. Both layers: the step's nodes
  in Slurm's order, this task's node, its rank, local rank and the step's sizes.
* ``slurm-allocation`` (sources.md 3.2): the job's allocation. The node layer at most: the
  job's hosts, and this process's node only when it is proven (module docstring of
  :func:`read_allocation`).

Every rule names the Slurm file it follows (SchedMD/slurm; recorded behaviour of Slurm
22.05 in tests/fixtures/recorded/README.md wins over the design notes where they differ).
Pure: reads only the mapping it is given, plus the content of ``SLURM_HOSTFILE`` that the
edge (app.py) read for it (:func:`files_needed`).

Errors are of two kinds. A value that is wrong whatever runs inside the step (a malformed
list, counts that do not add up, a step of another job) raises :class:`TopologyError`. A
self-check only this task can make (``SLURM_GTIDS``, ``SLURMD_NODENAME``, rank 0's node)
goes into :attr:`Report.problem`: MPICH Hydra copies those two variables from ``mpiexec``
into every rank (recordings mpich-in-sbatch), so the resolver raises the problem only when
no inner source (the MPI launcher) is seen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import TypeVar

from derive_env.errors import TopologyError, describe, shorten
from derive_env.hosts import check_hosts, host_problem, repeated_host
from derive_env.sources.report import Processes, Report
from derive_env.sources.slurm_grammar import (
    expand_hostlist,
    expand_tasks_per_node,
    parse_resv_ports,
)
from derive_env.topology import nodes_of

_DIGITS = "0123456789"
_T = TypeVar("_T")

#: Variables present only in a heterogeneous job or step (``srun ... : ...``, ``sbatch``
#: with ``hetjob``): Slurm 20.02+ writes ``SLURM_HET_SIZE`` (``env.c``
#: ``env_array_for_batch_job`` / ``env_array_for_step``), older releases ``SLURM_PACK_SIZE``.
_HET_SIZES = ("SLURM_HET_SIZE", "SLURM_PACK_SIZE")
#: Per-component suffixes (``SLURM_JOB_NODELIST_HET_GROUP_1``). Group 0 alone is also
#: written for ordinary steps (``SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0`` in every recorded
#: step inside an allocation), so only a group above 0 proves a second component.
_HET_GROUPS = ("_HET_GROUP_", "_PACK_GROUP_")

_FIX_STEP = ("run derive-env as the command of srun (srun --ntasks-per-node=1 derive-env -- "
             "torchrun ..., or srun derive-env -- python train.py for one process per task)")
_COPIED = ("this task's own Slurm variables contradict the step it names, as when a "
           "launcher inside the step (MPICH's mpiexec) copied them from another process; "
           "run derive-env directly under srun, or under an MPI launcher derive-env reads")
_ALLOC_PROBLEM = ("a batch script or salloc shell runs on one node; only srun starts the "
                  "others: run derive-env inside an srun step instead "
                  "(srun --ntasks-per-node=1 derive-env -- torchrun ...)")


def alloc_problem(value: str) -> str:
    """The message for a batch script or salloc shell of a multi-node job (sources.md 3.2)."""
    return describe("SLURM_JOB_NUM_NODES", value, "1 here: " + _ALLOC_PROBLEM)

_STEP_ORDER = ("SLURM_STEP_NODELIST order: Slurm's node index in the step, as SLURM_NODEID "
               "counts it (slurmstepd, src/slurmd/slurmstepd/task.c)")
_JOB_ORDER = ("SLURM_JOB_NODELIST order: the job's nodes in slurm.conf node order "
              "(src/common/hostlist.c hostlist_ranged_string)")


def files_needed(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """The files :func:`read` needs for table line ``name``: ``SLURM_HOSTFILE`` of an
    ``srun -m arbitrary`` step (its first host is rank 0's, srun.1 "arbitrary"), else none.

    :param environ: the process environment.
    :param name: ``slurm-step`` or ``slurm-allocation``.
    :returns: paths for the edge to read and pass to :func:`read` as ``files``.
    """
    if name == "slurm-step" and _arbitrary(environ) and environ.get("SLURM_HOSTFILE"):
        return (environ["SLURM_HOSTFILE"],)
    return ()


def read(environ: Mapping[str, str], name: str,
         files: Mapping[str, str | None] = {}) -> Report:
    """What Slurm states for table line ``name`` (``slurm-step`` or ``slurm-allocation``).

    :param environ: the process environment (only Slurm's variables are read, plus
        ``ENVIRONMENT`` that Slurm sets in a batch script).
    :param name: the table line.
    :param files: path -> content (``None``: unreadable) for :func:`files_needed`'s paths.
    :returns: the :class:`Report` (see :func:`read_step`, :func:`read_allocation`).
    :raises TopologyError: a malformed or inconsistent value, naming the variable(s).
    """
    if name == "slurm-step":
        return read_step(environ, files)
    if name == "slurm-allocation":
        return read_allocation(environ)
    raise ValueError(f"not a Slurm table line: {name!r}")


# -- shared checks -----------------------------------------------------------------------------


def _arbitrary(environ: Mapping[str, str]) -> bool:
    """``srun -m arbitrary`` (``SLURM_DISTRIBUTION`` from ``-m``, src/common/env.c
    ``_setup_distribution`` writes ``arbitrary``; a ``:socket`` part may follow)."""
    return environ.get("SLURM_DISTRIBUTION", "").startswith("arbitrary")


def _int(environ: Mapping[str, str], name: str, minimum: int) -> int:
    """``environ[name]`` as a decimal integer >= ``minimum`` (digits only, at most 18)."""
    value = environ[name]
    if not value or len(value) > 18 or any(c not in _DIGITS for c in value):
        raise TopologyError(describe(name, value, f"an integer >= {minimum}"))
    number = int(value)
    if number < minimum:
        raise TopologyError(describe(name, value, f"an integer >= {minimum}"))
    return number


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


def _parsed(environ: Mapping[str, str], name: str, parse: Callable[[str], _T]) -> _T:
    """``parse(environ[name])``; its ValueError (text completing "expected ...") becomes a
    TopologyError naming the variable and its value."""
    try:
        return parse(environ[name])
    except ValueError as exc:
        raise TopologyError(describe(name, environ[name], str(exc))) from None


def _hosts(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """Expand host list ``name`` (src/common/hostlist.c grammar) and check every host."""
    return _parsed(environ, name, _expand_checked)


def _job_id(environ: Mapping[str, str]) -> str:
    """``SLURM_JOB_ID``, checked against its old name ``SLURM_JOBID`` (src/common/env.c
    ``setup_env`` writes both from one value)."""
    job = environ["SLURM_JOB_ID"]
    _int(environ, "SLURM_JOB_ID", 1)
    alias = environ.get("SLURM_JOBID")
    if alias and alias != job:
        raise TopologyError(describe(
            "SLURM_JOBID", alias,
            f"the same job id as SLURM_JOB_ID={job!r} (Slurm sets both from one value); one "
            "of them was inherited from another job or set by hand: unset the stale one"))
    return job


def _refuse_het(environ: Mapping[str, str]) -> None:
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


def _gpus(environ: Mapping[str, str]) -> tuple[int | None, tuple[str, ...]]:
    """``SLURM_GPUS_ON_NODE``: the GPUs allocated on this node, an integer (srun.1 and
    sbatch.1, OUTPUT ENVIRONMENT VARIABLES); never ``SLURM_GPUS_PER_NODE``, the request
    (``a100:4``, sources.md 3.1 "GPUs")."""
    if not environ.get("SLURM_GPUS_ON_NODE"):
        return None, ()
    return _int(environ, "SLURM_GPUS_ON_NODE", 0), ("SLURM_GPUS_ON_NODE",)


# -- slurm-step --------------------------------------------------------------------------------


class _Step:
    """The step's variables, validated against each other (sources.md 3.1 "Consistency")."""

    __slots__ = ("hosts", "node_id", "num_nodes")

    def __init__(self, environ: Mapping[str, str], job_hosts: tuple[str, ...] | None) -> None:
        self.num_nodes = _int(environ, "SLURM_STEP_NUM_NODES", 1)
        self.node_id = _int(environ, "SLURM_NODEID", 0)
        same_list = environ.get("SLURM_JOB_NODELIST") == environ["SLURM_STEP_NODELIST"]
        self.hosts = job_hosts if same_list and job_hosts else _hosts(
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


def _job_hosts(environ: Mapping[str, str]) -> tuple[str, ...] | None:
    return _hosts(environ, "SLURM_JOB_NODELIST") if environ.get("SLURM_JOB_NODELIST") else None


def _same_as(environ: Mapping[str, str], name: str, number: int, other: str,
             expected: int) -> None:
    """Raise unless ``name`` (parsed) equals ``other``'s value ``expected``."""
    if number != expected:
        raise TopologyError(describe(
            name, environ[name],
            f"{expected}, as {other}={environ[other]!r}: both are Slurm's own for this step, "
            "so one was set by hand or inherited"))


def _check_mpi_plugin(environ: Mapping[str, str], job: str, step: str, rank: int,
                      node_id: int, world: int) -> None:
    """The variables of Slurm's own MPI plugins must agree with the step's.

    Only when they name this step: ``srun --mpi=pmi2`` sets ``PMI_RANK``, ``PMI_SIZE`` and
    ``PMI_JOBID=<job>.<step>`` (src/plugins/mpi/pmi2/setup.c); ``--mpi=pmix`` sets
    ``PMIX_RANK`` and ``PMIX_NAMESPACE=slurm.pmix.<job>.<step>`` (src/plugins/mpi/pmix/
    pmixp_info.c); ``--mpi=cray_shasta`` sets ``PALS_RANKID``, ``PALS_NODEID`` and
    ``PALS_APID=<job>.<step>`` (src/plugins/mpi/cray_shasta/mpi_cray_shasta.c; recorded).
    Values naming another job step come from a launcher inside the step (the resolver
    composes those); they are not read here.
    """
    this = f"{job}.{step}"
    if environ.get("PMI_JOBID") == this:
        if environ.get("PMI_RANK"):
            _same_as(environ, "PMI_RANK", _int(environ, "PMI_RANK", 0), "SLURM_PROCID", rank)
        if environ.get("PMI_SIZE"):
            _same_as(environ, "PMI_SIZE", _int(environ, "PMI_SIZE", 1),
                     "SLURM_STEP_NUM_TASKS", world)
    if environ.get("PMIX_NAMESPACE") == f"slurm.pmix.{this}" and environ.get("PMIX_RANK"):
        _same_as(environ, "PMIX_RANK", _int(environ, "PMIX_RANK", 0), "SLURM_PROCID", rank)
    if environ.get("PALS_APID") == this:
        if environ.get("PALS_RANKID"):
            _same_as(environ, "PALS_RANKID", _int(environ, "PALS_RANKID", 0), "SLURM_PROCID",
                     rank)
        if environ.get("PALS_NODEID"):
            _same_as(environ, "PALS_NODEID", _int(environ, "PALS_NODEID", 0), "SLURM_NODEID",
                     node_id)


def _gtids(environ: Mapping[str, str]) -> tuple[int, ...] | None:
    """``SLURM_GTIDS``: the global ranks on this node (src/common/env.c ``setup_env``)."""
    value = environ.get("SLURM_GTIDS")
    if not value:
        return None
    items = value.split(",")
    if any(not item or len(item) > 18 or any(c not in _DIGITS for c in item)
           for item in items):
        raise TopologyError(describe(
            "SLURM_GTIDS", value, "a comma-separated list of task ids such as 0,1"))
    return tuple(int(item) for item in items)


def _hostfile_hosts(path: str, text: str | None) -> list[str]:
    """The hosts of an ``srun -m arbitrary`` hostfile, in order (one per task).

    Follows ``slurm_read_hostfile`` (src/api/allocate.c): a ``#`` starts a comment unless
    escaped ``\\#``; empty lines are skipped; a line must start with a letter or digit; it
    holds ``,``-separated names, ``name*N`` meaning ``N`` times. Blanks around a line are
    ignored (Slurm refuses a leading blank, so srun never ran with one; leniency here cannot
    change a file srun accepted).
    """
    where = f"SLURM_HOSTFILE={shorten(path)!r}"
    if text is None:
        raise TopologyError(
            f"{where}: expected a regular file of at most 16 MiB this process can read "
            "(not a directory, FIFO or device): with SLURM_DISTRIBUTION="
            "arbitrary rank 0 runs on its first host, which no variable states; make the "
            "file visible at the same path inside the container (bind-mount its folder) "
            "or use another distribution (-m block)")
    hosts: list[str] = []
    checked: set[str] = set()  # a 4096-node file names each host many times: check it once
    for number, line in enumerate(text.splitlines(), 1):
        entry = _uncommented(line).strip()
        if not entry:
            continue
        if not entry[0].isascii() or not entry[0].isalnum():
            raise TopologyError(
                f"{where}: expected lines of Slurm node names (src/api/allocate.c "
                f"slurm_read_hostfile), not line {number} {_shorten_line(entry)!r}")
        for name in entry.split(","):
            host, star, times = name.partition("*")
            count = 1
            if star:
                if not times or len(times) > 6 or any(c not in _DIGITS for c in times):
                    raise TopologyError(
                        f"{where}: expected name or name*N on line {number}, not "
                        f"{_shorten_line(name)!r}")
                count = int(times)
            problem = None if host in checked else (host_problem(host) if host else
                                                    "a node name")
            checked.add(host)
            if problem:
                raise TopologyError(
                    f"{where}: expected {problem} on line {number}, not "
                    f"{_shorten_line(host)!r}")
            hosts += [host] * count
            if len(hosts) > 1 << 20:
                raise TopologyError(f"{where}: expected at most {1 << 20} tasks")
    if not hosts:
        raise TopologyError(f"{where}: expected at least one node name (the file is empty)")
    return hosts


def _uncommented(line: str) -> str:
    """``line`` without its ``#`` comment; ``\\#`` is a literal ``#`` (slurm_read_hostfile)."""
    if "\\#" not in line:
        return line.partition("#")[0]
    kept, i = [], 0
    while i < len(line):
        if line[i] == "#":
            if kept and kept[-1] == "\\":
                kept[-1] = "#"
                i += 1
                continue
            break
        kept.append(line[i])
        i += 1
    return "".join(kept)


def _shorten_line(text: str) -> str:
    """A hostfile line cut for a message."""
    return text if len(text) <= 80 else text[:80] + "..."


def _arbitrary_master(environ: Mapping[str, str], files: Mapping[str, str | None],
                      hosts: tuple[str, ...], rank: int) -> tuple[str, str | None]:
    """Rank 0's host of an arbitrary step: the first host of ``SLURM_HOSTFILE`` (srun.1
    "arbitrary": tasks follow the file's lines); and this task's line, when it has one."""
    path = environ.get("SLURM_HOSTFILE", "")
    if not path:
        raise TopologyError(describe(
            "SLURM_DISTRIBUTION", environ["SLURM_DISTRIBUTION"],
            "SLURM_HOSTFILE to be set as well: with arbitrary distribution rank 0 runs on "
            "the first host of that file, which no other variable states; set SLURM_HOSTFILE"
            " to the file srun used"))
    listed = _hostfile_hosts(path, files.get(path))
    master = listed[0]
    if master not in hosts:
        raise TopologyError(
            f"SLURM_HOSTFILE={shorten(path)!r}: expected its first host {master!r} (rank 0's) "
            f"to be a node of the step, SLURM_STEP_NODELIST="
            f"{environ['SLURM_STEP_NODELIST']!r}: the file was changed after srun read it, "
            "or belongs to another step")
    world = int(environ["SLURM_STEP_NUM_TASKS"])
    if len(listed) < world:
        # srun needs a line per task with -m arbitrary (src/api/allocate.c
        # slurm_read_hostfile): a shorter file is not the one this step was placed by.
        raise TopologyError(
            f"SLURM_HOSTFILE={shorten(path)!r}: expected a line for each of the "
            f"SLURM_STEP_NUM_TASKS={world} tasks (srun places task r on line r+1), not "
            f"{len(listed)}: the file was changed after srun read it, or belongs to another "
            "step")
    return master, listed[rank]


def read_step(environ: Mapping[str, str], files: Mapping[str, str | None] = {}) -> Report:
    """The ``slurm-step`` line: a task of an ``srun`` step (sources.md 3.1).

    Facts: ``nodes`` = ``SLURM_STEP_NODELIST`` expanded; ``node_rank`` = ``SLURM_NODEID``
    (an index into the step's list, task.c); processes = (``SLURM_PROCID``,
    ``SLURM_LOCALID``, ``SLURM_STEP_NUM_TASKS``, tasks per node [node rank], tasks per node)
    from ``SLURM_STEP_TASKS_PER_NODE``; never ``SLURM_NTASKS``/``SLURM_NPROCS`` (the job's,
    kept by ``srun -E``, env.c). ``master`` only for ``-m arbitrary`` (first host of
    ``SLURM_HOSTFILE``); block, cyclic and plane put rank 0 on ``nodes[0]``.
    ``reserved_ports`` from ``SLURM_STEP_RESV_PORTS``; ``job`` = ("slurm", job id, step id);
    ``gpus`` = ``SLURM_GPUS_ON_NODE``; ``session_id`` = ``SLURM_JOB_ID``.

    :param files: the content of ``SLURM_HOSTFILE`` for ``-m arbitrary`` (path -> text, or
        ``None`` when unreadable).
    :raises TopologyError: malformed values; sizes that disagree; ranks out of range; a step
        of another job; an unreadable or malformed hostfile; a heterogeneous step; Slurm's
        MPI plugin variables that contradict the step.
    """
    _refuse_het(environ)
    job = _job_id(environ)
    step = environ["SLURM_STEP_ID"]
    _int(environ, "SLURM_STEP_ID", 0)
    info = _Step(environ, _job_hosts(environ))
    hosts, node_id = info.hosts, info.node_id
    world = _int(environ, "SLURM_STEP_NUM_TASKS", 1)
    rank = _int(environ, "SLURM_PROCID", 0)
    local_rank = _int(environ, "SLURM_LOCALID", 0)
    tpn = _parsed(environ, "SLURM_STEP_TASKS_PER_NODE", expand_tasks_per_node)
    if len(tpn) != info.num_nodes:
        raise TopologyError(describe(
            "SLURM_STEP_TASKS_PER_NODE", environ["SLURM_STEP_TASKS_PER_NODE"],
            f"one task count per node of the step, SLURM_STEP_NUM_NODES={info.num_nodes}, "
            f"not {len(tpn)}"))
    if sum(tpn) != world:
        raise TopologyError(describe(
            "SLURM_STEP_TASKS_PER_NODE", environ["SLURM_STEP_TASKS_PER_NODE"],
            f"task counts adding up to SLURM_STEP_NUM_TASKS={world}, not {sum(tpn)}"))
    if rank >= world:
        raise TopologyError(describe(
            "SLURM_PROCID", environ["SLURM_PROCID"],
            f"a rank below SLURM_STEP_NUM_TASKS={world}"))
    local_world = tpn[node_id]
    if local_rank >= local_world:
        raise TopologyError(describe(
            "SLURM_LOCALID", environ["SLURM_LOCALID"],
            f"a local rank below {local_world}, the task count of node SLURM_NODEID="
            f"{node_id} in SLURM_STEP_TASKS_PER_NODE={environ['SLURM_STEP_TASKS_PER_NODE']!r}"))
    _check_mpi_plugin(environ, job, step, rank, node_id, world)

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

    inputs: dict[str, tuple[str, ...]] = {
        "nodes": ("SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES"),
        "node_rank": ("SLURM_NODEID",),
        "processes": ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS",
                      "SLURM_STEP_TASKS_PER_NODE"),
    }
    master: str | None = None
    master_host = hosts[0]
    if _arbitrary(environ):
        master, own_line = _arbitrary_master(environ, files, hosts, rank)
        master_host = master
        inputs["master"] = ("SLURM_DISTRIBUTION", "SLURM_HOSTFILE")
        if own_line is not None and own_line != hosts[node_id]:
            problems.append(
                f"SLURM_HOSTFILE={shorten(environ['SLURM_HOSTFILE'])!r}: expected line {rank + 1} "
                f"(rank SLURM_PROCID={rank}) to name this task's node {hosts[node_id]!r} "
                f"(SLURM_NODEID={node_id}), not {own_line!r}")
    # Rank 0's node, checked where this task can: it is rank 0, or its node holds rank 0.
    holds_zero = rank == 0 or (gtids is not None and 0 in gtids)
    if holds_zero and hosts[node_id] != master_host:
        which = "SLURM_PROCID=0" if rank == 0 else f"SLURM_GTIDS={environ['SLURM_GTIDS']!r}"
        problems.append(
            f"{which} on node {hosts[node_id]!r} (SLURM_NODEID={node_id}): expected rank 0 "
            f"on {master_host!r}, " + ("the first host of SLURM_HOSTFILE" if master else
                                        "the first node of the step for distribution "
                                        f"{environ.get('SLURM_DISTRIBUTION') or 'block'}"))

    ports: tuple[int, ...] = ()
    if environ.get("SLURM_STEP_RESV_PORTS"):
        ports = _parsed(environ, "SLURM_STEP_RESV_PORTS", parse_resv_ports)
        inputs["ports"] = ("SLURM_STEP_RESV_PORTS",)
    else:
        inputs["ports"] = ("SLURM_JOB_ID", "SLURM_STEP_ID")
    gpus, gpu_inputs = _gpus(environ)
    if gpu_inputs:
        inputs["gpus"] = gpu_inputs

    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    if environ.get("SLURM_PTY_PORT"):
        # Recorded (tests/data/slurm-extra): srun -N2 --pty runs the command on both tasks,
        # only task 0 with the terminal; and an srun inside a pty shell passes
        # SLURM_PTY_PORT on to its tasks. So the step is described as it is, never refused.
        notes = (f"SLURM_PTY_PORT is set: an srun --pty step, or a step started from one "
                 f"({world} task(s))",)
        if world > 1 and rank == 0:
            warnings = (
                f"SLURM_PTY_PORT is set and the step has {world} tasks: if derive-env runs "
                "from an interactive srun --pty shell, the other tasks' shells ended at "
                "once (srun.1 --pty: only task 0 has the terminal) and the job will wait "
                "for them; start the shell with srun -N1 -n1 --pty and the job with srun "
                "from it",)
    return Report(
        source="slurm-step",
        title="a Slurm step (srun)",
        nodes=_nodes(hosts),
        node_rank=node_id,
        processes=Processes(rank, local_rank, world, local_world, tpn),
        master=master,
        reserved_ports=ports,
        job=("slurm", job, step),
        gpus=gpus,
        session_id=job,
        inputs=inputs,
        order=_STEP_ORDER,
        notes=notes,
        warnings=warnings,
        problem=(f"{'; '.join(problems)}: {_COPIED}" if problems else None),
    )


#: The nodes of a host list (cached: both lines of a step usually share the job's list).
_nodes = lru_cache(maxsize=4)(nodes_of)


# -- slurm-allocation --------------------------------------------------------------------------


def read_allocation(environ: Mapping[str, str]) -> Report:
    """The ``slurm-allocation`` line: the job's allocation (sources.md 3.2).

    Facts: ``nodes`` = ``SLURM_JOB_NODELIST`` expanded, checked against
    ``SLURM_JOB_NUM_NODES`` (and ``SLURM_NNODES`` outside a step, where srun rewrites it to
    the step's count: recording ompi-in-sbatch). ``node_rank``, only when proven:

    * in a step (``SLURM_STEP_NODELIST`` and ``SLURM_NODEID`` set, e.g. the daemon step of
      an MPI launcher): the position in the job's hosts of the step's node
      ``SLURM_NODEID`` (task.c numbers it within the step);
    * outside any step, in a batch script (``ENVIRONMENT=BATCH``, env.c
      ``env_array_for_batch_job``) whose ``SLURMD_NODENAME`` is the job's first host: 0
      (the batch script runs on the first node, sbatch.1);
    * else ``None`` (an salloc shell runs where salloc runs, often a login node).

    A job of one node: that host, node rank 0. A job of more nodes: :attr:`Report.problem`
    says that only srun starts the other nodes (the resolver raises it when no inner
    source, such as an MPI launcher started from the script, uses the host list).
    ``job`` = ("slurm", job id, "allocation"): one value for every process of the
    allocation, in a step or not, so that ports agree.

    :raises TopologyError: malformed values; counts that disagree; a heterogeneous job;
        step variables whose node is not one of the job's.
    """
    _refuse_het(environ)
    job = _job_id(environ)
    hosts = _hosts(environ, "SLURM_JOB_NODELIST")
    count = _int(environ, "SLURM_JOB_NUM_NODES", 1)
    if count != len(hosts):
        raise TopologyError(describe(
            "SLURM_JOB_NUM_NODES", environ["SLURM_JOB_NUM_NODES"],
            f"the number of nodes in SLURM_JOB_NODELIST={environ['SLURM_JOB_NODELIST']!r} "
            f"({len(hosts)}); Slurm writes both for one job (src/common/env.c), so one was "
            "set by hand or inherited"))
    in_step = bool(environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_STEP_ID"))
    if not in_step and environ.get("SLURM_NNODES"):
        _same_as(environ, "SLURM_NNODES", _int(environ, "SLURM_NNODES", 1),
                 "SLURM_JOB_NUM_NODES", count)
    inputs: dict[str, tuple[str, ...]] = {"nodes": ("SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES")}
    node_rank: int | None = None
    notes: list[str] = []
    gpus: int | None = None
    if environ.get("SLURM_STEP_NODELIST") and environ.get("SLURM_NODEID"):
        if not environ.get("SLURM_STEP_NUM_NODES"):
            raise TopologyError(describe(
                "SLURM_STEP_NODELIST", environ["SLURM_STEP_NODELIST"],
                "SLURM_STEP_NUM_NODES to be set as well (srun sets both, src/common/env.c "
                "env_array_for_step)"))
        info = _Step(environ, hosts)
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
        gpus, gpu_inputs = _gpus(environ)
        if gpu_inputs:
            inputs["gpus"] = gpu_inputs
    elif len(hosts) == 1:
        notes.append("an salloc shell, or a process outside the job's node, of a one-node job")
    else:
        notes.append("an salloc shell or another process outside a step: its node is unknown")
    if len(hosts) == 1:
        node_rank = 0
        inputs.setdefault("node_rank", ("SLURM_JOB_NUM_NODES",))
    inputs["ports"] = ("SLURM_JOB_ID",)
    return Report(
        source="slurm-allocation",
        title="a Slurm allocation (batch script or salloc shell)",
        nodes=_nodes(hosts),
        node_rank=node_rank,
        job=("slurm", job, "allocation"),
        gpus=gpus,
        session_id=job,
        inputs=inputs,
        order=_JOB_ORDER,
        notes=tuple(notes),
        problem=alloc_problem(environ["SLURM_JOB_NUM_NODES"]) if len(hosts) > 1 else None,
    )
