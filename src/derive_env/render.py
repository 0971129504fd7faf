"""Render a derivation for ``--dry-run``: env, json, toml, shell, or explained for a person.

Only derived variables are ever printed (the input environment can hold access keys).
The machine formats print exactly the variables the exec would add or change. The host
formats (:data:`derive_env.hostfiles.HOST_FORMATS`) print the session's nodes for a
launcher instead; they need the topology, not the derivation, and are rendered by
:func:`derive_env.hostfiles.render_for`.
"""

from __future__ import annotations

import json

from derive_env.formats import FORMATS
from derive_env.hostfiles import HOST_FORMATS
from derive_env.labels import OPT_IN

# Not from typing, and the pipeline (pydantic) only for type checkers: an image that did not
# opt in renders through here without importing pydantic (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from derive_env.pipeline import Derivation

__all__ = ["FORMATS", "explain", "render"]
#: --explain lists at most this many nodes (the first ones, the master, this container).
_NODES_SHOWN = 16


def render(derivation: Derivation | None, fmt: str) -> str:
    """The variables the exec would add or change, in ``fmt``.

    * ``env``: ``KEY=VALUE`` lines (values never contain a newline: they are derived from
      validated host names, numbers and compact JSON);
    * ``json``: one flat object of strings (``{}`` when not opted in);
    * ``toml``: a flat table of strings (tomli-w);
    * ``shell``: POSIX ``export KEY='value'`` lines, safe to ``eval`` whatever the values
      contain (``shlex.quote``).

    :raises ValueError: an unknown format, or a host format (those need the topology:
        :func:`derive_env.hostfiles.render_for`); the command line passes neither here.
    """
    values = derivation.changes() if derivation else {}
    if fmt == "json":
        return json.dumps(values, indent=None, separators=(", ", ": ")) + "\n"
    if fmt == "toml":
        import tomli_w

        return tomli_w.dumps(values)
    if fmt == "shell":
        return "".join(f"export {k}={_single_quoted(v)}\n" for k, v in values.items())
    if fmt == "env":
        return "".join(f"{k}={v}\n" for k, v in values.items())
    if fmt in HOST_FORMATS:
        raise ValueError(f"format {fmt!r} is rendered by derive_env.hostfiles.render_for")
    raise ValueError(f"unknown format {fmt!r}")


def _printable(value: str) -> str:
    """A value for a person: control characters escaped (a kept value could otherwise forge
    lines), cut at 300 characters."""
    if not value.isprintable():
        value = repr(value)
    return value if len(value) <= 300 else value[:300] + "..."


def _single_quoted(value: str) -> str:
    """``'value'`` for a POSIX shell, always quoted (contract: ``export KEY='value'``)."""
    import shlex  # only when there is something to quote: not for an image that did not opt in

    quoted = shlex.quote(value)
    # shlex leaves safe words bare; those hold no quote or special character to escape.
    return quoted if quoted.startswith("'") else f"'{value}'"


def explain(derivation: Derivation | None) -> str:
    """For a person: the topology, then each variable with its value and where it came from.

    The topology part: source, session, node count; the nodes in canonical order under a
    header naming the rule that built the order (``ClusterTopology.order``); the source's
    notes (``ClusterTopology.notes``, e.g. a Backend.AI LOCAL_RANK that differs from the
    node rank). Warnings (the source's first) close the text.
    """
    if derivation is None:
        return (
            f"not opted in: the image has no label {OPT_IN}\n"
            "nothing is derived; the command runs with the environment unchanged\n"
        )
    topo, policy = derivation.topology, derivation.policy
    me = topo.this_node
    lines = []
    # Backend.AI says session; the job managers (Slurm, MPI, torchrun, Kubeflow) say job.
    kind = "session" if topo.source in ("backendai", "standalone") else "job"
    session = f" {kind} {_printable(topo.session_id)}" if topo.session_id else ""
    layout = topo.processes
    if not topo.multi_node:
        lines.append(f"source: {topo.source}{session}, single-container session")
    elif not topo.nodes:
        count = f"{topo.num_nodes} nodes" if topo.num_nodes else "nodes not stated"
        rank = f", node rank {topo.node_rank}" if topo.node_rank is not None else ""
        lines.append(f"source: {topo.source}{session}, {count}{rank}; no host list")
        if topo.master is not None:
            lines.append(f"master (host of rank 0): {topo.master} ({topo.inputs_of('master')})")
        elif any(v.name == "MASTER_ADDR" and v.kept for v in derivation.variables):
            lines.append("no source states the host of rank 0: MASTER_ADDR (set) is used")
        elif topo.missing:
            lines.append(f"no source states the host of rank 0: {topo.missing}")
    else:
        who = "this process runs on" if layout is not None else "this container is"
        where = (f"{who} {me.host}, node rank {topo.node_rank}" if me is not None
                 else "this process's node is not stated")
        lines.append(f"source: {topo.source}{session}, {topo.num_nodes} nodes; {where}")
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
    if layout is not None:
        lines.append(
            f"processes ({topo.inputs_of('processes')}): rank {layout.rank} of "
            f"{layout.world_size}, local rank {layout.local_rank} of "
            f"{layout.local_world_size} on this node"
            + ("; one worker per process" if topo.per_process else "; one per node"))
    lines += topo.notes  # e.g. the cluster manager's own rank, when it differs
    lines += topo.layers  # every source seen, what each layer used, what was shadowed
    mode = f" (mode {policy.pytorch_mode})" if "pytorch" in policy.frameworks else ""
    if mode and topo.per_process:
        mode = f" (mode {policy.pytorch_mode} not used: one worker per process)"
    lines.append(f"frameworks: {', '.join(policy.frameworks)}{mode}")
    lines.append("")
    width = max((len(v.name) for v in derivation.variables), default=0)
    for var in derivation.variables:
        value = _printable(var.value)
        lines.append(f"{var.name:<{width}} = {value}")
        if var.kept:
            same = "same as derived" if var.derived == var.value else f"derived: {var.derived}"
            lines.append(f"{'':<{width}}   kept: already set ({same})")
        else:
            lines.append(f"{'':<{width}}   source: {var.provenance}")
    if derivation.notes:
        lines.append("")
        lines += derivation.notes
    for warning in derivation.warnings:
        lines.append(f"warning: {warning}")
    return "\n".join(lines) + "\n"
