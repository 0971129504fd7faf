"""The composer: the reports of every seen source -> one :class:`ClusterTopology`, by
docs/sources/README.md section 2, whose rules the code cites by name: "Layers" (the innermost
launcher's process layer; an outer one checked, or shadowed as a ``daemons`` step), "Mode"
(workers at depth 0-1 or several per node), "The command" (:func:`~derive_env.sources.report.
command_kind`), "Node layer" (the innermost node facts and host list agree unless
``Report.renumbers``), "Master" (node rank 0's host, moved first), "Checks" (every error a
``TopologyError``, exit 3, naming both sides).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import import_module
from typing import TYPE_CHECKING

import derive_env.sources as sources
from derive_env.errors import TopologyError
from derive_env.hosts import host_key
from derive_env.sources import refusals
from derive_env.sources.report import (
    PROCESS_FACTS,
    Report,
    command_decides,
    command_kind,
    layer_lines,
)
from derive_env.topology import ClusterTopology, Inputs, Node, ProcessLayout, single_node_topology

if TYPE_CHECKING:
    from derive_env.topology import FileReader


def topology_from(environ: Mapping[str, str], choice: str | None = None,
                  files: FileReader | None = None) -> ClusterTopology:
    """:func:`topology_of` ``environ`` with no command (``choice``, ``files``: Inputs')."""
    return topology_of(Inputs(environ, {}, files, None, choice))


def topology_of(inputs: Inputs, hosts_only: bool = False) -> ClusterTopology:
    """The topology composed from the reports of every source seen in ``inputs.environ``
    (``files``: path -> text, None: unreadable), innermost first; none seen: a single
    container's. ``hosts_only`` (``--format hosts``, hostfiles): ``problem`` not raised.

    :raises TopologyError: a source's variables are bad, the layers disagree, a ``problem``,
        or a launcher no source reads states several processes (:mod:`refusals`).
    :raises UsageError: ``--source`` is not a choice.
    """
    environ, files = inputs.environ, inputs.files
    chosen = sources.choice_of(environ, inputs.choice)
    seen = sources.seen_sources(environ)
    lines = seen if chosen == sources.AUTO else []
    if chosen not in (sources.AUTO, sources.NONE):
        lines = [sources.forced_source(chosen, environ)]
    reports = [_read(line, environ, files) for line in lines]
    topology = compose(reports, hosts_only, inputs.command) if reports else single_node_topology()
    ignored = [line.name for line in seen if line.name != chosen] if chosen != sources.AUTO else []
    if ignored:  # the operator's choice wins, but not silently
        topology = topology.model_copy(update={"warnings": (*topology.warnings, (
            f"source {chosen} chosen (--source or {sources.SOURCE_VARIABLE}): "
            f"the variables of {', '.join(ignored)} are set and ignored; if they describe "
            "this job, every process may derive another job than its launcher started"))})
    if chosen == sources.NONE:
        return refusals.none_chosen(topology, environ, files)
    stated = bool(reports) and ("nodes" in topology.inputs or topology.processes is not None
                                or topology.node_count is not None or not topology.sized)
    # Launchers first: their message names the fix. A line read is seen even when its report
    # names another (Torque's mother superior reads as torque-task, sources/managers/pbs.py).
    read = {line.name for line in lines}
    problem = refusals.launcher_problem(environ, refusals.Seen(
        f"{reports[0].title} of {topology.num_nodes} node(s)" if stated else None,
        frozenset(r.source for r in reports) | read, topology.processes is not None,
        topology.num_nodes if stated else 1), files)
    if problem:
        raise TopologyError(problem)
    if not stated:
        refusals.check_single_container(environ)
    return topology


def _read(line: sources.Source, environ: Mapping[str, str], files: FileReader | None) -> Report:
    """``line``'s report, by its module, with the files it needs read by ``files``."""
    module = import_module(f"derive_env.sources.{line.module}")
    needed = getattr(module, "files_needed", None)
    paths = needed(environ, line.name) if needed is not None else ()
    contents = None
    if paths:
        contents = files(paths) if files is not None else dict.fromkeys(paths)
    return module.read(environ, line, contents)


# -- composing ---------------------------------------------------------------------------------

def _src(report: Report) -> str:
    return " + ".join(report.inputs.get("processes", ()))


def _daemon_step(owner: Report, report: Report) -> bool:
    """``report`` is ``owner``'s daemon step ("Layers"): a launcher farther out than a line
    with ``daemons`` (``srun -N4 flux start``), one task on each of its nodes."""
    line, outer = sources.BY_NAME.get(owner.source), sources.BY_NAME.get(report.source)
    tasks = report.processes.tasks_per_node if report.processes else ()
    return (line is not None and line.daemons is not None and outer is not None
            and (outer.depth > line.depth or (outer.depth == line.depth and not outer.daemons))
            and bool(tasks) and max(tasks) == 1)


def _shadowed(
    reports: Sequence[Report],
) -> tuple[list[Report], list[tuple[Report, Report, bool]]]:
    """Drop outer process layers that describe an inner launcher's daemons or agents:
    ``(used, [(shadowed, by, whether it is by's daemon step)])``."""
    used: list[Report] = []
    shadowed: list[tuple[Report, Report, bool]] = []
    owner: Report | None = None  # the innermost with a process layer
    for report in reports:
        outer = report.processes
        if owner is None or outer is None:
            owner = report if owner is None and outer is not None else owner
            used.append(report)
            continue
        inner, daemons = owner.processes, _daemon_step(owner, report)
        assert inner is not None
        if not daemons and (outer.world_size, outer.rank) == (inner.world_size, inner.rank):
            used.append(report)  # equal layers confirm each other
            continue
        depths = {getattr(sources.BY_NAME.get(r.source), "depth", None) for r in (report, owner)}
        if not daemons and len(depths) == 1:
            # Two launchers of one kind (MPI) cannot be told inner from outer: the
            # variables of one are left over from another job (Hydra copies them all).
            raise TopologyError(
                f"{owner.title} and {report.title} both state this process's rank, and "
                f"differently: rank {inner.rank} of {inner.world_size} ({_src(owner)}) "
                f"against rank {outer.rank} of {outer.world_size} ({_src(report)}); one set "
                "is left over from another job. Unset it (mpirun -x / mpiexec -genv pass "
                "only what you name), or choose the launcher with --source NAME")
        shadowed.append((report, owner, daemons))
        if not daemons and owner.count() == outer.world_size and set(
                outer.tasks_per_node or (1,)) == {1}:
            # Its tasks are the inner launcher's agents, one per node (srun
            # --ntasks-per-node=1 torchrun): its node layer is the inner one's nodes.
            used.append(report._replace(processes=None))
    return used, shadowed


_FACTS = {"num_nodes": "number of nodes", "node_rank": "node rank of this process",
          "master": "host of rank 0 (the first node)"}


def _agree(inner: Report, outer: Report, fact: str, values: tuple[object, object]) -> None:
    (a, b), by = values, [" + ".join(r.inputs.get(fact) or r.inputs.get("nodes", ("?",)))
                          for r in (inner, outer)]
    raise TopologyError(
        f"{inner.title} and {outer.title} disagree on the {_FACTS.get(fact, fact)}: "
        f"{by[0]} say {a}, {by[1]} say {b}. derive-env does not "
        "guess which one is right: run the launcher inside the allocation it belongs to, "
        "or choose one with --source NAME (or DERIVE_ENV_SOURCE)")


def _first(reports: Sequence[Report | None], field: str) -> Report | None:
    """The first report that states ``field`` (a value other than None, ``()`` or ``""``)."""
    for report in reports:
        if report is not None and getattr(report, field) not in (None, (), ""):
            return report
    return None


def compose(reports: Sequence[Report], hosts_only: bool = False,
            command: Sequence[str] | None = None) -> ClusterTopology:
    """The topology from reports ordered innermost first (module docstring); ``command``:
    the argv derive-env execs, ``None`` for the hook. Raises as :func:`topology_of`."""
    used, shadowed = _shadowed(reports)
    refusals.managers_agree(used)  # every pair of node-level managers, alike
    innermost = reports[0]
    if innermost.problem and not hosts_only:  # innermost only: an inner one uses its facts
        raise TopologyError(innermost.problem)
    notes = [note for report in used for note in report.notes]
    owner = _first(used, "processes")
    node_src = next((r for r in used if r.count() is not None or r.node_rank is not None),
                    None)
    hosts_src = _first(used, "nodes")
    inputs: dict[str, tuple[str, ...]] = {}
    nodes, order, num_nodes, node_rank = _node_layer(node_src, hosts_src, inputs, notes)
    tasks = _process_layer(owner, used, inputs)
    master_src = _first(used, "master")
    master = None
    if master_src is not None:
        master, (nodes, tasks, node_rank, order) = _master_first(
            master_src, hosts_src, (nodes, tasks, node_rank, order), inputs)
    counted = " + ".join(inputs.get("num_nodes") or inputs.get("nodes", ()))
    layout, told = _layout(owner, (nodes, tasks, node_rank, order), (num_nodes, counted),
                           command)
    refusals.check_rank_zero(layout, nodes, node_rank, inputs)
    lines = layer_lines(reports, used, shadowed, (owner, node_src, hosts_src))
    gpus_src, port_src, resv_src, job_src, srv_src = (_first(used, field) for field in (
        "gpus", "master_port", "reserved_ports", "job", "server_ports"))
    for name, src in (("gpus", gpus_src), ("master_port", port_src), ("ports", resv_src)):
        if src is not None and name in src.inputs:
            inputs[name] = src.inputs[name]
    session_src = _first((hosts_src, node_src, *used), "session_id")
    sized = not (node_src is not None and num_nodes is None and not nodes)
    if sized and not nodes and num_nodes is None and (
            layout is None or layout.world_size == layout.local_world_size):
        num_nodes = 1  # every process (if any) on this node
    if not nodes and num_nodes == 1 and master is None:
        nodes, node_rank = (Node(host="localhost"),), 0
    fields = dict(
        source=(hosts_src or node_src or owner or innermost).source, nodes=nodes,
        node_rank=node_rank, node_count=None if nodes else num_nodes, master=master,
        gpus_per_node=gpus_src.gpus if gpus_src else None,
        master_port=port_src.master_port if port_src else None,
        reserved_ports=resv_src.reserved_ports if resv_src else (),
        job=job_src.job if job_src else None, server_ports=srv_src.server_ports if srv_src else (),
        session_id=session_src.session_id if session_src else None, processes=layout,
        preset=frozenset().union(*(report.preset for report in used)), inputs=inputs,
        order=order, notes=tuple(notes),
        warnings=tuple(warning for report in used for warning in report.warnings),
        layers=(*lines[:3], *told, *lines[3:]),  # the command's after the node layer's
        sized=sized,
        missing=None if nodes or master else refusals.missing_master(owner, node_src),
    )
    try:
        return ClusterTopology(**fields)
    except ValueError as exc:  # a host twice, a loopback master: never a traceback
        raise refusals.invalid_topology(exc, inputs) from None


def _node_layer(node_src: Report | None, hosts_src: Report | None,
                inputs: dict[str, tuple[str, ...]], notes: list[str],
                ) -> tuple[tuple[Node, ...], str | None, int | None, int | None]:
    """``(nodes, order, node count, node rank)`` ("Node layer"); their provenance goes to
    ``inputs``, a host list left unused for a reason to ``notes``."""
    num_nodes = node_src.count() if node_src else None
    node_rank = node_src.node_rank if node_src else None
    if node_src is not None:
        for fact in ("num_nodes", "node_rank"):
            if fact in node_src.inputs:
                inputs[fact] = node_src.inputs[fact]
    if hosts_src is None:
        return (), None, num_nodes, node_rank
    nodes, order = hosts_src.nodes, hosts_src.order
    inputs["nodes"] = hosts_src.inputs.get("nodes", ())
    if node_src is not None and hosts_src is not node_src:
        if node_src.renumbers:
            # Its order (torchrun's rendezvous) is known to no node in advance: no node
            # can match it to another source's list, so none uses that list.
            notes.append(
                f"{node_src.title} numbers the nodes itself (its rendezvous), in an order "
                f"{hosts_src.title} does not state: its host list is not used for them")
            nodes, order = (), None
            inputs.pop("nodes")
        else:
            node_rank = _hosts_agree(node_src, hosts_src, inputs)
    if nodes:
        num_nodes = len(nodes)
    return nodes, order, num_nodes, node_rank


def _hosts_agree(node_src: Report, hosts_src: Report,
                 inputs: dict[str, tuple[str, ...]]) -> int | None:
    """This node's rank, once ``hosts_src``'s host list agrees with ``node_src``'s node
    facts; the host list's own node rank when ``node_src`` states none."""
    nodes, num_nodes, node_rank = hosts_src.nodes, node_src.count(), node_src.node_rank
    # Decided from data every node shares (node count, master): all adopt the list or none
    # does; then each node's own rank must agree (a check only it can make).
    if num_nodes not in (None, len(nodes)):
        _agree(node_src, hosts_src, "num_nodes", (num_nodes, len(nodes)))
    if node_src.master is not None and host_key(node_src.master) != host_key(nodes[0].host):
        _agree(node_src, hosts_src, "master", (node_src.master, nodes[0].host))
    if node_rank is not None and hosts_src.node_rank not in (None, node_rank):
        _agree(node_src, hosts_src, "node_rank", (node_rank, hosts_src.node_rank))
    if node_rank is None:
        node_rank = hosts_src.node_rank
        if "node_rank" in hosts_src.inputs:
            inputs["node_rank"] = hosts_src.inputs["node_rank"]
    return node_rank


def _process_layer(owner: Report | None, used: Sequence[Report],
                   inputs: dict[str, tuple[str, ...]]) -> tuple[int, ...]:
    """The process count of every node, which the innermost launcher (``owner``) or a
    confirming outer layer may state; the process layer's variables go to ``inputs``."""
    if owner is None or owner.processes is None:
        return ()
    tasks = owner.processes.tasks_per_node or next(
        (r.processes.tasks_per_node for r in used
         if r.processes is not None and r.processes.tasks_per_node), ())
    inputs["processes"] = owner.inputs.get("processes", ())
    for fact in PROCESS_FACTS:  # a source that states no fact alone: the whole layer's
        inputs[fact] = owner.inputs.get(fact, inputs["processes"])
    return tasks


def _master_first(master_src: Report, hosts_src: Report | None, placed: _Placed,
                  inputs: dict[str, tuple[str, ...]]) -> tuple[str | None, _Placed]:
    """``(master, (nodes, tasks, node rank, order))`` with rank 0's node first ("Master"): the
    master ``None`` unless no host list places it."""
    master = master_src.master
    nodes, tasks, node_rank, order = placed
    inputs["master"] = master_src.inputs.get("master", ())
    if not nodes:
        return master, placed
    if master_src is not hosts_src:
        # Another source's host list was adopted only when the master is its first host.
        return None, placed
    lowered = [host_key(n.host) for n in nodes]
    if host_key(master) not in lowered:
        return master, placed
    at = lowered.index(host_key(master))
    if at:
        nodes = (nodes[at], *nodes[:at], *nodes[at + 1:])
        if tasks and len(tasks) > at:
            tasks = (tasks[at], *tasks[:at], *tasks[at + 1:])
        if node_rank is not None:
            node_rank = 0 if node_rank == at else node_rank + (node_rank < at)
            inputs["node_rank"] = (*inputs.get("node_rank", ()),
                                   f"{master} (the node of rank 0) moved first")
        order = (f"the node of rank 0 ({master}, from {' + '.join(inputs['master'])}) "
                 f"first, then {order or 'the manager order'}")
    return None, (nodes, tasks, node_rank, order)


#: ``(nodes, processes per node, node rank, order)``: where the nodes stand.
_Placed = tuple[tuple[Node, ...], tuple[int, ...], "int | None", "str | None"]


def _layout(owner: Report | None, placed: _Placed, counted: tuple[int | None, str],
            command: Sequence[str] | None) -> tuple[ProcessLayout | None, tuple[str, ...]]:
    """``owner``'s process layer (the innermost launcher's), checked against the nodes
    (``placed``; ``counted``: their count and its variables), and the --explain lines of
    what the command decides (:func:`command_decides`)."""
    if owner is None or owner.processes is None:
        return None, ()
    num_nodes, (_, tasks, node_rank, _) = counted[0], placed
    processes, src = owner.processes, _src(owner)
    if tasks:
        if num_nodes is not None and len(tasks) != num_nodes:
            raise TopologyError(
                f"{owner.title} states processes on {len(tasks)} node(s) ({src}) but the "
                f"node list has {num_nodes}")
        if sum(tasks) != processes.world_size:
            raise TopologyError(
                f"{owner.title}: the processes per node ({src}) add up to {sum(tasks)}, "
                f"not to the world size {processes.world_size}")
        if node_rank is not None and tasks[node_rank] != processes.local_world_size:
            raise TopologyError(
                f"{owner.title}: node rank {node_rank} has {tasks[node_rank]} process(es) "
                f"by the list of processes per node, but its local world size is "
                f"{processes.local_world_size} ({src})")
    workers, told = command_decides(owner, processes, (tasks, counted),
                                    command_kind(command))
    try:
        return ProcessLayout(**processes._replace(tasks_per_node=tasks or None)._asdict(),
                             workers=workers), told
    except ValueError:
        raise TopologyError(
            f"{owner.title}: rank {processes.rank} / local rank {processes.local_rank} are "
            f"not below world size {processes.world_size} / local world size "
            f"{processes.local_world_size} ({src})") from None
