"""``--explain --all-nodes``: every node's view of the job, from the data all nodes share.

Contract section 8, "Whole job from one node". For each node of the
:class:`~derive_env.topology.ClusterTopology`, the frameworks' derivation with that node as
"this node": the same topology with that node's rank (and, under a launcher that states
every node's processes, that node's first and last process), the same labels and the same
user-set variables (a cluster manager copies them into every container), and no host facts.
So it works alike for every source, and never invents a container's environment.

What only a node can decide on itself is not derived for the others, and is named: its
interfaces (``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME``), its GPU count (a
``PET_NPROC_PER_NODE`` taken from it, ``JAX_LOCAL_DEVICE_IDS``), its own host checks.

A user-set value is judged on each node as the merge judges it there
(:func:`derive_env.merge.same_value`), so a session-wide ``NODE_RANK=0`` that is right on
one node only is marked on every other one: the picture ``--explain`` keeps on an error.

Pure; imported only for ``--explain --all-nodes`` and for ``--explain`` on an error.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate
from typing import NamedTuple

from derive_env.errors import DeriveEnvError
from derive_env.frameworks.context import JSON, NODE, SHARED, Context, DerivedVariable
from derive_env.merge import merge, same_value
from derive_env.pipeline import Derivation, contributions
from derive_env.policy import ImagePolicy
from derive_env.sources.compose import topology_of
from derive_env.topology import ClusterTopology, Inputs, ProcessLayout

#: At most this many nodes get a row: the first ones, this node and the last one.
ROWS = 32


class NodeRow(NamedTuple):
    """One node's view.

    :ivar rank: its node rank.
    :ivar host: its host; ``None`` when the job states a node count and no host list.
    :ivar name: its role and index (``sub2``) when the manager names them, else ``""``.
    :ivar cells: variable -> its value on that node (``0-1``: its first and last process).
    :ivar conflicts: variable -> the user-set value that differs from the one derived here.
    :ivar error: why nothing could be derived for that node (the frameworks' message).
    """

    rank: int
    host: str | None
    name: str
    cells: dict[str, str]
    conflicts: dict[str, str]
    error: str | None = None


class JobView(NamedTuple):
    """The whole job as one node derives it.

    :ivar source: the source of the node layer.
    :ivar num_nodes: the job's node count (``None``: not stated, then ``absent`` says so).
    :ivar own_rank: this node's rank, ``None`` when no source states it.
    :ivar columns: the variables that differ between nodes (or identify one), in
        framework order.
    :ivar rows: the nodes shown (:data:`ROWS` at most), in node-rank order.
    :ivar shared: ``(variable, value, user-set value that differs or None)``: the
        variables with one value on every node shown.
    :ivar node_decided: this node's variables that each node decides on itself.
    :ivar absent: why there is no table (no node count), else ``None``.
    :ivar notes: what the table cannot show (a launcher that states only this process).
    """

    source: str
    num_nodes: int | None
    own_rank: int | None
    columns: tuple[str, ...] = ()
    rows: tuple[NodeRow, ...] = ()
    shared: tuple[tuple[str, str, str | None], ...] = ()
    node_decided: tuple[str, ...] = ()
    absent: str | None = None
    notes: tuple[str, ...] = ()


def job_view(inputs: Inputs, own: Derivation | None = None) -> JobView:
    """Every node's view of the job (module docstring).

    :param inputs: this node's inputs (no host facts are read): the user-set values in its
        environment are taken as set on every node (session-wide), as a cluster manager
        copies them; the image opted in (its labels); ``choice`` and ``files`` as for
        :func:`derive_env.pipeline.derive_from`.
    :param own: this node's own derivation, when it succeeded: the variables it has that
        no host-free view has are :attr:`JobView.node_decided`.
    :raises DeriveEnvError: the labels or the topology are bad (nothing to show).
    """
    environ = inputs.environ
    policy = ImagePolicy.from_labels(inputs.labels)
    topology = topology_of(inputs)
    count = topology.num_nodes
    view = JobView(source=topology.source, num_nodes=count, own_rank=topology.node_rank)
    if count is None:
        return view._replace(absent=(
            f"{topology.source} states no node list and no node count: each process knows "
            f"only its own ranks ({topology.inputs_of('processes')}), so the other nodes' "
            "views cannot be derived here. Run --explain in each process, or run the "
            "launcher inside an allocation or a Backend.AI session that states the nodes"))
    layouts, notes = _layouts(topology, count)
    shown = sorted({*range(min(count, ROWS - 2)), count - 1,
                    *(() if topology.node_rank is None else (topology.node_rank,))})
    # A launcher's own variables (topology.preset: Kubeflow's PET_NODE_RANK, torchrun's
    # RANK) are this node's, not session-wide: another node derives without them.
    others = {k: v for k, v in environ.items() if k not in topology.preset}
    rows, values = [], []
    for rank in shown:
        here = environ if rank == topology.node_rank else others
        row, found = _row(Context(topology, policy, Inputs(here, {})), rank,
                          layouts(rank))
        if not found and not row.error and own is not None and rank == topology.node_rank:
            # its processes unknown to the others: this node's own derivation
            row, found = _fill(row, own.variables, own.variables, topology.preset)
        rows.append(row)
        values.append(found)
    columns, shared = _columns(rows, values)
    rows = [row._replace(cells={c: row.cells[c] for c in columns if c in row.cells},
                         conflicts={c: v for c, v in row.conflicts.items() if c in columns})
            for row in rows]
    return view._replace(
        columns=tuple(columns), rows=tuple(rows), shared=tuple(shared), notes=tuple(notes),
        node_decided=_node_decided(own, values, rows))


def _layouts(topology: ClusterTopology, count: int) -> tuple[
        Callable[[int], tuple[ProcessLayout | None, ...]], list[str]]:
    """For a node rank, the process layers its view is derived with: none (no process
    layer), or that node's first and last process; and notes on what is not stated."""
    layout = topology.processes
    if layout is None:
        return (lambda rank: (None,)), []
    tasks = layout.tasks_per_node or ((1,) * count if not topology.per_process else None)
    if tasks is None:
        return (lambda rank: ()), [
            f"the launcher states only this process's ranks ({topology.inputs_of('processes')})"
            ", not which ranks run on the other nodes: their per-process variables are not "
            "derived here"]
    starts = (0, *accumulate(tasks))
    own = topology.node_rank
    if topology.per_process and own is not None and own < len(tasks) and (
            layout.rank != starts[own] + layout.local_rank):
        # ranks not numbered node by node (srun -m cyclic, mpirun --map-by node): which ranks
        # the other nodes run is not stated; never print a range that contradicts this one
        return (lambda rank: ()), [
            f"this process is rank {layout.rank}, local rank {layout.local_rank} on node rank "
            f"{own}: the ranks are not numbered node by node (a cyclic placement), and which "
            "ranks run on the other nodes is not stated: their per-process variables are not "
            "derived here"]

    def of(rank: int) -> tuple[ProcessLayout | None, ...]:
        first, n = starts[rank], tasks[rank]
        return tuple(layout.model_copy(update={
            "rank": first + local, "local_rank": local, "local_world_size": n})
            for local in dict.fromkeys((0, n - 1)))

    return of, ["ranks per node as numbered node by node (a block placement, which this "
                "process's rank fits); a cyclic placement numbers them otherwise"
                ] if topology.per_process else []


def _row(base: Context, rank: int, layouts: tuple[ProcessLayout | None, ...]
         ) -> tuple[NodeRow, dict[str, DerivedVariable]]:
    """One node's row, and its first process's variables by name: ``base``'s topology, policy
    and environment with node ``rank`` as this node (and each of ``layouts``), no facts."""
    topology, environ = base.topology, base.environ
    node = topology.nodes[rank] if topology.nodes else None
    name = f"{node.role}{node.index}" if node and node.role and node.index else ""
    row = NodeRow(rank=rank, host=node.host if node else
                  (topology.master if rank == 0 else None), name=name, cells={}, conflicts={})
    derived: list[list[DerivedVariable]] = []
    try:
        for processes in layouts:
            topo = topology.model_copy(update={
                "node_rank": rank, "processes": processes, "gpus_per_node": None})
            part = contributions(Context(topo, base.policy, Inputs(environ, {})))
            derived.append(merge(environ, part.variables, part.checks))
    except DeriveEnvError as exc:
        return row._replace(error=str(exc)), {}
    return _fill(row, *derived[:1], *derived[-1:], preset=topology.preset)


def _fill(row: NodeRow, first: Sequence[DerivedVariable] = (),
          last: Sequence[DerivedVariable] = (), preset: frozenset[str] = frozenset(),
          ) -> tuple[NodeRow, dict[str, DerivedVariable]]:
    """The row's cells from its first and last process's variables, the user-set values
    that differ marked (not a launcher's own, ``preset``: its authority); and the first
    process's variables by name."""
    at_last = {v.name: v for v in last}
    for var in first:
        if var.node_decided:  # never derived for another node
            continue
        row.cells[var.name] = _cell(var, at_last.get(var.name, var))
        if var.kept and var.scope != SHARED and var.name not in preset and not same_value(
                var.compare, var.value, var.derived or ""):
            row.conflicts[var.name] = var.value
    return row, {v.name: v for v in first if not v.node_decided}


def _text(var: DerivedVariable) -> str:
    """The value derived for a node (a user's own when it wins): a TF_CONFIG as its task."""
    value = var.value if var.kept and var.scope == SHARED else (var.derived or var.value)
    if var.compare == JSON:
        try:
            task = json.loads(value)["task"]
            return f"{task['type']} {task['index']}"
        except (ValueError, KeyError, TypeError):
            return value
    return value


def _cell(first: DerivedVariable, last: DerivedVariable) -> str:
    """A node's value: ``a-b`` when its first and last process differ (``worker 0-1``)."""
    a, b = _text(first), _text(last)
    if a == b:
        return a
    head, _, tail = b.rpartition(" ")
    return f"{a}-{tail}" if a.rpartition(" ")[0] == head else f"{a}-{b}"


def _columns(rows: Sequence[NodeRow], values: Sequence[Mapping[str, DerivedVariable]]
             ) -> tuple[list[str], list[tuple[str, str, str | None]]]:
    """The variables that differ between the rows (or identify a node), and those with one
    value on every row, each with the user-set value when it differs (a job's size)."""
    order = list(dict.fromkeys(name for found in values for name in found))
    columns, shared = [], []
    for name in order:
        texts = {row.cells.get(name) for row in rows if row.cells}
        scope = next(found[name].scope for found in values if name in found)
        if len(texts) > 1 or scope == NODE:
            columns.append(name)
            continue
        var = next(found[name] for found in values if name in found)
        differs = var.kept and var.scope != SHARED and not same_value(
            var.compare, var.value, var.derived or "")
        shared.append((name, texts.pop() or "", var.value if differs else None))
    return columns, shared


def _node_decided(own: Derivation | None, values: Sequence[Mapping[str, DerivedVariable]],
                  rows: Sequence[NodeRow]) -> tuple[str, ...]:
    """This node's variables that no host-free view derives, or derives otherwise."""
    if own is None:
        return ()
    mine = next((found for found, row in zip(values, rows, strict=True)
                 if row.rank == own.topology.node_rank), None) or {}
    return tuple(v.name for v in own.variables if _decided_here(v) or (
        not v.kept and (v.name not in mine or mine[v.name].value != v.value)
        and v.scope == SHARED))


def _decided_here(var: DerivedVariable) -> bool:
    """``var`` is this node's own decision (``node_decided``): its interfaces and devices,
    whoever set them; its GPU count's ``PET_NPROC_PER_NODE`` only when derived, as a user's
    value is the job's choice, the same on every node (the merge reads it as SHARED)."""
    return var.node_decided and not (var.kept and var.name == "PET_NPROC_PER_NODE")
