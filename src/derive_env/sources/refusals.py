"""The refusals: a launcher derive-env cannot read, or a single container it contradicts
(exit 3, docs/sources/README.md), from the table's ``marker``, ``states``, ``size``,
``part_of``: :func:`launcher_problem`, :func:`check_single_container`, :func:`managers_agree`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe, shorten
from derive_env.hosts import host_key
from derive_env.sources import (
    BY_NAME,
    ON_ERROR_WARN,
    PASS_ENV,
    SOURCES,
    Source,
    has_size,
    seen_sources,
    states_of,
)
from derive_env.sources.report import Report
from derive_env.topology import ClusterTopology, Node, ProcessLayout
from derive_env.validation import static_count

if TYPE_CHECKING:
    from derive_env.topology import FileReader

#: Another launcher's variables with a single container's value; checked only when no source
#: stated the nodes (inside a session they are user values, docs/behaviour.md section 6).
_SINGLE_VALUES = {"WORLD_SIZE": 1, "RANK": 0, "NODE_RANK": 0, "PET_NNODES": 1,
                  "PET_NODE_RANK": 0, "GROUP_RANK": 0, "JAX_PROCESS_ID": 0,
                  "DMLC_TASK_ID": 0, "TPU_WORKER_ID": 0,
                  # an index of a job of unstated size: any index alike (behaviour.md section 7)
                  "JOB_COMPLETION_INDEX": None}

_NO_SOURCE = "derive-env cannot read its job from these variables"

#: The lines that can state a job of more than one process, in table order, each with its
#: ``states`` and whether a host list or a size rule states its size too.
_LAUNCHERS = tuple((line, states, sized) for line in SOURCES
                   for states, sized in ((states_of(line), has_size(line)),)
                   if states or sized)


def _single(value: str, single: int | None) -> bool:
    """Whether ``value`` states the single-container value (``01``, torchrun's ``1:1`` too);
    ``single`` ``None``: no value does (the variable is set only for a larger job)."""
    return single is not None and static_count(value) == single


#: The depth of the table's node-level managers (:attr:`derive_env.sources.Source.depth`).
_NODE_LEVEL = 4


class Seen:
    """What the seen sources state, for the refusals: ``within`` (``"a Backend.AI session of
    3 nodes"``), ``names`` (their launchers are read), ``launched`` (a process layer: a
    partial set is its companion, ``srun --mpi=pmi2``'s ``PMI_RANK``), ``nodes`` (or None)."""

    # Not a NamedTuple, whose class is built with eval() on every opted-in start.
    __slots__ = ("launched", "names", "nodes", "within")

    def __init__(self, within: str | None = None, names: frozenset[str] = frozenset(),
                 launched: bool = False, nodes: int | None = 1) -> None:
        self.within, self.names, self.launched, self.nodes = within, names, launched, nodes


#: No source seen: no session, a job of one node.
NOTHING_SEEN = Seen()


def launcher_problem(environ: Mapping[str, str], seen: Seen = NOTHING_SEEN,
                     files: FileReader | None = None) -> str | None:
    """The message of the first line, in table order, that started more than one process
    without a usable source, or ``None``; unsized: on every process (docs/behaviour.md
    section 7)."""
    found = refused_line(environ, seen, files)
    return found[1] if found is not None else None


def refused_line(environ: Mapping[str, str], seen: Seen = NOTHING_SEEN,
                 files: FileReader | None = None) -> tuple[Source, str] | None:
    """:func:`launcher_problem` with the line it names: ``(line, message)`` or ``None``."""
    unsized: Source | None = None  # a launcher that started us without saying the size
    sized = False  # some launcher's complete marker states the size (one process)
    for line, states, sized_by in _LAUNCHERS:
        if any(environ.get(name) for name in line.unless):
            continue
        reader = line if line.module is not None else BY_NAME.get(line.part_of or "")
        if reader is not None and (reader.name in seen.names or seen.launched):
            continue
        complete = all(environ.get(name) for name in line.marker or line.detect)
        # Inside a job another source states: a node-level manager no module reads is that
        # job's; a fallback (tf-config) shadowed by it is derive-env's own output.
        shadowed = (reader is None and line.depth == _NODE_LEVEL) or (
            reader is line and line.fallback and complete)
        if (seen.nodes is None or seen.nodes > 1) and shadowed:
            continue
        if not complete and not line.partial:
            continue
        if not line.sized:
            # Its index alone says nothing of the size: every index alike (section 7).
            if unsized is None and any(environ.get(name) for name, _ in states):
                unsized = line
            continue
        stated = _stated(line, environ, complete and sized_by, files)
        if stated == UNSIZED:
            unsized = unsized or line
        elif stated is not None:
            return line, _refusal(line, environ, seen.within, stated)
        elif complete:
            sized = True
    if unsized is not None and not sized:
        # Open MPI's own variables say the size beside PMIx's: only PMIx alone leaves it unknown
        marked = dict.fromkeys((*(unsized.marker or unsized.detect), *dict(states_of(unsized))))
        names = [name for name in marked if environ.get(name)]  # the marker's, then states'
        units = unsized.unit + ("es" if unsized.unit.endswith("s") else "s")
        why = _NO_SOURCE if unsized.module is None else (
            "only part of its variables are set (not set: "
            f"{', '.join(n for n in unsized.detect if not environ.get(n))})")
        return unsized, describe(
            names[0], environ[names[0]],
            f"unset: {unsized.title} started this process ({' and '.join(names)} "
            f"{'is' if len(names) == 1 else 'are'} set) without saying how many {units} the "
            f"job has, and {why}; describing a job of one {unsized.unit} could be "
            f"wrong. {unsized.fix}",
        )
    return None


#: :func:`_stated`'s answer when the size cannot be told (``sizes.UNKNOWN``).
UNSIZED = ("", "", "")


def _stated(line: Source, environ: Mapping[str, str], sized: bool,
            files: FileReader | None) -> tuple[str, str, str] | None:
    """``(variable, value, single value)`` of ``line``'s first that states more than one
    process, :data:`UNSIZED`, or ``None``; ``sized``: ask its host list or size rule too."""
    if sized:
        from derive_env.sources import sizes

        over = sizes.over(line, environ, files)
        if over == sizes.UNKNOWN:
            return UNSIZED
        if over is not None:
            return (over[0], environ[over[0]], over[1]) if len(over) == 2 else over
    for name, single in states_of(line):
        value = environ.get(name)
        if value and not _single(value, single):
            return name, value, "unset" if single is None else str(single)
    return None


def _refusal(line: Source, environ: Mapping[str, str], session: str | None,
             stated: tuple[str, str, str]) -> str:
    """The message for ``line``'s ``stated``: a fallback shadowed, a partial set, or a
    launcher no module reads."""
    name, value, single = stated
    reader = line if line.module is not None else BY_NAME.get(line.part_of or "")
    expected = single if single == "unset" else f"{single} or unset"
    if reader is line and line.fallback and all(environ.get(n) for n in line.detect):
        # complete, but shadowed by the source seen (a job of one node)
        why = (f", but {session or 'the source seen'} states a job of one node: the two "
               f"disagree (a value left over from another job?). {line.fix}")
    elif reader is not None:
        missing = [n for n in reader.detect if not environ.get(n)]
        why = (f", but only part of its variables are set (not set: {', '.join(missing)}), "
               "and a partial set is never used: it may be left over from another job. Run "
               "derive-env in the launcher's own process (the launcher sets all of them), "
               + ON_ERROR_WARN)
    else:
        outcome = (f"inside {session}, whose nodes derive-env cannot combine with the "
                   "launcher's ranks" if session else
                   f"derive-env would describe a job of one {line.unit}")
        why = f", and {_NO_SOURCE}; {outcome}. {line.fix}"
    return describe(name, value, f"{expected}: {line.title} states a job of more than one "
                                 f"{line.unit}{why}")


def none_chosen(topology: ClusterTopology, environ: Mapping[str, str],
                files: FileReader | None = None) -> ClusterTopology:
    """``topology`` (``--source none``) with a warning when a launcher no seen source reads
    states a larger job (docs/behaviour.md section 11): the choice wins, but every node of
    such a job would train alone."""
    seen = Seen(names=frozenset(line.name for line in seen_sources(environ)))
    found = refused_line(environ, seen, files)
    if found is None:
        return topology
    line, message = found
    return topology.model_copy(update={"warnings": (*topology.warnings, (
        f"source none chosen (--source or DERIVE_ENV_SOURCE): {line.title} states a job of "
        f"more than one {line.unit} ({message.partition(': expected')[0]}), and this "
        "process derives a job of one; if that job has more than one node, each trains "
        "alone"))})


def check_single_container(environ: Mapping[str, str]) -> None:
    """Refuse a single-container topology (no source stated the nodes) that another
    launcher's ``WORLD_SIZE=4`` or ``RANK=2`` contradicts (TopologyError naming the first
    such variable): nothing is guessed."""
    for name, single in _SINGLE_VALUES.items():
        value = environ.get(name, "")
        if value and not _single(value, single):
            raise TopologyError(describe(
                name, value,
                f"{'' if single is None else f'{single} or '}unset: no source's complete set "
                "of variables is set (no cluster manager or launcher stated the job), so this "
                "is taken for a single container, but another launcher set a larger topology"
                f"{_closest_partial(environ)}. Run the command without derive-env for that "
                "launcher, or give the container its cluster manager's variables",
            ))


def _closest_partial(environ: Mapping[str, str]) -> str:
    """``" (closest: torchrun, not set: X)"``: the read line with most of its variables set,
    named only by a variable of its own (``RANK`` alone: none, and who sets it)."""
    lines_of = Counter(name for source in SOURCES for name in source.detect)
    best, count = None, 0
    for source in SOURCES:
        present = [n for n in source.detect if environ.get(n)]
        named = any(lines_of[n] == 1 for n in present) or len(present) == len(source.detect)
        if named and len(present) > count and not source.any_of and source.module is not None:
            best, count = source, len(present)
    if best is None:
        shared = [n for n, times in lines_of.items() if times > 1 and environ.get(n)]
        what = "a name" if len(shared) == 1 else "names"
        return (f" ({', '.join(shared)}: {what} several launchers set, and no variable of "
                "one of them is here: set by hand (the image's ENV, an env file, a wrapper) "
                "or by a launcher derive-env has no source for)") if shared else ""
    missing = [n for n in best.detect if not environ.get(n)]
    if not missing:  # all set, but a variable of another launcher makes it step aside
        unless = [n for n in best.unless if environ.get(n)]
        return f" (closest: {best.title}, not read beside {', '.join(unless)})"
    return f" (closest: {best.title}; not set: {', '.join(missing)})"


def invalid_topology(error: ValueError, inputs: Mapping[str, Sequence[str]]) -> TopologyError:
    """:class:`ClusterTopology`'s ``ValueError`` (a host twice, a loopback master of several
    nodes) as an error naming the node list's variables (``inputs["nodes"]``)."""
    errors = getattr(error, "errors", lambda: [])()
    why = (errors[0]["msg"] if errors else str(error)).removeprefix("Value error, ")
    names = " + ".join(inputs.get("nodes", ())) or "the node list"
    return TopologyError(f"{names}: expected every node once, and a master the other nodes "
                         f"can reach: {why}")


def check_rank_zero(layout: ProcessLayout | None, nodes: tuple[Node, ...],
                    node_rank: int | None, inputs: Mapping[str, tuple[str, ...]]) -> None:
    """Rank 0 must run on node rank 0, the master (a check only rank 0 can make)."""
    if layout is None or layout.rank != 0 or node_rank in (None, 0):
        return
    here = f"{nodes[node_rank].host}, node rank {node_rank}" if nodes else f"node rank {node_rank}"
    raise TopologyError(
        f"rank 0 ({' + '.join(inputs['processes'])}) runs on {here} (checked there only), but "
        f"every framework needs it on node rank 0 ({nodes[0].host if nodes else 'the master'}). "
        "The launcher's node order differs from derive-env's: give it derive-env's, `derive-env "
        "--dry-run --format openmpi-hostfile > hosts; mpirun --hostfile hosts ...` (MPICH, "
        "Intel MPI: --format mpich-hostfile, mpiexec -f hosts)")


def missing_master(owner: Report | None, node_src: Report | None) -> str:
    """Why the host of rank 0 is unknown, and how to give it the launcher's way (``mpirun
    -x``)."""
    who = owner or node_src
    line = BY_NAME.get(who.source) if who is not None else None
    title, template = (who.title, line.pass_env) if line else ("the launcher", PASS_ENV)
    how = template.format(name="MASTER_ADDR", value="<host of rank 0>")
    return (f"{title} states no host list, so the host of rank 0 is unknown: set "
            f"MASTER_ADDR to it (the same value for every process, e.g. {how}), or run the "
            "launcher inside a job whose manager states the hosts (Slurm, PBS, LSF, Grid Engine)")


def managers_agree(reports: Sequence[Report]) -> None:
    """Every pair of node-level managers in ``reports`` states one job: node count, node rank,
    hosts in one order (as DNS compares; a fact one does not state is not compared).
    TopologyError (exit 3): the first pair that differs, naming both, the fact, the variables."""
    managers = [r for r in reports if r.source in BY_NAME
                and BY_NAME[r.source].depth == _NODE_LEVEL
                and (r.nodes or r.count() is not None or r.node_rank is not None)]
    for i, first in enumerate(managers):
        for other in managers[i + 1:]:
            for fact in _facts(first, other):
                if None not in fact[2] and fact[2][0] != fact[2][1]:
                    raise TopologyError(_two_jobs(first, other, fact))


def _facts(a: Report, b: Report):
    """``(inputs key, what it is, (a's value, b's value))`` for each fact compared."""
    yield ("num_nodes", "number of nodes", (a.count(), b.count()))
    yield ("node_rank", "node rank of this process", (a.node_rank, b.node_rank))
    yield ("nodes", "hosts (in node order)",
           tuple(tuple(host_key(n.host) for n in r.nodes) or None for r in (a, b)))


def _two_jobs(a: Report, b: Report, compared: tuple[str, str, tuple]) -> str:
    """The message of two managers that disagree on ``compared`` (one of :func:`_facts`)."""
    fact, what, values = compared

    def names(report: Report) -> str:
        keys = (fact,) if fact != "num_nodes" else ("num_nodes", "nodes")
        found = next((report.inputs[k] for k in keys if report.inputs.get(k)), ("?",))
        return " + ".join(found)

    def shown(value: object) -> str:
        return shorten(",".join(value), 120) if isinstance(value, tuple) else str(value)

    return (f"{a.title} and {b.title} state two different jobs: they disagree on the "
            f"{what}: {names(a)} say {shown(values[0])}, {names(b)} say {shown(values[1])}. "
            "derive-env does not guess which one is right: the variables of one are left over "
            "from another job (an image's ENV, a wrapper's export); unset them, or choose the "
            "manager with --source NAME (or DERIVE_ENV_SOURCE)")
