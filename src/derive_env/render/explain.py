"""``--dry-run --explain``: a derivation for a person.

The topology first (source, session, nodes, processes, the source's notes, every layer
seen), then the frameworks, then each variable with its value and where it came from, then
the job digest of a job of several nodes (:func:`derive_env.digest.explain_lines`: one
line; ``--format digest-facts`` lists its facts), then the notes and warnings. Only
derived variables are printed (the input environment can hold access keys), and every value
with control characters escaped.

Imported only for ``--explain``.
"""

from __future__ import annotations

from derive_env.errors import printable
from derive_env.labels import OPT_IN

# Not from typing, and the pipeline (pydantic) only for type checkers: ``--explain`` for an
# image that did not opt in imports no pydantic (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from derive_env.pipeline import Derivation
    from derive_env.topology import ClusterTopology

__all__ = ["explain"]
#: What Backend.AI calls its job (the one place outside sources/backendai*.py that says so).
BACKENDAI_WORD = "session"
#: The layer lines naming the source of each layer (sources/report.py ``layer_lines``).
_NODE_LAYER, _PROCESS_LAYER = "node layer: node count and rank from ", "process layer: "
#: --explain lists at most this many nodes (the first ones, the master, this node).
_NODES_SHOWN = 16
#: The HPC schedulers and launchers (sources/__init__.py ``SOURCES``, depth 1 to 3: MPI
#: launchers, Slurm, Flux, jsrun, PBS, LSF, Grid Engine): their job runs on bare metal, or
#: in a container per task, never in "this container" of a node; tests/render checks the
#: table against the sources' (render/ reads no source).
SCHEDULERS = frozenset({
    "openmpi", "mvapich2", "hydra", "pals", "pmi", "pmix", "slurm-step", "slurm-allocation",
    "slurm-batch", "flux", "jsrun", "pbs", "torque-task", "lsf", "gridengine",
    "gridengine-task"})
#: torchrun's run id of its static rendezvous (torch/distributed/run.py, ``--rdzv-id``'s
#: default): no id of a job.
_NO_RUN_ID = "none"


def explain(derivation: Derivation | None, *, image: bool = True) -> str:
    """For a person: the topology, then each variable with its value and where it came from.

    The topology part: source, session, node count; the nodes in canonical order under a
    header naming the rule that built the order (``ClusterTopology.order``); the source's
    notes (``ClusterTopology.notes``, e.g. a Backend.AI LOCAL_RANK that differs from the
    node rank). Warnings (the source's first) close the text.

    :param derivation: the derivation, ``None`` when not opted in.
    :param image: a labels file was read (an image's); without one (bare metal) the
        not-opted-in line names the job's options instead of the image's label, and the
        topology speaks of nodes, not containers (as it does under an HPC scheduler or
        launcher, :data:`SCHEDULERS`).
    :returns: the text to print, ending in a newline.
    """
    if derivation is None:
        why = (f"the image has no label {OPT_IN}" if image else
               "the job gives no frameworks (derive-env --frameworks pytorch, or "
               "DERIVE_ENV_FRAMEWORKS=pytorch)")
        return (
            f"not opted in: {why}\n"
            "nothing is derived; the command runs with the environment unchanged\n"
        )
    topo, policy = derivation.topology, derivation.policy
    lines = _topology_lines(derivation, _in_container(topo, image))
    lines += topo.notes  # e.g. the cluster manager's own rank, when it differs
    lines += topo.layers  # every source seen, what each layer used, what was shadowed
    mode = f" (mode {policy.pytorch_mode})" if "pytorch" in policy.frameworks else ""
    if mode and topo.per_process:
        mode = f" (mode {policy.pytorch_mode} not used: one worker per process)"
    lines.append(f"frameworks: {', '.join(policy.frameworks)}{mode}")
    # The labels a session variable gave (docs/behaviour.md section 9), named as their source.
    lines += [f"label {label} from variable {variable}" for label, variable in policy.variables]
    lines.append("")
    lines += _variable_lines(derivation)
    if topo.multi_node:  # what the nodes compare: nothing to compare on a single node
        from derive_env.digest import explain_lines

        lines += explain_lines(derivation)
    if derivation.notes:
        lines.append("")
        lines += derivation.notes
    for warning in derivation.warnings:
        lines.append(f"warning: {warning}")
    # Any raw value in a note or a provenance (TORCHELASTIC_RUN_ID...) escaped, line by line.
    return "\n".join(printable(line, keep="\n") for line in lines) + "\n"


def _printable(value: str) -> str:
    """A value for a person: control characters escaped (a kept value could otherwise forge
    lines), cut at 300 characters."""
    if not value.isprintable():
        value = repr(value)
    return value if len(value) <= 300 else value[:300] + "..."


def _in_container(topo: ClusterTopology, image: bool) -> bool:
    """Whether --explain speaks of containers: no HPC scheduler or launcher
    (:data:`SCHEDULERS`) named the job or gave one of its layers, and either a container
    platform's source (Backend.AI, Kubernetes, a cloud) was seen or a labels file (an
    image's) was read; else of nodes and processes (bare metal: ``--frameworks``)."""
    return (image or topo.source != "standalone") and not (
        {topo.source, *_layer_names(topo)} & SCHEDULERS)


def _session(topo: ClusterTopology) -> str:
    """`` job ID`` (`` session ID`` for Backend.AI), ``""`` without an id or for torchrun's
    default run id (``none``: the static rendezvous names no job)."""
    if not topo.session_id or (topo.source == "torchrun" and topo.session_id == _NO_RUN_ID):
        return ""
    # Backend.AI says session; the job managers (Slurm, MPI, torchrun, Kubeflow) say job.
    kind = BACKENDAI_WORD if topo.source == "backendai" else "job"
    return f" {kind} {_printable(topo.session_id)}"


def _topology_lines(derivation: Derivation, container: bool) -> list[str]:
    """The source line, the master or the nodes, and the process layer."""
    topo = derivation.topology
    session = _session(topo)
    if not topo.multi_node:
        lines = [f"source: {topo.source}{session}, single "
                 + ("container" if container else "node")]
    elif not topo.nodes:
        lines = _without_host_list(derivation, session)
    else:
        lines = _node_lines(topo, session, container)
    layout = topo.processes
    if layout is not None:
        lines.append(
            f"processes ({topo.inputs_of('processes')}): rank {layout.rank} of "
            f"{layout.world_size}, local rank {layout.local_rank} of "
            f"{layout.local_world_size} on this node"
            + ("; one worker per process" if topo.per_process else "; one per node"))
    return lines


def _node_rank(topo: ClusterTopology) -> tuple[int | None, str]:
    """This node's rank as ``NODE_RANK`` has it (frameworks/context.py ``node_rank_of``):
    the topology's (``""``); else the rank of a process layer of one process per node that
    is not the job's workers (a Flux task under ``flux run -N``), with the variables that
    give it; ``(None, "")`` when neither."""
    if topo.node_rank is not None:
        return topo.node_rank, ""
    layout = topo.processes
    if layout is not None and not topo.per_process:
        return layout.rank, f"{topo.inputs_of('rank')}, one process per node"
    return None, ""


def _without_host_list(derivation: Derivation, session: str) -> list[str]:
    """A session of several nodes that no source lists: the count, and the master."""
    topo = derivation.topology
    count = f"{topo.num_nodes} nodes" if topo.num_nodes else "nodes not stated"
    own, inputs = _node_rank(topo)
    rank = "" if own is None else f", node rank {own}" + (f" ({inputs})" if inputs else "")
    lines = [f"source: {topo.source}{session}, {count}{rank}; no host list"]
    if topo.master is not None:
        lines.append(f"master (host of rank 0): {topo.master} ({topo.inputs_of('master')})")
    elif any(v.name == "MASTER_ADDR" and v.kept for v in derivation.variables):
        lines.append("no source states the host of rank 0: MASTER_ADDR (set) is used")
    elif topo.missing:
        lines.append(f"no source states the host of rank 0: {topo.missing}")
    return lines


def _node_lines(topo: ClusterTopology, session: str, container: bool) -> list[str]:
    """The source line, then the first nodes and this one in canonical order."""
    me, layout = topo.this_node, topo.processes
    unit = "container" if container and layout is None else "node"
    own, inputs = _node_rank(topo)
    if me is not None:
        who = "this process runs on" if layout is not None else f"this {unit} is"
        where = f"{who} {me.host}, node rank {topo.node_rank}"
    elif own is not None:  # the rank NODE_RANK gets, its host not stated
        where = f"this process is node rank {own} ({inputs}); its host is not stated"
    else:
        where = "this process's node is not stated"
    lines = [f"source: {topo.source}{session}{_layer_sources(topo)}, {topo.num_nodes} nodes; "
             f"{where}"]
    # the source says which rule built the order (REPLICAS, or names parsed from HOSTS)
    rule = f" ({topo.order})" if topo.order else ""
    lines.append(f"nodes in canonical order{rule}:")
    # The first nodes and this one: no pass over a 4096-node session's others.
    mine = {topo.node_rank} if topo.node_rank is not None else set()
    tasks = layout.tasks_per_node if layout is not None else None
    for rank in sorted({*range(min(len(topo.nodes), _NODES_SHOWN)), *mine}):
        node = topo.nodes[rank]
        tags = (["master"] if rank == 0 else []) + (
            [f"this {unit}"] if rank == topo.node_rank else [])
        count = f"  {tasks[rank]} process(es)" if tasks else ""
        lines.append(f"  {rank:>4}  {node.host}{count}"
                     + (f"  ({', '.join(tags)})" if tags else ""))
    if len(topo.nodes) > _NODES_SHOWN:
        lines.append(f"  ... {len(topo.nodes)} nodes in all")
    return lines


def _layer_names(topo: ClusterTopology) -> tuple[str | None, str | None]:
    """The sources the layer lines name (sources/report.py ``layer_lines``): of the node
    count and rank, and of the process ranks; ``None`` for a layer no line names."""
    node = owner = None
    for line in topo.layers:
        if line.startswith(_NODE_LAYER):
            node = line[len(_NODE_LAYER):].split(";", 1)[0]
        elif line.startswith(_PROCESS_LAYER):
            owner = line[len(_PROCESS_LAYER):]
    return node, owner


def _layer_sources(topo: ClusterTopology) -> str:
    """The other sources of the node count and rank, and of the process ranks, when not the
    one named first (the host list's): an ``mpirun`` inside a Slurm allocation gives the
    ranks, the allocation the hosts, as the layer lines below say (sources/report.py
    ``layer_lines``); ``""`` when one source gave all."""
    roles: dict[str, list[str]] = {}
    for name, what in zip(_layer_names(topo), ("node count and rank", "process ranks"),
                          strict=True):
        if name not in (None, "none stated", topo.source):
            roles.setdefault(name, []).append(what)
    if not roles:
        return ""
    return " (" + "; ".join(f"{', '.join(what)} from {name}"
                            for name, what in roles.items()) + ")"


def _variable_lines(derivation: Derivation) -> list[str]:
    """Each variable: ``NAME = value``, then kept (and the derived value) or its source."""
    lines = []
    width = max((len(v.name) for v in derivation.variables), default=0)
    for var in derivation.variables:
        value = _printable(var.value)
        lines.append(f"{var.name:<{width}} = {value}")
        if var.kept:
            same = "same as derived" if var.derived == var.value else f"derived: {var.derived}"
            lines.append(f"{'':<{width}}   kept: already set ({same})")
        else:
            lines.append(f"{'':<{width}}   source: {var.provenance}")
    return lines
