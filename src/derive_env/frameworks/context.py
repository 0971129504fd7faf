"""The kit every framework module uses: what it reads and what it returns.

A framework reads only the :class:`Context` (topology, policy, resolved master, user
environment, host facts), never a source's variables, so a new cluster manager needs no
change in a framework. It returns a :class:`Contribution` of :class:`DerivedVariable`, each
built with :func:`variable` and stating its scope (how the merge judges a user-set value,
:mod:`derive_env.merge`) where it is built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

from derive_env.errors import LabelError, TopologyError, describe
from derive_env.frameworks import FRAMEWORKS
from derive_env.hosts import host_problem
from derive_env.labels import PREFIX
from derive_env.validation import parse_port

if TYPE_CHECKING:
    from derive_env.frameworks import Framework
    from derive_env.policy import ImagePolicy
    from derive_env.topology import ClusterTopology, Inputs

MASTER_FRAMEWORK = "pytorch"  # its server port is the master port (MASTER_PORT)

# Scopes: how a user-set value of a variable is judged (docs/behaviour.md section 6, merge.py).
#: Session-wide, the same on every node: a user-set value wins.
SHARED = "shared"
#: Derived from a session-wide leader (``leader``): a user-set value must equal the leader's.
FOLLOWS = "follows"
#: Sizes the job, the same on every node: a user-set value must equal the derived one.
JOB = "job"
#: Identifies the node or process: a user-set value must equal the derived one.
NODE = "node"
SCOPES = (SHARED, FOLLOWS, JOB, NODE)

# Comparisons: when a user-set value states the same as the derived one (merge.same_value).
#: Numerically when both are decimal integers (``01`` = ``1``, blanks around ignored, as
#: ``int()`` reads them), else as text.
INTEGER = "integer"
#: A host name or address of the host of rank 0, without regard to case; in a session of
#: more than one node it must be node rank 0's host (merge.py).
HOST = "host"
#: ``host:port`` (IPv6 bracketed), the host as :data:`HOST`.
ADDRESS = "host:port"
#: A ``TF_CONFIG`` JSON document, read with :class:`derive_env.tf_config.TFConfig`.
JSON = "json"
#: torchrun's node count: ``N`` or ``MIN:MAX`` with ``MIN == MAX`` (``3:3`` = ``3``).
COUNT_RANGE = "count range"
#: Exactly as written (an id: ``0123`` is not ``123``).
EXACT = "exact"
COMPARISONS = (INTEGER, HOST, ADDRESS, JSON, COUNT_RANGE, EXACT)


class DerivedVariable(NamedTuple):
    """One variable the shim sets, with where its value came from and how a user-set value
    of it is judged.

    Build it with :func:`variable`; :func:`derive_env.merge.merge` copies it with
    ``_replace``. Immutable.

    :ivar name: the variable's name, e.g. ``MASTER_ADDR``.
    :ivar value: the value in the command's environment (the user's when ``kept``).
    :ivar provenance: where the value came from, for a person (input variables, label...).
    :ivar framework: who reads it (``pytorch``, ``tensorflow``, ``jax``, ``network``).
    :ivar scope: :data:`SHARED`, :data:`FOLLOWS`, :data:`JOB` or :data:`NODE`. Required.
    :ivar compare: how a user-set value is compared: :data:`INTEGER`, :data:`HOST`,
        :data:`ADDRESS`, :data:`JSON`, :data:`COUNT_RANGE` or :data:`EXACT`.
    :ivar what: what the variable is, for messages (``"this node's node rank"``); required
        for :data:`JOB` and :data:`NODE`.
    :ivar leader: the variable a :data:`FOLLOWS` one follows (``MASTER_ADDR``).
    :ivar kept: the environment already had a non-empty value, which wins.
    :ivar derived: when kept, the value the shim would have set.
    :ivar checked_only: a value the shim does not set, only compares a user-set one with
        (a framework's ``Contribution.checks``: torchrun mode's ``RANK`` ...); its error
        says who sets it instead.
    :ivar node_decided: decided by this node alone, from what only it knows (its interfaces:
        ``GLOO_SOCKET_IFNAME``; its GPU count: ``PET_NPROC_PER_NODE`` taken from it; its
        devices: ``JAX_LOCAL_DEVICE_IDS``), so nodes of one job may differ in it: left out
        of the job digest (digest.py) and never derived for another node (whole_job.py).
        A user-set value is still judged by its ``scope``.
    """

    name: str
    value: str
    provenance: str
    framework: str
    scope: str
    compare: str = INTEGER
    what: str = ""
    leader: str | None = None
    kept: bool = False
    derived: str | None = None
    checked_only: bool = False
    node_decided: bool = False


class Master(NamedTuple):
    """The master (node rank 0) address and port every framework derives from.

    ``addr``/``port`` are the effective values (a user-set ``MASTER_ADDR``/``MASTER_PORT``
    first); ``derived_addr``/``derived_port`` are what the topology and labels alone give,
    which is what ``MASTER_ADDR``/``MASTER_PORT`` themselves are derived as (and reported as
    overridden when the user set them). Addresses are bare (IPv6 without brackets); ports
    are TCP ports. ``port_kind``: who chose ``port`` (:class:`derive_env.ports.Claim`).
    """

    addr: str
    addr_source: str
    port: int
    port_source: str
    derived_addr: str
    derived_addr_source: str
    derived_port: int
    derived_port_source: str
    port_kind: str = "default"


def _resolve_none(hosts: Sequence[str]) -> dict[str, tuple[str, ...]]:
    return {host: () for host in hosts}


class HostFacts(NamedTuple):
    """Facts of the running container, read at the edge (the command line) only when a rule
    needs them. Immutable, built by keyword.

    :ivar interfaces: names of the network interfaces (``/sys/class/net``). Without the
        ``socket-ifname`` label the edge only looks for ``baimulti0`` (one stat), so then
        this holds ``baimulti0`` or nothing.
    :ivar routes_v4: the text of ``/proc/net/route`` (the main routing table).
    :ivar routes_v6: the text of ``/proc/net/ipv6_route``.
    :ivar addresses_v6: the text of ``/proc/net/if_inet6`` (own IPv6 addresses).
    :ivar local_v4: the text of ``/proc/net/fib_trie`` (own IPv4 addresses: ``/32 host
        LOCAL`` entries).
    :ivar hosts: the text of ``/etc/hosts`` (read without any DNS wait).
    :ivar hostname: the container's own host name (``gethostname()``).
    :ivar port_range: reads ``/proc/sys/net/ipv4/ip_local_port_range`` when called (``None``:
        unreadable); called only for a hashed port (:func:`derive_env.ports.overlap_warning`).
    :ivar resolve: host names -> each one's IP addresses (``getaddrinfo``; ``()`` for a name
        that did not resolve), all names of one call resolved at once against one deadline
        shared by every call of one start (:data:`RESOLVE_SECONDS`).
    """

    interfaces: tuple[str, ...] = ()
    routes_v4: str = ""
    routes_v6: str = ""
    addresses_v6: str = ""
    local_v4: str = ""
    hosts: str = ""
    hostname: str = ""
    port_range: Callable[[], str | None] = lambda: None
    resolve: Callable[[Sequence[str]], Mapping[str, tuple[str, ...]]] = _resolve_none


#: Seconds that all name resolution of one start may take together (docs/operator-guide.md).
RESOLVE_SECONDS = 5.0


class Context:
    """Everything a framework may read.

    ``master`` is resolved on first use, so an image whose frameworks never read the master
    (TensorFlow only) is not stopped by a malformed user-set ``MASTER_ADDR``; ``master``,
    ``facts``, ``job_ports`` and ``ports`` are each computed once.

    The edge's :class:`~derive_env.topology.Inputs` give ``environ``, ``host`` (host facts,
    or a function that reads them on first use: :attr:`facts`) and ``fresh_run_id`` (drawn
    at the edge for this start, the run id when no manager identifies the job:
    :func:`derive_env.merge.run_id`; ``None``: none); its labels are already ``policy``.
    ``warnings``: about values every framework shares (the ports), reported once.
    """

    def __init__(self, topology: ClusterTopology, policy: ImagePolicy, inputs: Inputs) -> None:
        self.topology = topology
        self.policy = policy
        self.environ = inputs.environ
        self.host = inputs.facts
        self.fresh_run_id = inputs.fresh_run_id
        self.warnings: list[str] = []

    @cached_property
    def facts(self) -> HostFacts | None:
        """The host facts; a reader given as ``host`` is called once, on first use, so a
        start that needs none reads nothing."""
        return self.host() if callable(self.host) else self.host

    @cached_property
    def master(self) -> Master:
        """See :func:`master_of`; the port moved clear of the other frameworks' when it was
        derived (:attr:`ports`). :raises TopologyError: as :func:`master_of`."""
        own = self._master
        placed = self.ports.get(MASTER_FRAMEWORK)
        if placed is None or placed[0] == own.port:
            return own
        return own._replace(port=placed[0], port_source=placed[1], derived_port=placed[0],
                            derived_port_source=placed[1])

    @cached_property
    def _master(self) -> Master:
        return master_of(self.topology, self.policy, self.environ, self.job_ports)

    @cached_property
    def job_ports(self) -> dict[str, tuple[int, str, str]] | None:
        """The ports of the manager's port policy per framework (``pytorch``,
        ``tensorflow``, ``jax``) with their provenance and kind, or ``None`` when the
        manager gives neither reserved ports nor a job id (Backend.AI). See
        :func:`derive_env.ports.job_ports_of`."""
        if not self.topology.reserved_ports and self.topology.job is None:
            return None  # and derive_env.ports stays unloaded
        import derive_env.ports as ports

        return ports.job_ports_of(self.topology)

    @cached_property
    def ports(self) -> dict[str, tuple[int, str]]:
        """Framework -> (first port, provenance) of every server of this image, clear of
        each other (:func:`derive_env.ports.place`): the master port when PyTorch or a
        launcher's store (``topology.preset`` holds ``MASTER_PORT``) serves it, TensorFlow's
        block when it builds a TF_CONFIG, the JAX coordinator's. A node whose ephemeral
        range overlaps a hashed port gets a warning (:attr:`warnings`).

        :raises LabelError: two labels put two servers on one port.
        :raises TopologyError: a label's port is a set master port; as :func:`master_of`.
        """
        claims = []  # (framework, port, source, kind, serves, width): derive_env.ports.Claim
        topo = self.topology
        if MASTER_FRAMEWORK in self.policy.frameworks or "MASTER_PORT" in topo.preset:
            own = self._master
            claims.append((MASTER_FRAMEWORK, own.port, own.port_source, own.port_kind,
                           framework_line(MASTER_FRAMEWORK).serves, 1))
        layout = topo.processes
        width = max(layout.tasks_per_node) if (
            topo.per_process and layout is not None and layout.tasks_per_node) else 1
        for line in FRAMEWORKS:
            if line.name not in self.policy.frameworks or line.name == MASTER_FRAMEWORK:
                continue
            if line.port_label is None or (line.name == "tensorflow" and not (
                    topo.multi_node or topo.per_process)):
                continue  # no port, or no TF_CONFIG: a single container trains locally
            claims.append((line.name, *_own_port(self, line.name), line.serves,
                           width if line.name == "tensorflow" else 1))
        spans = [set(range(c[1], c[1] + c[5])) for c in claims]
        if sum(map(len, spans)) == len(set().union(*spans)) and not any(
                c[3] == "hashed" for c in claims):
            return {c[0]: (c[1], c[2]) for c in claims}  # derive_env.ports stays unloaded
        import derive_env.ports as ports

        try:
            placed = ports.place([ports.Claim(*c) for c in claims])
        except ValueError as exc:
            raise (LabelError if exc.args[1] else TopologyError)(exc.args[0]) from None
        hashed = [placed[c[0]][0] for c in claims if c[3] == "hashed"]
        if hashed and self.facts is not None:
            warning = ports.overlap_warning(self.facts.port_range(), hashed)
            if warning:
                self.warnings.append(warning)
        return placed


class Contribution:
    """What one framework adds: variables, lines for ``--explain``, warnings.

    ``checks`` are values the framework does not set but a user-set variable of that name
    must equal (see :func:`derive_env.merge.merge`). Each list starts empty, or as a copy
    of the one given.
    """

    __slots__ = ("checks", "notes", "variables", "warnings")

    def __init__(self, variables: Sequence[DerivedVariable] = (),
                 checks: Sequence[DerivedVariable] = (), notes: Sequence[str] = (),
                 warnings: Sequence[str] = ()) -> None:
        self.variables: list[DerivedVariable] = list(variables)
        self.checks: list[DerivedVariable] = list(checks)
        self.notes: list[str] = list(notes)
        self.warnings: list[str] = list(warnings)


def master_of(
    topology: ClusterTopology,
    policy: ImagePolicy,
    environ: Mapping[str, str],
    job_ports: Mapping[str, tuple[int, str, str]] | None = None,
) -> Master:
    """Resolve the master address and port, a user-set value first.

    Precedence for the address: ``MASTER_ADDR`` already set (non-empty) > the host of rank
    0 (node rank 0 of the topology, ``127.0.0.1`` for a single container). For the port:
    ``MASTER_PORT`` already set > the cluster manager's (``BACKENDAI_DIST_MASTER_PORT``,
    torchrun's store) > label ``master-port`` > the manager's port policy (``job_ports``:
    reserved, else derived) > 29500 (torch/distributed/run.py's default). A user-set pair
    feeds every value derived from the master, so nothing contradicts it (docs/behaviour.md
    section 6).

    :raises TopologyError: a user-set ``MASTER_ADDR`` is not a host name or IP literal, or
        ``MASTER_PORT`` is not a port number 1-65535; or no source states the host of
        rank 0 and ``MASTER_ADDR`` is not set (``topology.missing`` says what to set).
    """
    own_addr = topology.master_addr
    if not topology.multi_node:
        own_addr_source = "single node: loopback"
    elif topology.master is not None:
        own_addr_source = f"{topology.inputs_of('master')}: the host of rank 0"
    else:
        own_addr_source = f"{topology.inputs_of('nodes')}: node rank 0 in canonical order"
    if topology.master_port is not None:
        own_port, own_port_source = topology.master_port, topology.inputs_of("master_port")
        kind = "set"
    elif policy.label_or_default("master_port") == "default" and job_ports:
        own_port, own_port_source, kind = job_ports[MASTER_FRAMEWORK]
    else:
        own_port = policy.master_port
        own_port_source = policy.label_or_default("master_port")
        kind = "label"
        if own_port_source == "default":
            own_port_source, kind = "default (29500, PyTorch's)", "default"
    addr, addr_source = own_addr, own_addr_source
    port, port_source = own_port, own_port_source
    user_addr = environ.get("MASTER_ADDR", "")
    if own_addr is None and user_addr:
        own_addr = user_addr
        own_addr_source = "MASTER_ADDR (already set; no source states the host of rank 0)"
    if user_addr:
        problem = host_problem(user_addr)
        if problem:
            raise TopologyError(describe("MASTER_ADDR", user_addr, problem))
        addr, addr_source = user_addr, "MASTER_ADDR (already set)"
    elif own_addr is None:
        raise TopologyError(describe(
            "MASTER_ADDR", "", f"the host of rank 0 (it also gives JAX's coordinator): "
            f"{topology.missing or 'unknown'}"))
    user_port = environ.get("MASTER_PORT", "")
    if user_port:
        try:
            port = parse_port(user_port)
        except ValueError as exc:
            raise TopologyError(describe("MASTER_PORT", user_port, str(exc))) from None
        port_source, kind = "MASTER_PORT (already set)", "set"
    return Master(addr=addr, addr_source=addr_source, port=port, port_source=port_source,
                  derived_addr=own_addr, derived_addr_source=own_addr_source,
                  derived_port=own_port, derived_port_source=own_port_source, port_kind=kind)


def framework_line(name: str) -> Framework:
    """The :data:`~derive_env.frameworks.FRAMEWORKS` line of framework ``name``."""
    return next(line for line in FRAMEWORKS if line.name == name)


def port_label(framework: str) -> str:
    """The full label of a framework's port (``ai.backend.distributed.tensorflow-port``)."""
    return PREFIX + str(framework_line(framework).port_label)


def framework_port(ctx: Context, framework: str) -> tuple[int, str]:
    """A framework's server port and its provenance: the manager's declared port
    (``topology.server_ports``) > label > the manager's port policy
    (:attr:`Context.job_ports`) > the default (its FRAMEWORKS line's), clear of the other
    servers of the job (:attr:`Context.ports`).

    :param framework: a framework other than PyTorch with a port label (``tensorflow``,
        ``jax``); PyTorch's port is the master's (:func:`master_of`).
    :raises LabelError: two labels put two servers on one port.
    :raises TopologyError: its label's port is the master port a launcher or the user set.
    """
    placed = ctx.ports.get(framework)
    return placed if placed is not None else _own_port(ctx, framework)[:2]


def _own_port(ctx: Context, framework: str) -> tuple[int, str, str]:
    """A framework's port as the manager declared it (``topology.server_ports``: a JAXJob's
    ``COORDINATOR_PORT``), its label, the manager's policy or its default give it, with
    provenance and kind (:class:`derive_env.ports.Claim`)."""
    for name, port, variable_name in ctx.topology.server_ports:
        if name == framework:
            return port, f"{variable_name} (the manager's port for it)", "set"
    source = ctx.policy.port_provenance(framework)
    if source != "default":
        return ctx.policy.ports[framework], source, "label"
    if ctx.job_ports is not None:
        return ctx.job_ports[framework]
    port = ctx.policy.ports[framework]
    return port, f"default ({port})", "default"


def nodes_source(topology: ClusterTopology) -> str:
    """Provenance of the node count for a framework: the host list's variables, else the
    count's (torchrun's ``GROUP_WORLD_SIZE``), or a single-node job (a container is a node)."""
    if not topology.multi_node:
        return "single node"
    return topology.inputs_of("nodes" if topology.nodes else "num_nodes")


def node_rank_of(topology: ClusterTopology) -> tuple[int, str]:
    """This node's rank for a framework that numbers nodes, with its provenance.

    The topology's node rank; without one, the process's rank, only for a process layer
    of one process per node that is not the job's workers (``topology.per_process``
    False: its ranks number its nodes). Workers (an MPI launcher's ranks) never: packed
    or by a hostfile, their ranks need not follow the nodes.

    :raises TopologyError: neither is known.
    """
    if topology.node_rank is not None:
        source = (topology.inputs_of("node_rank") if topology.multi_node
                  else "single node")
        return topology.node_rank, source
    if topology.processes is not None and not topology.per_process:
        return topology.processes.rank, (
            f"{topology.inputs_of('rank')}: rank (one process per node)")
    raise TopologyError("no source states this node's rank: " + (topology.missing or "unknown"))


#: The fields of a :class:`DerivedVariable` its maker (:func:`variable`) takes by keyword.
_MADE = frozenset(("scope", "compare", "what", "leader", "node_decided"))


def variable(framework: str) -> Callable[..., DerivedVariable]:
    """The maker of one framework's variables::

        var = variable("jax")
        var("JAX_PROCESS_ID", rank, provenance, scope=NODE, what="this process's JAX process id")

    The maker takes the name, the value (turned into text), the provenance and, by keyword,
    the variable's ``scope``, ``compare``, ``what``, ``leader`` and ``node_decided``
    (:class:`DerivedVariable`).

    :raises TypeError: (the maker) no ``scope`` given, or another keyword.
    :raises ValueError: (the maker) an unknown scope or comparison; a :data:`FOLLOWS`
        variable without a ``leader`` (or another with one); a :data:`JOB` or :data:`NODE`
        variable without ``what``, which its messages need.
    """

    def make(name: str, value: object, provenance: str, **fields: object) -> DerivedVariable:
        scope, compare = fields.get("scope"), fields.setdefault("compare", INTEGER)
        if scope is None or not fields.keys() <= _MADE:
            raise TypeError(f"{name}: no scope given, or a field the maker does not take")
        if scope not in SCOPES or compare not in COMPARISONS:
            raise ValueError(f"{name}: unknown scope {scope!r} or comparison {compare!r}")
        if (scope == FOLLOWS) != (fields.get("leader") is not None):
            raise ValueError(f"{name}: a leader is given exactly for scope {FOLLOWS!r}")
        if scope in (JOB, NODE) and not fields.get("what"):
            raise ValueError(f"{name}: scope {scope!r} needs what the variable is")
        return DerivedVariable(name, str(value), provenance, framework, **fields)

    return make
