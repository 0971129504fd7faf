"""Sources: one module per cluster manager or launcher, each reporting what it saw.

:data:`SOURCES` is the table, one line per source (its complete set of variables, its depth
in the launch); :func:`seen_sources` finds the lines whose variables are all set without
importing any module. Each module has ``read(environ, name) -> Report``
(sources/report.py); :func:`topology_from` hands every seen source's report to the
resolver (sources/resolve.py), which composes one topology. Adding a source is one module
plus one line here. :data:`LAUNCHERS` refuses launchers derive-env cannot read (no source,
or a partial set of a source's variables) rather than describe one process of a larger job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from derive_env.errors import TopologyError, describe
from derive_env.topology import ClusterTopology
from derive_env.validation import static_count

#: Variables through which another launcher (torchrun, Kubeflow, MPI wrappers...) states a
#: multi-node or multi-process topology, with the value a single container has. Checked only
#: when no cluster manager stated the nodes: inside a session they are user values
#: (contract section 6, :mod:`derive_env.environ`).
_SINGLE_VALUES = {"WORLD_SIZE": 1, "RANK": 0, "NODE_RANK": 0, "PET_NNODES": 1,
                  "PET_NODE_RANK": 0, "GROUP_RANK": 0}


class Launcher(NamedTuple):
    """How a launcher derive-env has no source for states ranks or sizes (sources.md 3).

    :ivar name: for messages.
    :ivar detect: its complete set of variables (all present: this launcher started us).
    :ivar states: ``(variable, single-process value)``: one set to anything else states
        more than one process, complete set or not.
    :ivar fix: what to do, ending the message.
    :ivar unless: variables whose presence means another context (a Slurm step, not the
        batch script); the launcher is then not considered.
    :ivar sized: False when the complete set cannot tell the job's size (PMIx, Kubernetes):
        then the set alone is refused, on every process alike.
    :ivar partial: whether ``states`` count without the complete set (an MPI rank alone is
        still an MPI job; a batch script's node count alone is not a batch script).
    :ivar unit: what the size counts (``process``, ``node``), for messages.
    """

    name: str
    detect: tuple[str, ...]
    states: tuple[tuple[str, int], ...]
    fix: str
    unless: tuple[str, ...] = ()
    sized: bool = True
    partial: bool = True
    unit: str = "process"
    source: str | None = None


_NO_SOURCE = "derive-env has no source for it yet (planned)"
_WARN = ("or set label ai.backend.distributed.on-error=warn to run it with the environment "
         "unchanged")
_RUN_WITHOUT = f"Run the command without derive-env (set the framework variables from the " \
               f"launcher's), {_WARN}"

#: Launchers in precedence order, innermost first (sources.md 3.13): the first that states
#: more than one process is named.
LAUNCHERS: tuple[Launcher, ...] = (
    Launcher(
        "torchrun (torchelastic)", ("TORCHELASTIC_RUN_ID",),
        (("GROUP_WORLD_SIZE", 1), ("GROUP_RANK", 0), ("WORLD_SIZE", 1), ("RANK", 0),
         ("LOCAL_WORLD_SIZE", 1)),
        "derive-env runs inside a torchrun worker; start it outside instead: "
        "derive-env -- torchrun ... (it sets torchrun's PET_* defaults)", partial=False,
        source="torchrun",
    ),
    Launcher(
        "Open MPI (mpirun)",
        ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
         "OMPI_COMM_WORLD_LOCAL_SIZE"),
        (("OMPI_COMM_WORLD_SIZE", 1), ("OMPI_COMM_WORLD_RANK", 0),
         ("OMPI_COMM_WORLD_LOCAL_SIZE", 1), ("OMPI_COMM_WORLD_LOCAL_RANK", 0)),
        _RUN_WITHOUT, source="openmpi",
    ),
    Launcher(
        "MVAPICH2 (mpirun_rsh)",
        ("MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
         "MV2_COMM_WORLD_LOCAL_SIZE"),
        (("MV2_COMM_WORLD_SIZE", 1), ("MV2_COMM_WORLD_RANK", 0),
         ("MV2_COMM_WORLD_LOCAL_SIZE", 1), ("MV2_COMM_WORLD_LOCAL_RANK", 0)),
        _RUN_WITHOUT, source="mvapich2",
    ),
    Launcher(
        "Cray PALS (mpiexec)",
        ("PALS_RANKID", "PALS_LOCAL_RANKID", "PALS_LOCAL_SIZE", "PALS_NODEID", "PMI_SIZE"),
        (("PALS_RANKID", 0), ("PALS_LOCAL_RANKID", 0), ("PALS_NODEID", 0)),
        _RUN_WITHOUT, source="pals",
    ),
    Launcher(
        "a PMI launcher (MPICH Hydra, Intel MPI, srun --mpi=pmi2, Flux)",
        ("PMI_RANK", "PMI_SIZE"),
        (("PMI_SIZE", 1), ("PMI_RANK", 0), ("PMI_LOCAL_SIZE", 1), ("PMI_LOCAL_RANK", 0),
         ("MPI_LOCALNRANKS", 1), ("MPI_LOCALRANKID", 0)),
        _RUN_WITHOUT, source="hydra",
    ),
    Launcher(
        "a PMIx launcher (srun --mpi=pmix, prterun without Open MPI's variables)",
        ("PMIX_RANK", "PMIX_NAMESPACE"),
        (("PMIX_RANK", 0),), _RUN_WITHOUT, sized=False, source="openmpi",
    ),
    Launcher(
        "a Slurm step (srun)",
        ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES",
         "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_PROCID", "SLURM_LOCALID",
         "SLURM_NODEID"),
        (("SLURM_STEP_NUM_TASKS", 1), ("SLURM_STEP_NUM_NODES", 1), ("SLURM_PROCID", 0),
         ("SLURM_NODEID", 0), ("SLURM_LOCALID", 0)),
        _RUN_WITHOUT, source="slurm-step",
    ),
    Launcher(
        "a Slurm batch script or salloc shell",
        ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES"),
        (("SLURM_JOB_NUM_NODES", 1), ("SLURM_NNODES", 1)),
        "The batch script runs on the first node only and only srun starts the others: run "
        "derive-env inside the srun step (srun --ntasks-per-node=1 derive-env -- torchrun ...)",
        unless=("SLURM_STEP_ID", "SLURM_STEP_NODELIST"), partial=False, unit="node",
        source="slurm-allocation",
    ),
    Launcher(
        "Flux", ("FLUX_JOB_ID", "FLUX_JOB_SIZE", "FLUX_TASK_RANK"),
        (("FLUX_JOB_SIZE", 1), ("FLUX_TASK_RANK", 0), ("FLUX_JOB_NNODES", 1)), _RUN_WITHOUT,
    ),
    Launcher(
        "LSF jsrun", ("JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_RANK"),
        (("JSM_NAMESPACE_SIZE", 1), ("JSM_NAMESPACE_RANK", 0), ("JSM_NAMESPACE_LOCAL_RANK", 0)),
        _RUN_WITHOUT,
    ),
    Launcher(
        "a Kubernetes indexed job", ("JOB_COMPLETION_INDEX", "KUBERNETES_SERVICE_HOST"),
        (("JOB_COMPLETION_INDEX", 0),), _RUN_WITHOUT, sized=False,
    ),
    Launcher(
        "SageMaker", ("SM_HOSTS", "SM_CURRENT_HOST"), (), _RUN_WITHOUT, unit="host",
    ),
    Launcher(
        "AWS Batch multi-node parallel", ("AWS_BATCH_JOB_NUM_NODES", "AWS_BATCH_JOB_NODE_INDEX"),
        (("AWS_BATCH_JOB_NUM_NODES", 1), ("AWS_BATCH_JOB_NODE_INDEX", 0)), _RUN_WITHOUT,
    ),
)


def _single(value: str, single: int) -> bool:
    """Whether ``value`` states the single-container value (``01``, torchrun's ``1:1`` too)."""
    return static_count(value) == single


def _sagemaker_hosts(value: str) -> int | None:
    """The number of hosts in ``SM_HOSTS`` (a JSON list), ``None`` when unreadable."""
    import json

    try:
        hosts = json.loads(value)
    except (ValueError, RecursionError):
        return None
    return len(hosts) if isinstance(hosts, list) else None


def launcher_problem(
    environ: Mapping[str, str],
    session: str | None,
    seen: frozenset[str] = frozenset(),
    launched: bool = False,
) -> str | None:
    """Say which launcher started more than one process without a usable source, or ``None``.

    derive-env refuses rather than describe one process under a multi-process launcher it
    cannot read (every process of such a job would derive a job of one): a launcher it has
    no source for, or one whose variables are only partly set (a partial set never selects
    a source, sources.md 3.13).

    :param session: the cluster manager session the container is in (``"a Backend.AI
        session of 3 nodes"``), or ``None`` for none.
    :param seen: the names of the sources that were seen (their launchers are read).
    :param launched: a seen source stated the process layer: then a launcher that has a
        source but only part of its variables set is that source's companion (``srun
        --mpi=pmi2`` sets ``PMI_RANK`` and ``PMI_SIZE``), checked by that source.
    :returns: the message, naming the variable, the launcher and the fix.
    """
    unsized: Launcher | None = None  # a launcher that started us without saying the size
    sized = False  # some launcher's complete set states the size (one process)
    for launcher in LAUNCHERS:
        if any(environ.get(name) for name in launcher.unless):
            continue
        if launcher.source is not None and (launcher.source in seen or launched):
            continue
        complete = all(environ.get(name) for name in launcher.detect)
        if not complete and not launcher.partial:
            continue
        stated = [(name, environ[name]) for name, single in launcher.states
                  if environ.get(name) and not _single(environ[name], single)]
        if launcher.name == "SageMaker" and complete:
            count = _sagemaker_hosts(environ["SM_HOSTS"])
            if count != 1:
                stated = [("SM_HOSTS", environ["SM_HOSTS"])]
        if stated:
            name, value = stated[0]
            single = dict(launcher.states).get(name, "a JSON list of one host")
            if launcher.source is not None:
                table = next(t for t in SOURCES if t.name == launcher.source)
                missing = [n for n in table.detect if not environ.get(n)]
                return describe(
                    name, value,
                    f"{single} or unset: {launcher.name} states a job of more than one "
                    f"{launcher.unit}, but only part of its variables are set (not set: "
                    f"{', '.join(missing)}), and a partial set is never used: it may be "
                    "left over from another job. Run derive-env in the launcher's own "
                    f"process (the launcher sets all of them), {_WARN}",
                )
            outcome = (f"inside {session}, whose nodes derive-env cannot combine with the "
                       "launcher's ranks" if session else
                       f"derive-env would describe a job of one {launcher.unit}")
            return describe(
                name, value,
                f"{single} or unset: {launcher.name} states a job of more than one "
                f"{launcher.unit}, and {_NO_SOURCE}; {outcome}. {launcher.fix}",
            )
        if complete and launcher.sized:
            sized = True
        elif complete and unsized is None:
            unsized = launcher
    if unsized is not None and not sized:
        # Open MPI also sets PMIx's variables, and its own say the size: only PMIx (or a
        # Kubernetes index) alone leaves it unknown.
        name = unsized.detect[0]
        return describe(
            name, environ[name],
            f"unset: {unsized.name} started this process ({' and '.join(unsized.detect)} "
            f"are set) without saying how many processes the job has, and {_NO_SOURCE}; "
            f"describing a job of one process could be wrong. {unsized.fix}",
        )
    return None


def check_single_container(environ: Mapping[str, str]) -> None:
    """Refuse a single-container topology that another launcher's variables contradict.

    Used when no cluster manager stated the nodes (no ``BACKENDAI_CLUSTER_*``): then
    ``WORLD_SIZE=4`` or ``RANK=2`` come from a launcher derive-env has no source for, and
    describing one container would contradict it. Nothing is guessed.

    :raises TopologyError: naming the first contradicting variable.
    """
    for name, single in _SINGLE_VALUES.items():
        value = environ.get(name, "")
        if value and not _single(value, single):
            raise TopologyError(describe(
                name, value,
                f"{single} or unset: no source's complete set of variables is set (no "
                "cluster manager or launcher stated the job), so it is a single-container "
                "session, but another launcher set a larger topology"
                f"{_closest_partial(environ)}. Run the command without derive-env for that "
                "launcher, or give the container its cluster manager's variables",
            ))


def _closest_partial(environ: Mapping[str, str]) -> str:
    """``" (closest: torchrun, not set: X)"``: the source line with the most of its
    variables set, when some but not all are (a value left empty, a launcher's copy)."""
    best, missing = None, ()
    count = 0
    for source in SOURCES:
        if source.any_of:
            continue
        present = [n for n in source.detect if environ.get(n)]
        if present and len(present) > count:
            best, count = source, len(present)
            missing = tuple(n for n in source.detect if not environ.get(n))
    if best is None:
        return ""
    return f" (closest: {best.title}; not set: {', '.join(missing)})"


class Source(NamedTuple):
    """One line of the source table: how to see a source without importing its module.

    :ivar name: for ``--source NAME`` / ``DERIVE_ENV_SOURCE`` and messages.
    :ivar module: its module; imported only when all of ``detect`` are set.
    :ivar detect: its complete set of variables, every one non-empty (a partial set never
        selects a source: sources.md 3.13).
    :ivar depth: its place in the launch, innermost first (architecture.md, "Sources
        compose"): 0 torchrun, 1 an MPI launcher, 2 an srun step, 3 a Slurm allocation,
        4 a node-level manager (Backend.AI, Kubeflow).
    :ivar title: for a person.
    :ivar unless: variables whose presence (non-empty) means another context: the source
        is then not seen.
    :ivar fallback: seen only when no other source is (Kubeflow's variables are also what
        derive-env itself exports, so a second run inside a session must not take them
        for a manager).
    :ivar any_of: seen when ANY of ``detect`` (or a variable starting with ``prefix``) is
        set: for a source that reports a partial set itself, as an error naming what is
        missing (Backend.AI, contract section 5), instead of ignoring it.
    :ivar prefix: see ``any_of``.
    """

    name: str
    module: str
    detect: tuple[str, ...]
    depth: int
    title: str
    unless: tuple[str, ...] = ()
    fallback: bool = False
    any_of: bool = False
    prefix: str | None = None


_SOURCE = "derive_env.sources."

#: Every source, innermost first; ties keep table order. One line per source.
SOURCES: tuple[Source, ...] = (
    Source("torchrun", _SOURCE + "torchrun",
           ("TORCHELASTIC_RUN_ID", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
            "GROUP_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"),
           0, "torchrun (torchelastic)"),
    Source("openmpi", _SOURCE + "mpi",
           ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE"), 1, "Open MPI (mpirun)"),
    Source("mvapich2", _SOURCE + "mpi",
           ("MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
            "MV2_COMM_WORLD_LOCAL_SIZE"), 1, "MVAPICH2 (mpirun_rsh)"),
    Source("hydra", _SOURCE + "mpi",
           ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"), 1,
           "MPICH Hydra or Intel MPI (mpiexec)"),
    Source("pals", _SOURCE + "mpi",
           ("PALS_RANKID", "PALS_LOCAL_RANKID", "PALS_LOCAL_SIZE", "PALS_NODEID",
            "PMI_SIZE"), 1,
           "Cray PALS (mpiexec)"),
    Source("slurm-step", _SOURCE + "slurm",
           ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES",
            "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_PROCID",
            "SLURM_LOCALID", "SLURM_NODEID"), 2, "a Slurm step (srun)"),
    Source("slurm-allocation", _SOURCE + "slurm",
           ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES"), 3,
           "a Slurm allocation (batch script or salloc shell)"),
    Source("backendai", _SOURCE + "backendai",
           ("BACKENDAI_CLUSTER_SIZE", "BACKENDAI_CLUSTER_HOSTS", "BACKENDAI_CLUSTER_HOST",
            "BACKENDAI_CLUSTER_ROLE", "BACKENDAI_CLUSTER_IDX", "BACKENDAI_CLUSTER_LOCAL_RANK",
            "BACKENDAI_CLUSTER_REPLICAS", "BACKENDAI_SESSION_ID", "GPU_COUNT", "N_GPUS",
            "BACKENDAI_DIST_MASTER_PORT"), 4, "a Backend.AI session",
           any_of=True, prefix="BACKENDAI_CLUSTER_"),
    Source("kubeflow-pytorchjob", _SOURCE + "kubeflow",
           ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "PET_NODE_RANK",
            "PET_NNODES", "PET_NPROC_PER_NODE"), 4, "a Kubeflow PyTorchJob (v1)",
           unless=("TORCHELASTIC_RUN_ID",), fallback=True),
    Source("kubeflow-trainjob", _SOURCE + "kubeflow",
           ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
            "PET_NPROC_PER_NODE"), 4, "a Kubeflow TrainJob (v2)",
           unless=("TORCHELASTIC_RUN_ID", "RANK"), fallback=True),
)

#: Source names by ``--source``; ``auto`` (detect) and ``none`` (a single container).
SOURCE_NAMES = tuple(source.name for source in SOURCES)


def _is_seen(source: Source, environ: Mapping[str, str]) -> bool:
    if any(environ.get(name) for name in source.unless):
        return False
    if not source.any_of:
        return all(environ.get(name) for name in source.detect)
    return any(environ.get(name) for name in source.detect) or (
        source.prefix is not None
        and any(v and k.startswith(source.prefix) for k, v in environ.items()))


def seen_sources(environ: Mapping[str, str]) -> list[Source]:
    """The table lines whose complete set of variables is set, innermost first.

    Costs one dictionary lookup per variable of each line: no module is imported to learn
    that its variables are absent.
    """
    seen = [s for s in SOURCES if _is_seen(s, environ)]
    if len(seen) > 1:
        seen = [s for s in seen if not s.fallback] or seen[:1]
    return sorted(seen, key=lambda s: s.depth)


def topology_from(
    environ: Mapping[str, str],
    choice: str | None = None,
    files: Callable[[Sequence[str]], Mapping[str, str | None]] | None = None,
    hosts_only: bool = False,
) -> ClusterTopology:
    """The topology composed from every source seen in ``environ`` (sources/resolve.py).

    :param hosts_only: for the host lists: see :func:`resolve.resolve`.

    With none seen, a single-container topology (contract section 5: no cluster variables
    at all is a single-container session).

    :param choice: ``--source`` (a source name, ``auto`` or ``none``); ``None``: the
        ``DERIVE_ENV_SOURCE`` variable, else ``auto``.
    :param files: reads the files a source needs (see :func:`resolve.resolve`).
    :raises TopologyError: a seen source's variables are bad or the layers disagree; or no
        source was seen while the environment states another topology (``WORLD_SIZE=4``,
        ``RANK=2`` ... from a launcher derive-env has no source for): describing a single
        container would contradict it, and nothing is guessed; or another launcher's
        variables state more than one process (:func:`launcher_problem`).
    """
    from derive_env.sources.resolve import NONE, choice_of, resolve

    chosen = choice_of(environ, choice)
    topology, reports = resolve(environ, chosen, files, hosts_only)
    if chosen == NONE:
        return topology
    seen = frozenset(r.source for r in reports)
    stated = bool(reports) and ("nodes" in topology.inputs or topology.processes is not None
                                or topology.node_count is not None or not topology.sized)
    # Launchers first: their message names the launcher and the fix.
    problem = launcher_problem(
        environ,
        f"{reports[0].title} of {topology.num_nodes} node(s)" if stated else None,
        seen, topology.processes is not None,
    )
    if problem:
        raise TopologyError(problem)
    if not stated:
        check_single_container(environ)
    return topology
