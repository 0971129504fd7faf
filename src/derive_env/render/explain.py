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
#: --explain lists at most this many nodes (the first ones, the master, this container).
_NODES_SHOWN = 16


def explain(derivation: Derivation | None, *, image: bool = True) -> str:
    """For a person: the topology, then each variable with its value and where it came from.

    The topology part: source, session, node count; the nodes in canonical order under a
    header naming the rule that built the order (``ClusterTopology.order``); the source's
    notes (``ClusterTopology.notes``, e.g. a Backend.AI LOCAL_RANK that differs from the
    node rank). Warnings (the source's first) close the text.

    :param derivation: the derivation, ``None`` when not opted in.
    :param image: a labels file was read (an image's); without one (bare metal) the
        not-opted-in line names the job's options instead of the image's label.
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
    lines = _topology_lines(derivation)
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
    if topo.multi_node:  # what the nodes compare: nothing to compare in a single container
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


def _topology_lines(derivation: Derivation) -> list[str]:
    """The source line, the master or the nodes, and the process layer."""
    topo = derivation.topology
    # Backend.AI says session; the job managers (Slurm, MPI, torchrun, Kubeflow) say job.
    kind = BACKENDAI_WORD if topo.source == "backendai" else "job"
    session = f" {kind} {_printable(topo.session_id)}" if topo.session_id else ""
    if not topo.multi_node:
        lines = [f"source: {topo.source}{session}, single container"]
    elif not topo.nodes:
        lines = _without_host_list(derivation, session)
    else:
        lines = _node_lines(topo, session)
    layout = topo.processes
    if layout is not None:
        lines.append(
            f"processes ({topo.inputs_of('processes')}): rank {layout.rank} of "
            f"{layout.world_size}, local rank {layout.local_rank} of "
            f"{layout.local_world_size} on this node"
            + ("; one worker per process" if topo.per_process else "; one per node"))
    return lines


def _without_host_list(derivation: Derivation, session: str) -> list[str]:
    """A session of several nodes that no source lists: the count, and the master."""
    topo = derivation.topology
    count = f"{topo.num_nodes} nodes" if topo.num_nodes else "nodes not stated"
    rank = f", node rank {topo.node_rank}" if topo.node_rank is not None else ""
    lines = [f"source: {topo.source}{session}, {count}{rank}; no host list"]
    if topo.master is not None:
        lines.append(f"master (host of rank 0): {topo.master} ({topo.inputs_of('master')})")
    elif any(v.name == "MASTER_ADDR" and v.kept for v in derivation.variables):
        lines.append("no source states the host of rank 0: MASTER_ADDR (set) is used")
    elif topo.missing:
        lines.append(f"no source states the host of rank 0: {topo.missing}")
    return lines


def _node_lines(topo: ClusterTopology, session: str) -> list[str]:
    """The source line, then the first nodes and this one in canonical order."""
    me, layout = topo.this_node, topo.processes
    who = "this process runs on" if layout is not None else "this container is"
    where = (f"{who} {me.host}, node rank {topo.node_rank}" if me is not None
             else "this process's node is not stated")
    lines = [f"source: {topo.source}{session}{_layer_sources(topo)}, {topo.num_nodes} nodes; "
             f"{where}"]
    # the source says which rule built the order (REPLICAS, or names parsed from HOSTS)
    rule = f" ({topo.order})" if topo.order else ""
    lines.append(f"nodes in canonical order{rule}:")
    # The first nodes and this one: no pass over a 4096-node session's others.
    own = {topo.node_rank} if topo.node_rank is not None else set()
    tasks = layout.tasks_per_node if layout is not None else None
    for rank in sorted({*range(min(len(topo.nodes), _NODES_SHOWN)), *own}):
        node = topo.nodes[rank]
        tags = (["master"] if rank == 0 else []) + (
            [("this node" if layout is not None else "this container")]
            if rank == topo.node_rank else []
        )
        count = f"  {tasks[rank]} process(es)" if tasks else ""
        lines.append(f"  {rank:>4}  {node.host}{count}"
                     + (f"  ({', '.join(tags)})" if tags else ""))
    if len(topo.nodes) > _NODES_SHOWN:
        lines.append(f"  ... {len(topo.nodes)} nodes in all")
    return lines


def _layer_sources(topo: ClusterTopology) -> str:
    """The other sources of the node count and rank, and of the process ranks, when not the
    one named first (the host list's): an ``mpirun`` inside a Slurm allocation gives the
    ranks, the allocation the hosts, as the layer lines below say (sources/report.py
    ``layer_lines``); ``""`` when one source gave all."""
    node = owner = None
    for line in topo.layers:
        if line.startswith(_NODE_LAYER):
            node = line[len(_NODE_LAYER):].split(";", 1)[0]
        elif line.startswith(_PROCESS_LAYER):
            owner = line[len(_PROCESS_LAYER):]
    roles: dict[str, list[str]] = {}
    for name, what in ((node, "node count and rank"), (owner, "process ranks")):
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
