"""The resolver: the reports of every seen source -> one :class:`ClusterTopology`.

Rules (architecture.md, "Sources compose"; sources.md 3.13):

* Every source whose complete set of variables is set is read (:func:`seen_sources`);
  each reports only what it saw (:class:`~derive_env.sources.report.Report`).
* Process layer: from the innermost source that launched processes (torchrun > an MPI
  launcher > an srun step > an allocation > a node-level manager such as Backend.AI).
* A Slurm step (or any outer source with a process layer) whose world size or rank differs
  from the inner launcher's is that launcher's daemon step (``mpirun`` starts its daemons
  with ``srun --ntasks-per-node=1``: sources.md 3.1 (b)): it is shadowed, facts and all,
  since its node list can also miss the node ``mpirun`` itself runs on (the recordings
  ``ompi-in-sbatch``). Equal layers confirm each other.
* Node layer: the innermost source that states node facts gives the node count and this
  node's rank; the innermost source with a host list gives the hosts. Where both state the
  count, the master and the node rank, they must agree (an error naming both). A source
  that numbers nodes itself (``Report.renumbers``: torchrun's rendezvous) never takes
  another source's host list: no node can know the rendezvous' order in advance, so its
  nodes stay without a host list on every node alike (a note says why).
* Master = the host of rank 0. A source that proves rank 0 is on another node than its
  first (``srun -m arbitrary``) names it; the nodes are then put in the order "the node
  of rank 0 first, then the others in the manager's order", so that node rank 0 is always
  the master, which torchrun's static rendezvous and every framework here require.
* Checks between the layers: the process counts per node sum to the world size and have
  one entry per node; this node's entry is its local world size; rank 0 is on node rank 0
  (a check only the process of rank 0 can make: under an MPI launcher or srun that one
  process failing stops the job).
* A seen source's ``Report.problem`` (a Slurm batch script of a multi-node job; a Slurm
  step self-check that an inner MPI launcher makes meaningless) is raised only when no
  inner source was seen.

Raises :class:`~derive_env.errors.TopologyError` (exit 3) on any disagreement, naming the
variables of both sides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib import import_module

from derive_env.errors import TopologyError, UsageError, describe
from derive_env.sources import SOURCE_NAMES, SOURCES, Source, seen_sources
from derive_env.sources.report import Processes, Report
from derive_env.topology import ClusterTopology, Node, ProcessLayout, single_node_topology

#: The variable that chooses a source for every node of a session (``--source`` wins).
SOURCE_VARIABLE = "DERIVE_ENV_SOURCE"
#: The choices besides a source name.
AUTO, NONE = "auto", "none"


def _read(source: Source, environ: Mapping[str, str],
          files: Callable[[Sequence[str]], Mapping[str, str | None]] | None) -> Report:
    module = import_module(source.module)
    needed = getattr(module, "files_needed", None)
    paths = needed(environ, source.name) if needed is not None else ()
    if paths:
        contents = files(paths) if files is not None else dict.fromkeys(paths)
        return module.read(environ, source.name, contents)
    return module.read(environ, source.name)


def choice_of(environ: Mapping[str, str], option: str | None) -> str:
    """The source choice: ``--source`` when given, else ``DERIVE_ENV_SOURCE``, else auto.

    :raises UsageError: ``--source`` is not a source name, ``auto`` or ``none`` (exit 2).
    :raises TopologyError: ``DERIVE_ENV_SOURCE`` is not (exit 3).
    """
    value = option if option is not None else environ.get(SOURCE_VARIABLE, "").strip() or AUTO
    if value not in (AUTO, NONE, *SOURCE_NAMES):
        error = UsageError if option is not None else TopologyError
        raise error(describe(
            "--source" if option is not None else SOURCE_VARIABLE, value,
            f"one of auto, none, {', '.join(SOURCE_NAMES)}"))
    return value


def _forced(name: str, environ: Mapping[str, str]) -> Source:
    source = next(s for s in SOURCES if s.name == name)
    missing = [v for v in source.detect if not environ.get(v)]
    if source.any_of and len(missing) < len(source.detect):
        missing = []
    if missing:
        needs = "at least one of" if source.any_of else "all of"
        raise TopologyError(describe(
            f"--source (or {SOURCE_VARIABLE})", name,
            f"a source whose variables are set: {source.title} needs {needs} "
            f"{', '.join(source.detect)}; not set: {', '.join(missing)}"))
    return source


def resolve(
    environ: Mapping[str, str],
    choice: str = AUTO,
    files: Callable[[Sequence[str]], Mapping[str, str | None]] | None = None,
    hosts_only: bool = False,
) -> tuple[ClusterTopology, list[Report]]:
    """Compose the topology of this process from every source seen in ``environ``.

    :param hosts_only: only the host list is wanted (``--format hosts`` and the hostfiles):
        a seen source's ``problem`` is not raised (a batch script of a multi-node job may
        start ``deepspeed`` or ``horovodrun`` with the allocation's hosts).
    :param choice: ``auto`` (detect), ``none`` (a single container, no source read) or a
        source name (only that source is read; its variables must be set).
    :param files: reads files a source needs (``SLURM_HOSTFILE``): paths -> contents, None
        for one that could not be read; ``None`` here: none can be read (``--env-file``).
    :returns: the topology and the reports it was composed from (innermost first), for
        ``--explain``. With no source seen, a single-container topology and no report.
    :raises TopologyError: a source's variables are bad, the layers disagree, or a seen
        source describes no usable topology (its ``problem``).
    """
    if choice == AUTO:
        sources = seen_sources(environ)
        if not sources:
            return single_node_topology(), []
        reports = [_read(s, environ, files) for s in sources]
        return compose(reports, hosts_only), reports
    ignored = [s.name for s in seen_sources(environ) if s.name != choice]
    if choice == NONE:
        topology, reports = single_node_topology(), []
    else:
        reports = [_read(_forced(choice, environ), environ, files)]
        topology = compose(reports, hosts_only)
    if ignored:  # the operator's choice wins, but not silently
        topology = topology.model_copy(update={"warnings": (*topology.warnings, (
            f"source {choice} chosen (--source or {SOURCE_VARIABLE}): "
            f"the variables of {', '.join(ignored)} are set and ignored; if they describe "
            "this job, every process may derive another job than its launcher started"))})
    return topology, reports


def _shadowed(reports: Sequence[Report]) -> tuple[list[Report], list[tuple[Report, Report]]]:
    """Drop outer process layers that describe an inner launcher's daemons."""
    used: list[Report] = []
    shadowed: list[tuple[Report, Report]] = []
    owner: Report | None = None
    depth = {s.name: s.depth for s in SOURCES}
    for report in reports:
        inner, outer = (owner.processes if owner else None), report.processes
        if inner is not None and outer is not None and (
                outer.world_size != inner.world_size or outer.rank != inner.rank):
            assert owner is not None
            if depth.get(report.source) == depth.get(owner.source):
                # Two launchers of one kind (MPI) cannot be told inner from outer: the
                # variables of one are left over from another job (Hydra copies them all).
                raise TopologyError(
                    f"{owner.title} and {report.title} both state this process's rank, and "
                    f"differently: rank {inner.rank} of {inner.world_size} "
                    f"({' + '.join(owner.inputs.get('processes', ()))}) against rank "
                    f"{outer.rank} of {outer.world_size} "
                    f"({' + '.join(report.inputs.get('processes', ()))}); one set is left over "
                    "from another job. Unset it (mpirun -x / mpiexec -genv pass only what you "
                    "name), or choose the launcher with --source NAME")
            shadowed.append((report, owner))
            if owner is not None and owner.count() == outer.world_size and set(
                    outer.tasks_per_node or (1,)) == {1}:
                # Its tasks are the inner launcher's agents, one per node (srun
                # --ntasks-per-node=1 torchrun): its node layer is the inner one's nodes.
                used.append(report._replace(processes=None))
            continue
        if owner is None and outer is not None:
            owner = report
        used.append(report)
    return used, shadowed


_FACTS = {"num_nodes": "number of nodes", "node_rank": "node rank of this process",
          "master": "host of rank 0 (the first node)"}


def _agree(inner: Report, outer: Report, fact: str, a: object, b: object) -> None:
    raise TopologyError(
        f"{inner.title} and {outer.title} disagree on the {_FACTS.get(fact, fact)}: "
        f"{' + '.join(inner.inputs.get(fact, ('?',)))} say {a}, "
        f"{' + '.join(outer.inputs.get(fact, ('?',)))} say {b}. derive-env does not "
        "guess which one is right: run the launcher inside the allocation it belongs to, "
        "or choose one with --source NAME (or DERIVE_ENV_SOURCE)")


def compose(reports: Sequence[Report], hosts_only: bool = False) -> ClusterTopology:
    """The topology from reports ordered innermost first (see the module docstring).

    :raises TopologyError: as :func:`resolve`.
    """
    used, shadowed = _shadowed(reports)
    innermost = reports[0]
    if innermost.problem and not hosts_only:  # innermost only: an inner one uses its facts
        raise TopologyError(innermost.problem)
    notes: list[str] = []
    warnings: list[str] = []
    for report in used:
        notes += report.notes
        warnings += report.warnings
    owner = next((r for r in used if r.processes is not None), None)
    node_src = next((r for r in used if r.count() is not None or r.node_rank is not None),
                    None)
    hosts_src = next((r for r in used if r.nodes), None)
    nodes: tuple[Node, ...] = ()
    num_nodes = node_src.count() if node_src else None
    node_rank = node_src.node_rank if node_src else None
    inputs: dict[str, tuple[str, ...]] = {}
    if node_src is not None:
        for fact in ("num_nodes", "node_rank"):
            if fact in node_src.inputs:
                inputs[fact] = node_src.inputs[fact]
    order = None
    if hosts_src is not None:
        nodes, order = hosts_src.nodes, hosts_src.order
        inputs["nodes"] = hosts_src.inputs.get("nodes", ())
        if hosts_src is not node_src and node_src is not None:
            # Whether the two orders can be the same is decided from data every node shares
            # (the node count, the master's host), so every node adopts the host list or
            # none does; then each node's own rank must agree (a check only it can make).
            first = nodes[0].host.lower()
            shared_fit = num_nodes in (None, len(nodes)) and (
                node_src.master is None or node_src.master.lower() == first)
            if node_src.renumbers:
                # Its order (torchrun's rendezvous) is known to no node in advance: no node
                # can match it to another source's list, so none uses that list.
                notes.append(
                    f"{node_src.title} numbers the nodes itself (its rendezvous), in an order "
                    f"{hosts_src.title} does not state: its host list is not used for them")
                nodes, order = (), None
                inputs.pop("nodes")
            elif not shared_fit:
                if num_nodes not in (None, len(nodes)):
                    _agree(node_src, hosts_src, "num_nodes", num_nodes, len(nodes))
                _agree(node_src, hosts_src, "master", node_src.master, nodes[0].host)
            elif node_rank is not None and hosts_src.node_rank not in (None, node_rank):
                _agree(node_src, hosts_src, "node_rank", node_rank, hosts_src.node_rank)
            elif node_rank is None:
                node_rank = hosts_src.node_rank
                if "node_rank" in hosts_src.inputs:
                    inputs["node_rank"] = hosts_src.inputs["node_rank"]
        if nodes:
            num_nodes = len(nodes)
    master = next((r.master for r in used if r.master), None)
    master_src = next((r for r in used if r.master), None)
    processes = owner.processes if owner else None
    tasks = processes.tasks_per_node if processes else ()
    if processes is not None and not tasks:  # a confirming outer layer may state them
        tasks = next((r.processes.tasks_per_node for r in used
                      if r.processes is not None and r.processes.tasks_per_node), ())
    if owner is not None:
        inputs["processes"] = owner.inputs.get("processes", ())
    if master is not None and master_src is not None:
        inputs["master"] = master_src.inputs.get("master", ())
        lowered = [n.host.lower() for n in nodes] if master_src is hosts_src else []
        if nodes and master_src is not hosts_src:
            master = None  # adopted above only when it is the first host: node rank 0
        elif nodes and master.lower() in lowered:
            # The node of rank 0 first: node rank 0 is the master (module docstring).
            at = lowered.index(master.lower())
            if at:
                nodes = (nodes[at], *nodes[:at], *nodes[at + 1:])
                if tasks and len(tasks) > at:
                    tasks = (tasks[at], *tasks[:at], *tasks[at + 1:])
                if node_rank is not None:
                    node_rank = 0 if node_rank == at else node_rank + (node_rank < at)
                    inputs["node_rank"] = (
                        *inputs.get("node_rank", ()),
                        f"{master} (the node of rank 0) moved first")
                order = (f"the node of rank 0 ({master}, from "
                         f"{' + '.join(inputs['master'])}) first, then "
                         f"{order or 'the manager order'}")
            master = None
    layout = _layout(processes, tasks, num_nodes, node_rank, owner)
    if layout is not None and layout.rank == 0 and node_rank not in (None, 0):
        here = f"{nodes[node_rank].host}, node rank {node_rank}" if nodes else (
            f"node rank {node_rank}")
        raise TopologyError(
            f"rank 0 ({' + '.join(inputs['processes'])}) runs on {here}, but every "
            f"framework needs rank 0 on node rank 0 (the master, "
            f"{nodes[0].host if nodes else 'node rank 0'}): the launcher placed its ranks "
            "in another order than the node list. Place rank 0 on the first node (mpirun "
            f"--map-by slot, the default) (checked on {here} only)")
    gpus_src = next((r for r in used if r.gpus is not None), None)
    port_src = next((r for r in used if r.master_port is not None), None)
    resv_src = next((r for r in used if r.reserved_ports), None)
    job_src = next((r for r in used if r.job is not None), None)
    for name, src in (("gpus", gpus_src), ("master_port", port_src), ("ports", resv_src)):
        if src is not None and name in src.inputs:
            inputs[name] = src.inputs[name]
    preset: frozenset[str] = frozenset()
    for report in used:
        preset |= report.preset
    layers = _layers(reports, used, shadowed, owner, node_src, hosts_src)
    sized = not (node_src is not None and num_nodes is None and not nodes)
    if sized and not nodes and num_nodes is None and (
            layout is None or layout.world_size == layout.local_world_size):
        num_nodes = 1  # every process (if any) on this node
    if not nodes and num_nodes == 1 and master is None:
        nodes, node_rank = (Node(host="localhost"),), 0
    return ClusterTopology(
        source=(hosts_src or node_src or owner or innermost).source,
        nodes=nodes,
        node_rank=node_rank,
        node_count=None if nodes else num_nodes,
        master=master,
        gpus_per_node=gpus_src.gpus if gpus_src else None,
        master_port=port_src.master_port if port_src else None,
        reserved_ports=resv_src.reserved_ports if resv_src else (),
        job=job_src.job if job_src else None,
        session_id=next((r.session_id for r in (hosts_src, node_src, *used)
                         if r is not None and r.session_id), None),
        processes=layout,
        preset=preset,
        inputs=inputs,
        order=order,
        notes=tuple(notes),
        warnings=tuple(warnings),
        layers=layers,
        sized=sized,
        missing=None if nodes or master else _missing(owner, node_src),
    )


def _layout(processes: Processes | None, tasks: tuple[int, ...], num_nodes: int | None,
            node_rank: int | None, owner: Report | None) -> ProcessLayout | None:
    if processes is None or owner is None:
        return None
    src = " + ".join(owner.inputs.get("processes", ()))
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
    try:
        return ProcessLayout(
            rank=processes.rank, local_rank=processes.local_rank,
            world_size=processes.world_size, local_world_size=processes.local_world_size,
            tasks_per_node=tasks or None,
        )
    except ValueError:
        raise TopologyError(
            f"{owner.title}: rank {processes.rank} / local rank {processes.local_rank} are "
            f"not below world size {processes.world_size} / local world size "
            f"{processes.local_world_size} ({src})") from None


def _missing(owner: Report | None, node_src: Report | None) -> str:
    who = (owner or node_src)
    title = who.title if who else "the launcher"
    how = ("mpiexec -genv MASTER_ADDR <host of rank 0>" if who is not None
           and who.source == "hydra" else "mpirun -x MASTER_ADDR=<host of rank 0>")
    return (f"{title} states no host list, so the host of rank 0 is unknown: set "
            f"MASTER_ADDR to it (the same value for every process, e.g. {how}), or run the "
            "launcher inside a Slurm allocation or a Backend.AI session, which state the hosts")


def _layers(reports: Sequence[Report], used: Sequence[Report],
            shadowed: Sequence[tuple[Report, Report]], owner: Report | None,
            node_src: Report | None, hosts_src: Report | None) -> tuple[str, ...]:
    """Lines for ``--explain``: every source seen, what each layer used, what was shadowed."""
    if len(reports) == 1:
        only = reports[0]
        layers = [name for name, used in (("process layer", owner), ("node layer", node_src))
                  if used is only]
        return (f"source seen: {only.source} ({only.title}), for the "
                f"{' and the '.join(layers) or 'GPU count and port only'}",)
    lines = ["sources seen (innermost first): " + ", ".join(
        f"{r.source} ({r.title})" for r in reports)]
    lines.append(f"process layer: {owner.source if owner else 'none stated'}")
    node = node_src.source if node_src else "none stated"
    hosts = hosts_src.source if hosts_src else "none (no host list)"
    lines.append(f"node layer: node count and rank from {node}; hosts from {hosts}")
    for report, by in shadowed:
        lines.append(
            f"shadowed: {report.source} ({report.title}): its world size or rank differs "
            f"from {by.source}'s, so it describes {by.title}'s daemons, not the ranks")
    for report in used:
        if report not in (owner, node_src, hosts_src):
            lines.append(f"shadowed: {report.source}: an inner source states its facts")
    return tuple(lines)
