"""What one source saw: :class:`Report`, the unit the composer composes (sources/compose.py).

A source module never decides for another source (docs/sources/README.md, "How the
sources compose"): it reads only its own variables, checks them against each other, and
reports each fact with the variables it came from. Every fact is optional: an MPI
launcher knows ranks and no host list, a Slurm batch script knows the allocation's hosts
and no process of its own.
:func:`layer_lines` says, for ``--explain``, how the composer used the reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

from derive_env.topology import Node

_NONE: Mapping[str, tuple[str, ...]] = MappingProxyType({})
#: The facts of the process layer, each with its own key in :attr:`Report.inputs` (the one
#: variable that states it), beside ``processes`` (every variable of the layer).
PROCESS_FACTS = ("rank", "local_rank", "world_size", "local_world_size")


class Processes(NamedTuple):
    """The process layer as one source states it (names as in torch.distributed).

    :ivar rank: this process's global rank, 0-based.
    :ivar local_rank: its rank among the processes on its node, 0-based.
    :ivar world_size: processes of the whole job (>= 1).
    :ivar local_world_size: processes on this node (>= 1).
    :ivar tasks_per_node: every node's process count, in node order, when the source
        states it (Slurm's ``SLURM_STEP_TASKS_PER_NODE``); empty when it does not.
    """

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    tasks_per_node: tuple[int, ...] = ()


class Report(NamedTuple):
    """The facts one source found in the environment; ``None`` / empty = not stated.

    :ivar source: the source's name in the table (``slurm-step``, ``openmpi``).
    :ivar title: for a person (``a Slurm step (srun)``).
    :ivar nodes: the nodes in the manager's order (node rank r = ``nodes[r]``).
    :ivar node_rank: this process's node, a position in ``nodes`` (or in a node list the
        source knows only the length of: ``num_nodes``).
    :ivar num_nodes: the number of nodes, when known without a host list (torchrun's
        ``GROUP_WORLD_SIZE``); ``len(nodes)`` otherwise.
    :ivar processes: the process layer, when the source launched processes.
    :ivar master: the host of rank 0 when the source proves it is not ``nodes[0]``
        (``srun -m arbitrary``: the first line of ``SLURM_HOSTFILE``), or when the source
        knows the master without a host list (torchrun's ``MASTER_ADDR``).
    :ivar master_port: a TCP port the manager chose for the master (Backend.AI's
        ``BACKENDAI_DIST_MASTER_PORT``, torchrun's ``MASTER_PORT``: its agent's store).
    :ivar reserved_ports: TCP ports the manager reserved for this step, in order
        (``SLURM_STEP_RESV_PORTS``).
    :ivar server_ports: ``(framework, TCP port, variable)`` for each framework server whose
        port the manager declared (a Kubeflow JAXJob's ``COORDINATOR_PORT``, the port its
        Service and network policies open): that framework's port on every node.
    :ivar job: ``(manager, job id, step id)`` for the deterministic port policy
        (:func:`derive_env.ports.job_ports`), when the manager gives no port.
    :ivar gpus: devices of this node (``SLURM_GPUS_ON_NODE``, Backend.AI's ``GPU_COUNT``).
    :ivar session_id: the manager's job or session id.
    :ivar preset: framework variables the launcher already set and that must never be
        rewritten (torchrun's ``RANK``, ``MASTER_PORT`` ...): derived values for them are
        checked against the launcher's, never exported over them.
    :ivar renumbers: the source numbers nodes itself (torchrun's c10d rendezvous gives
        ``GROUP_RANK`` in arrival order): an outer host list whose order differs is not
        an error, it is only not used for this source's nodes.
    :ivar inputs: provenance per fact: keys ``nodes``, ``node_rank``, ``num_nodes``,
        ``processes`` (the layer's variables together), each of :data:`PROCESS_FACTS`
        (exactly the variables that state that one fact: ``rank`` is
        ``OMPI_COMM_WORLD_RANK``), ``master``, ``master_port``, ``gpus``, ``ports``.
    :ivar order: for ``--explain``, the rule behind the order of ``nodes``.
    :ivar notes: for ``--explain``.
    :ivar warnings: printed on stderr; do not stop the command.
    :ivar problem: for a source that is seen but describes no usable topology on its
        own (a Slurm batch script of a multi-node job): the error message, raised by the
        composer when no inner source (an MPI launcher started from that script) uses
        the facts.
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
    """Lines for ``--explain``: every source seen, what each layer of the composer
    (sources/compose.py) used, what was shadowed.

    :param reports: every seen source's report, innermost first.
    :param used: those the composer used (a shadowed daemon step left out).
    :param shadowed: ``(report, by, daemons)``: an outer process layer shadowed by the
        inner launcher ``by``; ``daemons``: it is ``by``'s daemon step (one task per node).
    :param layers: ``(owner, node_src, hosts_src)``: the report that gave the process
        layer, the node count and rank, the host list (each ``None`` when none stated it).
    """
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

