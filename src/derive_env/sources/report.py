"""What one source saw: :class:`Report`, each fact with its variables, the unit the composer
composes (sources/compose.py; docs/sources/README.md, "How the sources compose"); for
``--explain``, :func:`layer_lines`; what the command is (:func:`command_kind`) and decides
where the variables cannot (:func:`command_decides`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple

from derive_env.errors import TopologyError, describe
from derive_env.sources import BY_NAME
from derive_env.topology import Node

if TYPE_CHECKING:
    from typing import TypeVar

    _T = TypeVar("_T")


def parsed(environ: Mapping[str, str], name: str, parse: Callable[[str], _T],
           ending: str = "") -> _T:
    """``parse(environ[name])``; its ValueError (text completing "expected ...") becomes a
    TopologyError naming the variable and its value, the message ending with ``ending``.
    Here, on every start path, for the managers that do not import sources/roles.py."""
    try:
        return parse(environ[name])
    except ValueError as exc:
        raise TopologyError(describe(name, environ[name], f"{exc}{ending}")) from None

_NONE: Mapping[str, tuple[str, ...]] = MappingProxyType({})
#: The facts of the process layer, each with its own key in :attr:`Report.inputs`.
PROCESS_FACTS = ("rank", "local_rank", "world_size", "local_world_size")


class Processes(NamedTuple):
    """The process layer as one source states it (names as in torch.distributed: ranks
    0-based, sizes >= 1); ``tasks_per_node``: every node's process count in node order when
    the source states it (Slurm's ``SLURM_STEP_TASKS_PER_NODE``), else empty."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    tasks_per_node: tuple[int, ...] = ()


class Report(NamedTuple):
    """The facts one source found in the environment; ``None`` / empty = not stated.

    :ivar source: the table name (``slurm-step``); ``title``: for a person.
    :ivar nodes: the nodes in the manager's order (node rank r = ``nodes[r]``).
    :ivar node_rank: this process's node, a position in ``nodes`` (or in ``num_nodes``).
    :ivar num_nodes: the node count when known without a host list (``GROUP_WORLD_SIZE``).
    :ivar processes: the process layer, when the source launched processes.
    :ivar master: rank 0's host when not ``nodes[0]`` (``srun -m arbitrary``) or without a
        host list (torchrun's ``MASTER_ADDR``).
    :ivar master_port: the TCP port the manager chose (``BACKENDAI_DIST_MASTER_PORT``);
        ``reserved_ports``: those reserved for the step, in order (``SLURM_STEP_RESV_PORTS``).
    :ivar server_ports: ``(framework, TCP port, variable)`` of each framework server whose
        port the manager declared (a Kubeflow JAXJob's ``COORDINATOR_PORT``).
    :ivar job: ``(manager, job id, step id)``, the seed of :func:`derive_env.ports.job_ports`.
    :ivar gpus: this node's devices (``SLURM_GPUS_ON_NODE``, ``GPU_COUNT``); ``session_id``.
    :ivar preset: framework variables the launcher set (torchrun's ``RANK`` ...): checked,
        never exported over.
    :ivar renumbers: the source numbers nodes itself (torchrun's c10d): an outer host list in
        another order is no error, only unused.
    :ivar inputs: the variables of each fact (``nodes``, ``processes``, each of
        :data:`PROCESS_FACTS`, ``master``, ``ports`` ...).
    :ivar order: the rule behind the order of ``nodes``; ``notes``: both for ``--explain``.
    :ivar warnings: printed on stderr; do not stop the command.
    :ivar problem: the error of a source that alone describes no usable topology (a Slurm
        batch script of several nodes), raised when no inner source uses its facts.
    """

    source: str
    title: str
    nodes: tuple[Node, ...] = ()
    node_rank: int | None = None
    num_nodes: int | None = None
    processes: Processes | None = None
    master: str | None = None
    master_port: int | None = None
    reserved_ports: tuple[int, ...] = ()
    job: tuple[str, str, str] | None = None
    server_ports: tuple[tuple[str, int, str], ...] = ()
    gpus: int | None = None
    session_id: str | None = None
    preset: frozenset[str] = frozenset()
    renumbers: bool = False
    inputs: Mapping[str, tuple[str, ...]] = _NONE
    order: str | None = None
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    problem: str | None = None

    def count(self) -> int | None:
        """The number of nodes the source states, with or without a host list."""
        return len(self.nodes) if self.nodes else self.num_nodes


def layer_lines(reports: Sequence[Report], used: Sequence[Report],
                shadowed: Sequence[tuple[Report, Report, bool]],
                layers: tuple[Report | None, Report | None, Report | None]) -> tuple[str, ...]:
    """Lines for ``--explain``: the ``reports`` seen (innermost first), those ``used``, the
    ``shadowed`` ``(report, by inner launcher, whether by's daemon step)``; ``layers``: the
    reports that gave the process layer, the node count and rank, the host list (or ``None``)."""
    owner, node_src, hosts_src = layers
    if len(reports) == 1:
        only = reports[0]
        layers = [name for name, src in (("process layer", owner), ("node layer", node_src))
                  if src is only]
        return (f"source seen: {only.source} ({only.title}), for the "
                f"{' and the '.join(layers) or 'GPU count and port only'}",)
    lines = ["sources seen (innermost first): " + ", ".join(
        f"{r.source} ({r.title})" for r in reports)]
    lines.append(f"process layer: {owner.source if owner else 'none stated'}")
    node = node_src.source if node_src else "none stated"
    hosts = hosts_src.source if hosts_src else "none (no host list)"
    lines.append(f"node layer: node count and rank from {node}; hosts from {hosts}")
    for report, by, daemons in shadowed:
        why = (f"one task on each of its nodes around {by.source}'s ranks: {by.title}'s "
               "daemon step" if daemons else f"its world size or rank differs from "
               f"{by.source}'s, so its tasks started {by.title}'s processes")
        lines.append(f"shadowed: {report.source} ({report.title}): {why}, not the ranks")
    for report in used:
        if report not in (owner, node_src, hosts_src):
            lines.append(f"shadowed: {report.source}: an inner source states its facts")
    return tuple(lines)


#: The kinds of the command derive-env execs (:func:`command_kind`).
NODE_LAUNCHER, SCRIPT, LAUNCHER, OTHER = "node launcher", "script", "launcher", "other"
#: Commands that start one node's workers themselves (by program or ``python -m`` module).
_NODE_LAUNCHERS = {"torchrun": "torchrun", "torch.distributed.run": "torchrun",
                   "torch.distributed.launch": "torchrun", "deepspeed": "deepspeed",
                   "deepspeed.launcher.runner": "deepspeed",
                   "accelerate.commands.launch": "accelerate launch",
                   # their other console scripts (DeepSpeed's bin/, accelerate's setup.py)
                   "deepspeed.pt": "deepspeed", "ds": "deepspeed",
                   "accelerate-launch": "accelerate launch"}
#: Launchers of processes: derive-env belongs inside the processes they start.
_LAUNCHERS = frozenset(("mpirun", "mpiexec", "orterun", "prterun", "mpirun_rsh", "srun",
                        "flux", "jsrun", "aprun", "horovodrun"))
#: Programs that run the command after their own words: each with its subcommands that do
#: (``None``: any), its options that take a value, and its words before the command.
_WRAPPERS: dict[str, tuple[frozenset[str] | None, frozenset[str], int]] = {
    "env": (None, frozenset(("-u", "--unset", "-C", "--chdir")), 0),
    "nice": (None, frozenset(("-n", "--adjustment")), 0),
    "nohup": (None, frozenset(), 0),
    "ionice": (None, frozenset(("-c", "-n", "-p", "-P", "-u", "--class", "--classdata")), 0),
    "numactl": (None, frozenset(("-N", "-m", "-C", "-p", "-i", "-w", "--cpunodebind",
                                 "--membind", "--physcpubind", "--preferred", "--interleave",
                                 "--weighted-interleave")), 0),
    "taskset": (None, frozenset(), 1),
    "chrt": (None, frozenset(("-T", "-P", "-D")), 1),
    "stdbuf": (None, frozenset(("-i", "-o", "-e")), 0),
    "time": (None, frozenset(("-f", "-o", "--format", "--output")), 0),
    "apptainer": (frozenset(("exec", "run")), frozenset((
        "-B", "--bind", "--mount", "-o", "--overlay", "-H", "--home", "--env", "--env-file",
        "--pwd", "-W", "--workdir", "-S", "--scratch", "--security", "--network",
        "--network-args", "--hostname", "--apply-cgroups", "--app", "--fusemount", "--dns",
        "--no-mount", "--add-caps", "--drop-caps", "--cpus", "--memory", "--pem-path")), 1),
    "uv": (frozenset(("run",)), frozenset((
        "--with", "-w", "--with-requirements", "--with-editable", "--python", "-p",
        "--project", "--directory", "--package", "--extra", "--group", "--only-group",
        "--no-group", "--env-file", "--index", "--index-url", "--extra-index-url",
        "--default-index", "--find-links", "-f")), 0),
    "conda": (frozenset(("run",)), frozenset(("-n", "--name", "-p", "--prefix", "--cwd")), 0),
    "pixi": (frozenset(("run",)), frozenset(("-e", "--environment", "--manifest-path")), 0),
    "poetry": (frozenset(("run",)), frozenset(("-C", "--directory", "-P", "--project")), 0),
}
_WRAPPERS.update(singularity=_WRAPPERS["apptainer"], mamba=_WRAPPERS["conda"],
                 micromamba=_WRAPPERS["conda"])
#: Shells whose ``-c STRING`` runs a command line (its first command is classified).
_SHELLS = frozenset(("sh", "bash", "dash", "zsh", "ksh"))
#: Python's options that take a value (``python -X dev -m mod``).
_PY_VALUED = frozenset(("-X", "-W", "-Q"))


def _python_target(argv: Sequence[str]) -> str | None:
    """``-m MODULE`` or the script of a ``python`` argv; ``None``: ``-c`` code or nothing."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "-m":
            return next(args, None)
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:]
        if arg in _PY_VALUED:
            next(args, None)
        elif arg.startswith("-c"):
            return None
        elif not arg.startswith("-"):
            return arg
    return None


def _unwrapped(argv: Sequence[str], program: str) -> Sequence[str] | None:
    """The command a wrapper ``program`` (:data:`_WRAPPERS`) runs: its words after the
    wrapper's subcommand, options, ``NAME=VALUE`` words (``env``) and positional words (the
    image, the CPU mask); ``None``: not one."""
    subcommands, valued, positional = _WRAPPERS[program]
    at = 1
    if subcommands is not None:
        if len(argv) < 2 or argv[1] not in subcommands:
            return None
        at = 2
    while at < len(argv):
        arg = argv[at]
        if arg == "--":
            at += 1
            break
        if arg.startswith("-") and len(arg) > 1:
            at += 2 if arg in valued else 1
        elif program == "env" and "=" in arg:
            at += 1
        elif positional:
            positional, at = positional - 1, at + 1
        else:
            break
    return argv[at:] or None


def _shell_command(argv: Sequence[str]) -> Sequence[str] | None:
    """The first command of a shell's ``-c STRING`` (``bash -lc 'exec torchrun ...'``),
    without ``exec`` and ``NAME=VALUE`` words; ``None``: no ``-c``, or not shlex's."""
    for at, arg in enumerate(argv[1:-1], 1):
        if not arg.startswith("-") or arg.startswith("--"):
            if not arg.startswith("--"):
                return None  # a script file: derive-env cannot tell
            continue
        if "c" in arg[1:]:
            import shlex  # only for a shell's -c: not on every start

            try:
                words = shlex.split(argv[at + 1])
            except ValueError:
                return None
            while words and (words[0] == "exec" or ("=" in words[0]
                                                    and not words[0].startswith("-"))):
                words.pop(0)
            return words or None
    return None


def command_kind(argv: Sequence[str] | None) -> tuple[str, str] | None:
    """``(kind, name for messages)`` of the command after ``--`` (``None``: none): a
    :data:`NODE_LAUNCHER`, a python :data:`SCRIPT` (one worker), a :data:`LAUNCHER` (``srun``)
    or :data:`OTHER` (a shell script); a wrapper's (``env``, ``uv run``, ``bash -c``) command."""
    if not argv:
        return None
    program = argv[0].rsplit("/", 1)[-1]
    inner = (_unwrapped(argv, program) if program in _WRAPPERS else
             _shell_command(argv) if program in _SHELLS else None)
    if inner is not None:
        kind = command_kind(inner)
        # a shell line's first word that tells nothing (cd, source): the shell's name
        return kind if kind is None or kind[0] != OTHER or program not in _SHELLS else (
            OTHER, program)
    base = program.split(".", 1)[0]
    if program in _NODE_LAUNCHERS:
        return NODE_LAUNCHER, _NODE_LAUNCHERS[program]
    if program == "accelerate" and list(argv[1:2]) == ["launch"]:
        return NODE_LAUNCHER, "accelerate launch"
    if base in _LAUNCHERS:
        return LAUNCHER, program
    version = program[6:].replace(".", "")
    if program.startswith("python") and (not version or version.isdigit()):
        target = _python_target(argv)
        if target in _NODE_LAUNCHERS:
            return NODE_LAUNCHER, _NODE_LAUNCHERS[target]
        return SCRIPT, f"{program} {target or '-c'}"
    return OTHER, program


def _refused(owner: Report, command: str, started: str, short: bool) -> str:
    """The refusal of a node launcher ``command`` ``owner``'s launcher starts ``started``: each
    would train alone (torch/distributed/run.py defaults to one node); ``short``: on fewer
    nodes than counted, each would wait for every node (``--nnodes``). Fix: ``per_node``."""
    line = BY_NAME.get(owner.source)
    one, per_gpu = line.per_node if line is not None else ("one task per node", "")
    start = f"{command} (the command) under {owner.title}, which starts {started}"
    if short:
        how = (f"{command} once on every node" if one == "one task per node" else
               f"one task on every node of the job ({one} derive-env -- {command} ..., with "
               "no host list narrower than the job)")
        return (f"{start}: each {command} would wait for every node of the job, and the "
                f"others never start it. Start {how}, or run the job on as many nodes as "
                "start it")
    start += f": each {command} would start a job of its own, and every task would train alone. "
    if line is None or line.per_node == ("one task per node", "one task per GPU"):
        return (start + f"Start {command} once per node, or drop {command} and run the "
                "training script as the launcher's process (derive-env -- python train.py)")
    launcher = one.split(" --")[0].split(" -")[0]
    return (start + f"Start one task per node for {command} ({one} derive-env -- {command} "
            f"...), or drop {command} and let {launcher} start one task per GPU ({per_gpu} "
            "derive-env -- python train.py)")


#: The table's depths: up to 1 the launcher starts the workers (torchrun, MPI); up to 3 a
#: launcher's task, which the command may make a worker.
_MPI, _ALLOCATION = 1, 3
#: What each outcome of :func:`command_decides` derives, for --explain.
_OUTCOMES = {True: "one worker per process (RANK, LOCAL_RANK, WORLD_SIZE ...)",
             False: "the node layer (NODE_RANK, PET_*)"}


def command_decides(owner: Report, processes: Processes,
                    where: tuple[tuple[int, ...], tuple[int | None, str]],
                    kind: tuple[str, str] | None) -> tuple[bool, tuple[str, ...]]:
    """Whether ``owner``'s processes are the job's workers (sources/compose.py, "Mode", "The
    command"), and the --explain line of the command's part. ``where``: every node's task
    count (or empty), the node count (or ``None``) and its variables; ``kind``:
    :func:`command_kind`'s. TopologyError: a node launcher ``owner`` starts more than once
    on a node, or on fewer nodes than the node layer counts."""
    tasks, (num_nodes, counted) = where
    line = BY_NAME.get(owner.source)
    depth = line.depth if line is not None else _MPI + 1
    per_node = max(tasks or (processes.local_world_size,))
    workers = depth <= _MPI or per_node > 1  # the variables alone
    if depth > _ALLOCATION:  # a node-level manager: its pods are the nodes
        return workers, ()
    src = " + ".join(owner.inputs.get("local_world_size", owner.inputs.get("processes", ())))
    world = processes.world_size
    # One task per node, proven: by every node's count, or by as many processes as nodes
    # (a launcher that states only this node's count, MPI, may place more on another).
    many = (f"{per_node} tasks on a node" if per_node > 1 else None if tasks else
            f"{world} processes on nodes it does not count" if num_nodes is None and world > 1
            else f"{world} processes on {num_nodes} nodes" if num_nodes is not None
            and world > num_nodes else None)

    # A node launcher counts the processes that start it as its nodes: never more.
    short = not many and num_nodes is not None and world < num_nodes
    sized = " + ".join(owner.inputs.get("world_size", owner.inputs.get("processes", ())))

    def outcome(kind: tuple[str, str]) -> bool | str:
        if kind[0] == NODE_LAUNCHER and short:
            return _refused(owner, kind[1], f"it on {world} process(es) ({sized}), one per "
                            f"node, in a job of {num_nodes} nodes ({counted})", True)
        if kind[0] == NODE_LAUNCHER:
            return _refused(owner, kind[1], f"{many} ({src})", False) if many else False
        return True if kind[0] == SCRIPT else workers

    def said(result: bool | str) -> str:
        return _OUTCOMES[result] if isinstance(result, bool) else (
            "refused (exit 3), each would wait for nodes that never start it" if short
            else "refused (exit 3), each would start a job of its own")

    if kind is None:
        return workers, (
            f"command: none (the hook's path): {said(workers)}; `-- torchrun ...`: "
            f"{said(outcome((NODE_LAUNCHER, 'torchrun')))}; `-- python train.py`: "
            f"{said(outcome((SCRIPT, 'python')))}",)
    result = outcome(kind)
    if isinstance(result, str):
        raise TopologyError(result)
    why = {OTHER: ", which derive-env cannot tell (a shell script?): the variables decide",
           LAUNCHER: ": a launcher; run derive-env inside the processes it starts"}
    return result, (f"command: {kind[1]} ({kind[0]}{why.get(kind[0], '')}): {said(result)}",)
