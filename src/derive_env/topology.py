"""ClusterTopology: the nodes of a job in canonical order, and which one this container is.

Every source (a cluster manager's dialect of variables) produces a
:class:`ClusterTopology`; every framework reads one. Frameworks never look at a source's
variables, so adding a cluster manager never touches a framework rule.

A topology always has nodes (containers). A cluster manager that itself launches one
process per device also knows the process layer (global rank, local rank, world size,
local world size); that layer is the optional :attr:`ClusterTopology.processes`.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterable, Mapping
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Annotated, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, InstanceOf, model_validator

from derive_env.hosts import is_loopback, repeated_host

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from derive_env.frameworks.context import HostFacts

    #: Reads the files a source needs (``SLURM_HOSTFILE``): paths -> their text, ``None``
    #: for one that cannot be read.
    FileReader = Callable[[Sequence[str]], Mapping[str, str | None]]

#: Address used as master in a single-container session (docs/behaviour.md section 6).
SINGLE_NODE_MASTER = "127.0.0.1"

_Count = Annotated[int, Field(ge=0)]
#: The process layer's facts (sources/report.py PROCESS_FACTS), each with its own inputs.
_PROCESS_FACTS = ("rank", "local_rank", "world_size", "local_world_size")


class Node(NamedTuple):
    """One container of the job (a named tuple: docs/performance.md, "Design notes").

    Sources validate host names before building nodes (:func:`nodes_of`); the topology
    checks the rest of its invariants (unique hosts, 1-based indices).

    :ivar host: the name or address the other nodes reach it by.
    :ivar role: the cluster manager's role for it (Backend.AI: ``main``, ``sub``), if any.
    :ivar index: its 1-based index within its role (Backend.AI's ``IDX``), if any.
    """

    host: str
    role: str | None = None
    index: int | None = None


class ProcessLayout(BaseModel):
    """The per-process layer, for cluster managers that launch one process per device.

    Ranks are 0-based; ``world_size`` counts processes of the whole job and
    ``local_world_size`` those on this node (names as in torch.distributed).
    """

    model_config = ConfigDict(frozen=True)

    rank: _Count
    local_rank: _Count
    world_size: Annotated[int, Field(ge=1)]
    local_world_size: Annotated[int, Field(ge=1)]
    #: every node's process count in node order, when the launcher states it.
    tasks_per_node: tuple[int, ...] | None = None
    #: each process is a worker of the job, with its own rank (:attr:`ClusterTopology.
    #: per_process`): decided by the composer (sources/compose.py, "Mode").
    workers: bool = False

    @model_validator(mode="after")
    def _ranks_in_range(self) -> ProcessLayout:
        if self.rank >= self.world_size or self.local_rank >= self.local_world_size:
            raise ValueError("rank and local rank must be below world size and local world size")
        return self


class ClusterTopology(BaseModel):
    """The nodes of a job in canonical order and this container's node rank.

    Canonical order is the one every container computes identically from its own copy of
    the cluster manager's variables; node rank ``r`` is ``nodes[r]``, and the master is
    node rank 0. Invariants (checked on construction): at least one node, host names
    unique (case-insensitively, as DNS compares them), node indices >= 1,
    ``0 <= node_rank < len(nodes)``.

    :ivar source: which source gave the node layer (``backendai``, ``slurm-step``,
        ``standalone``).
    :ivar nodes: the nodes in canonical order; empty when no source stated a host list
        (an MPI launcher over SSH, torchrun): a partial topology, see ``missing``.
    :ivar node_rank: this container's position in ``nodes``; ``None`` when unknown (the
        ranks of ``mpirun`` inside a Slurm allocation: the allocation's hosts are known,
        not which one each rank is on).
    :ivar node_count: the number of nodes when ``nodes`` is empty and a source states it
        (torchrun's ``GROUP_WORLD_SIZE``).
    :ivar master: the host of rank 0 when it is not ``nodes[0]``: only without a host list
        (torchrun's ``MASTER_ADDR``).
    :ivar reserved_ports: TCP ports the manager reserved for this step
        (``SLURM_STEP_RESV_PORTS``), in order: PyTorch's, TensorFlow's, JAX's.
    :ivar server_ports: ``(framework, TCP port, variable)``: a framework server's port the
        manager declared (a Kubeflow JAXJob's ``COORDINATOR_PORT`` for ``jax``).
    :ivar job: ``(manager, job id, step id)`` for the deterministic ports of
        :func:`derive_env.ports.job_ports`.
    :ivar preset: framework variables a launcher already set (torchrun's): never rewritten.
    :ivar layers: for ``--explain``: every source seen, which one each layer used, what was
        shadowed.
    :ivar missing: why the host list and master are unknown and what to set, for the
        frameworks that need a master.
    :ivar sized: False when a source states this node's rank but not how many nodes there
        are (an elastic Kubeflow PyTorchJob, ``PET_NNODES=2:4``: the rendezvous decides at
        start): then the job counts as more than one node, of unknown size.
    :ivar gpus_per_node: devices attached to this container, when the source knows.
    :ivar master_port: a master port set by the cluster manager (TCP port), if any.
    :ivar session_id: the cluster manager's job or session id, if any.
    :ivar processes: the per-process layer, when the source knows it.
    :ivar inputs: for provenance, the input variables behind each aspect: keys ``nodes``,
        ``node_rank``, ``gpus``, ``master_port``.
    :ivar order: for ``--explain``, the rule that put ``nodes`` in this order (e.g. "from
        BACKENDAI_CLUSTER_REPLICAS: ..."), if the source has one to state.
    :ivar notes: for ``--explain``, lines about the topology (e.g. a cluster manager's own
        rank that differs from the node rank).
    :ivar warnings: things about the source's variables an operator should know that do not
        stop the command (printed on stderr, like the frameworks' warnings).
    """

    model_config = ConfigDict(frozen=True)

    source: str
    nodes: tuple[InstanceOf[Node], ...]
    node_rank: _Count | None
    node_count: Annotated[int, Field(ge=1)] | None = None
    master: str | None = None
    reserved_ports: tuple[int, ...] = ()
    job: tuple[str, str, str] | None = None
    server_ports: tuple[tuple[str, int, str], ...] = ()
    preset: frozenset[str] = frozenset()
    layers: tuple[str, ...] = ()
    missing: str | None = None
    sized: bool = True
    gpus_per_node: _Count | None = None
    master_port: Annotated[int, Field(ge=1, le=65535)] | None = None
    session_id: str | None = None
    processes: ProcessLayout | None = None
    inputs: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    order: str | None = None
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> ClusterTopology:
        count = len(self.nodes) or self.node_count
        if self.node_rank is not None and count is not None and self.node_rank >= count:
            raise ValueError(f"node rank {self.node_rank} is outside {count} nodes")
        # map/itemgetter: no Python-level call per node (Node is a named tuple: 0 host,
        # 2 index); a session may have 4096 of them.
        indices = [i for i in map(itemgetter(2), self.nodes) if i is not None]
        if indices and min(indices) < 1:
            raise ValueError("node indices are 1-based")
        twice = repeated_host(list(map(itemgetter(0), self.nodes)))
        if twice is not None:
            raise ValueError(f"host {twice} appears twice")
        layout = self.processes
        if count == 1 and layout is not None and layout.world_size > layout.local_world_size:
            # every process of a job of one node is on this node: the others are on nodes
            # the host list lacks (a node file of one host under mpirun -np 2 -npernode 1)
            raise ValueError(
                f"a job of 1 node holds {layout.world_size} processes, but only "
                f"{layout.local_world_size} run on this node: the others run on nodes the "
                "host list does not name")
        if len(self.nodes) > 1 and is_loopback(self.nodes[0].host):
            # docs/behaviour.md section 6: the other nodes would connect to their own loopback
            raise ValueError(f"the master {self.nodes[0].host} is a loopback address, which "
                             f"the other {len(self.nodes) - 1} node(s) cannot reach")
        return self

    @property
    def num_nodes(self) -> int | None:
        """Number of nodes (containers) of the job; ``None`` when no source states it."""
        return len(self.nodes) or self.node_count

    @property
    def multi_node(self) -> bool:
        """More than one node: stated, or proven by processes on other nodes."""
        count = self.num_nodes
        if count is not None:
            return count > 1
        if not self.sized:
            return True
        p = self.processes
        return p is not None and p.world_size > p.local_world_size

    @property
    def this_node(self) -> Node | None:
        """The node this container is, when the host list and the node rank are known."""
        if self.nodes and self.node_rank is not None:
            return self.nodes[self.node_rank]
        return None

    @property
    def master_addr(self) -> str | None:
        """Address of rank 0: ``127.0.0.1`` in a single-container session (contract 6),
        else node rank 0's host (or the launcher's master); ``None`` when unknown."""
        if self.master is not None:
            return self.master
        if not self.multi_node:
            return SINGLE_NODE_MASTER
        return self.nodes[0].host if self.nodes else None

    @property
    def per_process(self) -> bool:
        """Each process is a worker with its own rank (``RANK``, ``LOCAL_RANK`` ...; no
        ``PET_*``): its launcher started the job's workers (torchrun, an MPI launcher) or
        more than one process on some node. False without a process layer, and for one
        process per node of a launcher that may start torchrun (``srun
        --ntasks-per-node=1``). Never decided by comparing the world size with the node
        count (the rule: :mod:`derive_env.sources.compose`, "Mode")."""
        return self.processes is not None and self.processes.workers

    def inputs_of(self, aspect: str) -> str:
        """The input variables behind ``aspect``, joined for a person (``a + b``); a fact of
        the process layer (``rank``...) that no source stated alone: the layer's."""
        found = self.inputs.get(aspect) or (
            self.inputs.get("processes") if aspect in _PROCESS_FACTS else None)
        return " + ".join(found or ()) or "(none)"


class Inputs(namedtuple("Inputs", "environ labels files facts choice fresh_run_id command",
                        defaults=(None, None, None, None, None))):
    """What the edge (cli/) read for one derivation, handed to the pure stages as one value
    (as torch's ``RendezvousParameters`` is one value for a rendezvous).

    :ivar environ: the container's environment (the cluster manager's and the user's
        variables), or another container's (``--env-file``).
    :ivar labels: the image's labels (:func:`derive_env.labels.gather`).
    :ivar files: reads the files a source needs; ``None``: no file can be read.
    :ivar facts: this container's host facts, or a function that reads them, called at
        most once and only when a rule needs them; ``None``: not this container
        (``--env-file``) or none to read.
    :ivar choice: ``--source`` (a source name, ``auto``, ``none``); ``None``: the
        ``DERIVE_ENV_SOURCE`` variable, else auto-detection.
    :ivar fresh_run_id: a random id drawn at the edge for this start, the run id when no
        manager identifies the job (:func:`derive_env.merge.run_id`); ``None``: not this
        container's start (``--env-file``, the API).
    :ivar command: the argv derive-env execs (after ``--``), a fact the composer reads
        where the variables cannot decide (``torchrun`` under ``srun --ntasks-per-node=2``:
        :func:`derive_env.sources.report.command_kind`); ``None``: none (the hook, a dry run).
    """

    # collections.namedtuple, not typing.NamedTuple: no annotation to evaluate on every
    # start that loads this module (benchmarks/startup.py counts the instructions).
    __slots__ = ()

    if TYPE_CHECKING:
        environ: Mapping[str, str]
        labels: Mapping[str, str]
        files: FileReader | None
        facts: HostFacts | Callable[[], HostFacts] | None
        choice: str | None
        fresh_run_id: str | None
        command: tuple[str, ...] | None


def nodes_of(hosts: Iterable[str], roles: Iterable[str] | None = None,
             indices: Iterable[int] | None = None) -> tuple[Node, ...]:
    """The :class:`Node` of every host, in order: the nodes of a source's host list.

    :param hosts: host names, already checked (:func:`derive_env.hosts.check_hosts`).
    :param roles: each node's role, with ``indices`` each node's 1-based index within it
        (as many as the hosts); without them, nodes without role or index.
    :returns: the same named tuples as ``Node(host, role, index)``.
    :raises ValueError: ``roles`` or ``indices`` and ``hosts`` differ in length.
    """
    fields = (zip(hosts, repeat(None), repeat(None)) if roles is None or indices is None
              else zip(hosts, roles, indices, strict=True))
    return tuple(map(tuple.__new__, repeat(Node), fields))


def single_node_topology(source: str = "standalone", host: str = "localhost") -> ClusterTopology:
    """A one-container topology, for when no cluster manager's variables are present."""
    return ClusterTopology(source=source, nodes=(Node(host=host),), node_rank=0)
