"""MPI launchers: Open MPI, MVAPICH2, MPICH Hydra / Intel MPI, HPE Cray PALS (sources.md 3.3, 3.4).

One module for four table lines (:data:`derive_env.sources.SOURCES`): ``openmpi``,
``mvapich2``, ``hydra``, ``pals``. Each launcher states the process layer in its own four
variables (rank, local rank, world size, local world size); that is all this module reports
as ``processes``. A launcher's environment has no host list, so ``nodes`` stays empty and
``master`` ``None``: the composer takes the node layer from the allocation the launcher runs
in (Slurm, Backend.AI) or reports a partial topology. The exception is PALS, whose
``PALS_NODEID`` is a real node index (``node_rank``).

What is deliberately not read, and why:

- ``OMPI_COMM_WORLD_NODE_RANK`` is not a node index: Open MPI documents it as "the relative
  rank of this process on this node looking across all jobs" (docs/tuning-apps/
  environment-var.rst in open-mpi/ompi v5.0.x); the recordings show it equal to the local
  rank (ompi-ssh rank3: ``OMPI_COMM_WORLD_NODE_RANK=1`` on the second node).
- ``OMPI_UNIVERSE_SIZE`` counts slots, not processes (ompi-ssh: 8 with 6 processes).
- ``OMPI_MCA_orte_num_nodes`` (Open MPI 4) is an internal MCA parameter ORTE passes to its
  ess framework: not in the list of variables Open MPI sets for applications, gone in
  Open MPI 5 (PRRTE), and a node count without this process's node index places nobody.
- ``OMPI_MCA_orte_hnp_uri`` is mpirun's own address, which may run no rank (ompi-ssh: the
  login node); ``PMIX_SERVER_URI*`` is the node-local PMIx server (127.0.0.1 in every
  recording, open-mpi#13180): neither is ever a master address.
- a local rank is never derived from a global rank (``PMI_RANK % n``: anemoi's bug,
  DeepSpeed#3408): only the launcher's own local-rank variable is used.

Two vocabularies of one launcher must agree (sources.md 3.4, as DeepSpeed's
``launcher_helper`` does for ``PMIX_RANK``/``PMI_RANK``): Open MPI 4 and 5 also set
``PMIX_RANK`` (its own PMIx server; ompi-ssh); MVAPICH2 also sets ``PMI_ID`` and
``MPIRUN_NPROCS`` (mpirun_rsh) or ``PMI_RANK`` and ``PMI_SIZE`` (its mpiexec); PALS sets
``PMI_RANK``, ``PMI_LOCAL_RANK``, ``PMI_LOCAL_SIZE`` beside its ``PALS_*``. Hydra writes
only ``PMI_*`` and ``MPI_LOCAL*``: no second vocabulary. Only a launcher's own companion
variables are compared: Hydra copies mpiexec's whole environment into every rank
(mpich-in-sbatch), so another launcher's variables there can be stale.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from derive_env.errors import TopologyError, describe
from derive_env.sources.report import Processes, Report
from derive_env.validation import parse_int, variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source


class _Vocabulary(NamedTuple):
    """One launcher's variables, by fact.

    :ivar rank: global rank, 0-based.
    :ivar local_rank: rank among this job's processes on this node, 0-based.
    :ivar world_size: processes of the job.
    :ivar local_world_size: processes of the job on this node.
    :ivar node_rank: this node's index among the job's nodes, when the launcher states it.
    :ivar job: a job id every process of the job shares (for the port policy).
    :ivar companions: ``(variable, fact)``: the same fact in another vocabulary the launcher
        also writes; checked when set.
    """

    rank: str
    local_rank: str
    world_size: str
    local_world_size: str
    node_rank: str | None = None
    job: str | None = None
    companions: tuple[tuple[str, str], ...] = ()


#: Per table line. The four detect variables of each line in SOURCES are exactly the
#: vocabulary's four process variables (plus PALS_NODEID for pals).
VOCABULARIES: dict[str, _Vocabulary] = {
    # open-mpi/ompi v5.0.x docs/tuning-apps/environment-var.rst ("Environment variables set
    # for MPI applications"), the same four in 4.1 (recorded: ompi-ssh, ompi-in-*). PMIX_RANK
    # and PMIX_NAMESPACE come from mpirun's own PMIx server in 4.1 (recorded) and 5.x.
    "openmpi": _Vocabulary(
        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_SIZE", job="PMIX_NAMESPACE",
        companions=(("PMIX_RANK", "rank"),),
    ),
    # MVAPICH2 2.3 user guide, section "MPIRUN_RSH Parameters" (MV2_COMM_WORLD_*);
    # mpirun_rsh's mpispawn also sets PMI_ID (the rank) and MPIRUN_NPROCS (the world size;
    # src/pm/mpirun/mpispawn.c setup_local_environment / setup_global_environment), its
    # Hydra-based mpiexec PMI_RANK / PMI_SIZE.
    "mvapich2": _Vocabulary(
        "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_SIZE",
        "MV2_COMM_WORLD_LOCAL_SIZE",
        companions=(("PMI_RANK", "rank"), ("PMI_ID", "rank"), ("PMI_SIZE", "world_size"),
                    ("MPIRUN_NPROCS", "world_size")),
    ),
    # pmodels/mpich src/pm/hydra/proxy/pmip_cb.c launch_procs: MPI_LOCALNRANKS,
    # MPI_LOCALRANKID, then PMI_RANK, PMI_FD, PMI_SIZE (recorded from MPICH 4.0.2:
    # mpich-ssh, mpich-in-*). With -pmi-port it sets PMI_PORT and PMI_ID instead of
    # PMI_RANK, PMI_FD and PMI_SIZE: no world size, so the line is not seen. Intel MPI's
    # mpiexec.hydra, derived from it, writes the same four (accelerate utils/environment.py
    # and DeepSpeed's launcher read them for Intel MPI). No job id: Hydra sets no PMI_JOBID.
    "hydra": _Vocabulary(
        "PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", "MPI_LOCALNRANKS",
    ),
    # HPE Cray PALS mpiexec (ALCF Polaris/Aurora user guides; argonne-lcf launcher scripts
    # read PMI_RANK, PMI_SIZE, PMI_LOCAL_RANK; Aurora jobs read PALS_LOCAL_SIZE): PALS_RANKID,
    # PALS_LOCAL_RANKID, PALS_LOCAL_SIZE, PALS_NODEID, PALS_APID plus Cray PMI's PMI_*.
    # PALS has no world-size variable of its own: PMI_SIZE is it.
    "pals": _Vocabulary(
        "PALS_RANKID", "PALS_LOCAL_RANKID", "PMI_SIZE", "PALS_LOCAL_SIZE",
        node_rank="PALS_NODEID", job="PALS_APID",
        companions=(("PMI_RANK", "rank"), ("PMI_LOCAL_RANK", "local_rank"),
                    ("PMI_LOCAL_SIZE", "local_world_size")),
    ),
}

_FACTS = {"rank": "global rank", "local_rank": "local rank", "world_size": "world size",
          "local_world_size": "local world size"}


def _integer(environ: Mapping[str, str], name: str, minimum: int, what: str) -> int:
    """``environ[name]`` as an integer >= ``minimum``; ``what`` says what it counts."""
    return variable_int(environ, name, minimum, f" ({what})")


def _check_order(environ: Mapping[str, str], low: str, low_n: int, high: str, high_n: int,
                 strict: bool, title: str) -> None:
    """Raise unless ``low_n < high_n`` (``strict``) or ``low_n <= high_n``."""
    if low_n < high_n or (not strict and low_n == high_n):
        return
    bound = f"below {high}={environ[high]!r}" if strict else f"at most {high}={environ[high]!r}"
    raise TopologyError(describe(
        low, environ[low],
        f"a value {bound}: {title} set both for this process and they contradict each other"
        " (a wrapper or the user exported one of them by hand: unset it)",
    ))


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """The process layer one MPI launcher states (table line ``line``).

    :param environ: the process's environment; only the line's own variables are read
        (:data:`VOCABULARIES`).
    :param line: ``openmpi``, ``mvapich2``, ``hydra`` or ``pals``; called only when the
        line's detect variables are all set.
    :param files: unused (no MPI launcher states a file).
    :returns: a :class:`Report` with ``processes`` (and ``node_rank`` for PALS, ``job`` and
        ``session_id`` when the launcher gives a shared job id), no nodes, no master.
    :raises TopologyError: a variable is not a decimal integer (ranks >= 0, sizes >= 1), a
        rank is not below its size, the local world size exceeds the world size, or a
        companion variable disagrees with the launcher's own (both named, with values).
    """
    vocabulary = VOCABULARIES[line.name]
    processes = _processes(environ, vocabulary, line.title)
    notes = _companions(environ, vocabulary, processes, line.title)
    inputs = {"processes": (vocabulary.rank, vocabulary.local_rank, vocabulary.world_size,
                            vocabulary.local_world_size),
              **{fact: (getattr(vocabulary, fact),) for fact in _FACTS}}
    node_rank = None
    if vocabulary.node_rank is not None:
        node_rank = _integer(environ, vocabulary.node_rank, 0, "this node's index in the job")
        # Every node of the job runs at least one of its processes.
        _check_order(environ, vocabulary.node_rank, node_rank, vocabulary.world_size,
                     processes.world_size, True, line.title)
        inputs["node_rank"] = (vocabulary.node_rank,)
    job_id = environ.get(vocabulary.job, "") if vocabulary.job else ""
    if job_id:
        inputs["ports"] = (vocabulary.job,)
    return Report(
        source=line.name,
        title=line.title,
        node_rank=node_rank,
        processes=processes,
        job=(line.name, job_id, "") if job_id else None,
        session_id=job_id or None,
        inputs=inputs,
        notes=notes,
    )


def _processes(environ: Mapping[str, str], vocabulary: _Vocabulary, title: str) -> Processes:
    """The launcher's four process variables, each checked against the others."""
    world = _integer(environ, vocabulary.world_size, 1,
                     f"the number of processes {title} started")
    local_world = _integer(environ, vocabulary.local_world_size, 1,
                           "the number of this job's processes on this node")
    rank = _integer(environ, vocabulary.rank, 0, "this process's global rank")
    local_rank = _integer(environ, vocabulary.local_rank, 0,
                          "this process's rank on its node")
    _check_order(environ, vocabulary.rank, rank, vocabulary.world_size, world, True, title)
    _check_order(environ, vocabulary.local_rank, local_rank, vocabulary.local_world_size,
                 local_world, True, title)
    _check_order(environ, vocabulary.local_world_size, local_world, vocabulary.world_size,
                 world, False, title)
    return Processes(rank, local_rank, world, local_world)


def _companions(environ: Mapping[str, str], vocabulary: _Vocabulary, processes: Processes,
                title: str) -> tuple[str, ...]:
    """Notes for the companion variables that are set, each equal to the launcher's own
    (module docstring); TopologyError naming both when one is not."""
    notes = []
    for companion, fact in vocabulary.companions:
        value = environ.get(companion)
        if not value:
            continue
        own = getattr(vocabulary, fact)
        try:
            agrees = parse_int(value, minimum=0) == getattr(processes, fact)
        except ValueError:
            agrees = False
        if not agrees:
            raise TopologyError(describe(
                companion, value,
                f"the same {_FACTS[fact]} as {own}={environ[own]!r}: {title} sets both for "
                "one process, so they disagree only when one was exported by hand or "
                f"inherited from another job; unset {companion} or {own}, whichever is stale",
            ))
        notes.append(f"{companion} agrees with {own}")
    return tuple(notes)
