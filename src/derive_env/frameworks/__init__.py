"""Frameworks: one module per framework, each ``derive(context) -> Contribution``.

:data:`FRAMEWORKS` is the lookup table from the names accepted by the
``ai.backend.distributed.frameworks`` label to modules. A framework reads only the
:class:`Context` (topology, policy, resolved master, user environment), never a source's
variables, so a new cluster manager needs no change here and a new framework is one module
plus one line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import NamedTuple, TypeVar

from derive_env.errors import TopologyError, describe
from derive_env.hosts import host_problem
from derive_env.labels import FRAMEWORK_NAMES
from derive_env.policy import ImagePolicy
from derive_env.topology import ClusterTopology
from derive_env.validation import parse_port

T = TypeVar("T")

#: framework name -> module, in the order their variables are listed.
FRAMEWORKS: dict[str, str] = {name: f"derive_env.frameworks.{name}" for name in FRAMEWORK_NAMES}


class DerivedVariable(NamedTuple):
    """One variable the shim sets, with where its value came from.

    A named tuple, neither a pydantic model nor a dataclass: frameworks build it from values
    they computed themselves (nothing to validate), and defining the class is paid on every
    opted-in container start: a pydantic model's schema build costs about twice a named
    tuple's definition, a frozen dataclass's generated methods about four times
    (docs/performance.md). Immutable; :func:`derive_env.environ.merge` copies it with
    ``_replace``.

    :ivar name: the variable's name, e.g. ``MASTER_ADDR``.
    :ivar value: the value in the command's environment (the user's when ``kept``).
    :ivar source: provenance for a person: input variables, label or default.
    :ivar framework: who reads it (``pytorch``, ``tensorflow``, ``jax``, ``network``).
    :ivar kept: the environment already had a non-empty value, which wins.
    :ivar derived: when kept, the value the shim would have set.
    """

    name: str
    value: str
    source: str
    framework: str
    kept: bool = False
    derived: str | None = None


class Master(NamedTuple):
    """The master (node rank 0) address and port every framework derives from.

    ``addr``/``port`` are the effective values (a user-set ``MASTER_ADDR``/``MASTER_PORT``
    first); ``derived_addr``/``derived_port`` are what the topology and labels alone give,
    which is what ``MASTER_ADDR``/``MASTER_PORT`` themselves are derived as (and reported as
    overridden when the user set them). Addresses are bare (IPv6 without brackets); ports
    are TCP ports. A named tuple: cheaper to define than a frozen dataclass (startup).
    """

    addr: str
    addr_source: str
    port: int
    port_source: str
    derived_addr: str
    derived_addr_source: str
    derived_port: int
    derived_port_source: str


def _resolve_none(hosts: Sequence[str]) -> dict[str, tuple[str, ...]]:
    return {host: () for host in hosts}


class HostFacts(NamedTuple):
    """Facts of the running container, read at the edge (app.py) only when a rule needs them.

    A named tuple (immutable, built by keyword): cheaper to define than a frozen dataclass,
    on every opted-in start (docs/performance.md).

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
    :ivar port_range: the text of ``/proc/sys/net/ipv4/ip_local_port_range``, ``None``
        when unreadable (then Linux's default 32768-60999 is used).
    :ivar reserved_ports: the text of ``/proc/sys/net/ipv4/ip_local_reserved_ports``,
        ``None`` when unreadable.
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
    port_range: str | None = None
    reserved_ports: str | None = None
    resolve: Callable[[Sequence[str]], Mapping[str, tuple[str, ...]]] = _resolve_none


#: Seconds that all name resolution of one start may take together (docs/operator-guide.md).
RESOLVE_SECONDS = 5.0


class Context:
    """Everything a framework may read.

    ``master`` is resolved on first use, so an image whose frameworks never read the master
    (TensorFlow only) is not stopped by a malformed user-set ``MASTER_ADDR``. A plain class
    (it caches ``master`` and ``facts``): a dataclass's generated methods would cost about
    1% of the pydantic import at every opted-in start (docs/performance.md).

    :ivar host: host facts, or a function that reads them on first use (:attr:`facts`).
    """

    def __init__(
        self,
        topology: ClusterTopology,
        policy: ImagePolicy,
        environ: Mapping[str, str],
        host: HostFacts | Callable[[], HostFacts] | None = None,
    ) -> None:
        self.topology = topology
        self.policy = policy
        self.environ = environ
        self.host = host

    @cached_property
    def facts(self) -> HostFacts | None:
        """The host facts; a reader given as ``host`` is called once, on first use, so a
        start that needs none reads nothing."""
        return self.host() if callable(self.host) else self.host

    @cached_property
    def master(self) -> Master:
        """See :func:`master_of`. :raises TopologyError: as :func:`master_of`."""
        return master_of(self.topology, self.policy, self.environ, self.job_ports)

    @cached_property
    def job_ports(self) -> dict[str, tuple[int, str]] | None:
        """The ports of the manager's port policy per framework (``pytorch``,
        ``tensorflow``, ``jax``) with their provenance, or ``None`` when the manager gives
        neither reserved ports nor a job id (Backend.AI). See :func:`job_ports_of`."""
        topo = self.topology
        if not topo.reserved_ports and topo.job is None:
            return None  # read no host fact for nothing
        return job_ports_of(topo, self.facts)


class Contribution:
    """What one framework adds: variables, lines for ``--explain``, warnings.

    ``checks`` are values the framework does not set but a user-set variable of that name
    must equal (see :func:`derive_env.environ.merge`). Each list starts empty, or as a copy
    of the one given. A plain class: a dataclass's generated methods would cost about 0.7%
    of the pydantic import at every opted-in start (docs/performance.md).
    """

    __slots__ = ("checks", "notes", "variables", "warnings")

    def __init__(
        self,
        variables: Sequence[DerivedVariable] = (),
        checks: Sequence[DerivedVariable] = (),
        notes: Sequence[str] = (),
        warnings: Sequence[str] = (),
    ) -> None:
        self.variables: list[DerivedVariable] = list(variables)
        self.checks: list[DerivedVariable] = list(checks)
        self.notes: list[str] = list(notes)
        self.warnings: list[str] = list(warnings)


def job_ports_of(
    topology: ClusterTopology, facts: HostFacts | None
) -> dict[str, tuple[int, str]] | None:
    """The manager's ports per framework: reserved ones first, then derived.

    Follows :func:`derive_env.ports.job_ports` (sources.md 3.1 "Port", 3.13.5): the step's
    reserved ports in framework order (PyTorch, TensorFlow, JAX), the others a
    deterministic hash of ``(manager, job id, step id)`` into the window above this node's
    ephemeral port range (``facts.port_range``; Linux's default when unknown), outside
    ``facts.reserved_ports``. Labels and user-set values win over both (the callers).

    :returns: framework -> (TCP port, provenance); ``None`` without reserved ports or job.
    :raises TopologyError: the kernel's range leaves too few ports above it, or the
        ``/proc`` files hold something unexpected (message names the sysctl).
    """
    from derive_env import ports

    if not topology.reserved_ports and topology.job is None:
        return None
    granted = topology.reserved_ports
    manager, job_id, step_id = topology.job or ("", "", "")
    range_sysctl = "net.ipv4.ip_local_port_range"
    ephemeral = _sysctl(range_sysctl, facts.port_range if facts else None,
                        ports.parse_port_range, ports.DEFAULT_EPHEMERAL_RANGE)
    reserved = _sysctl("net.ipv4.ip_local_reserved_ports",
                       facts.reserved_ports if facts else None,
                       ports.parse_reserved_ports, frozenset())
    try:
        values = ports.job_ports(manager, job_id, step_id, ephemeral, reserved, granted)
    except ValueError as exc:
        raise TopologyError(describe(
            range_sysctl, f"{ephemeral[0]} {ephemeral[1]}", str(exc))) from None
    held = " + ".join(topology.inputs.get("ports", ())) or "reserved ports"
    out: dict[str, tuple[int, str]] = {}
    for k, (framework, port) in enumerate(zip(ports.FRAMEWORKS, values, strict=True)):
        if k < len(dict.fromkeys(granted)):
            out[framework] = (port, f"{held}: port {k + 1} reserved for the step")
        else:
            step = f" step {step_id}" if step_id else ""
            out[framework] = (port, (
                f"derived from {manager} job {job_id}{step} (hash into the ports above the "
                "ephemeral range: docs/ports.md)"))
    return out


def _sysctl(name: str, text: str | None, parse: Callable[[str], T], default: T) -> T:
    """A ``/proc/sys`` file's text parsed, ``default`` when unread; bad text is an error
    naming the sysctl (exit 3)."""
    if text is None:
        return default
    try:
        return parse(text)
    except ValueError as exc:
        raise TopologyError(describe(name, text.strip(), str(exc))) from None


def master_of(
    topology: ClusterTopology,
    policy: ImagePolicy,
    environ: Mapping[str, str],
    job_ports: Mapping[str, tuple[int, str]] | None = None,
) -> Master:
    """Resolve the master address and port, a user-set value first.

    Precedence for the address: ``MASTER_ADDR`` already set (non-empty) > the host of rank
    0 (node rank 0 of the topology, ``127.0.0.1`` for a single container). For the port:
    ``MASTER_PORT`` already set > the cluster manager's (``BACKENDAI_DIST_MASTER_PORT``,
    torchrun's store) > label ``master-port`` > the manager's port policy (``job_ports``:
    reserved, else derived) > 29500 (torch/distributed/run.py's default). A user-set pair
    feeds every value derived from the master, so nothing contradicts it (contract 6).

    :raises TopologyError: a user-set ``MASTER_ADDR`` is not a host name or IP literal, or
        ``MASTER_PORT`` is not a port number 1-65535; or no source states the host of
        rank 0 and ``MASTER_ADDR`` is not set (``topology.missing`` says what to set).
    """
    own_addr = topology.master_addr
    if not topology.multi_node:
        own_addr_source = "single-container session: loopback"
    elif topology.master is not None:
        own_addr_source = f"{topology.inputs_of('master')}: the host of rank 0"
    else:
        own_addr_source = f"{topology.inputs_of('nodes')}: node rank 0 in canonical order"
    if topology.master_port is not None:
        own_port, own_port_source = topology.master_port, topology.inputs_of("master_port")
    elif policy.label_or_default("master_port") == "default" and job_ports:
        own_port, own_port_source = job_ports["pytorch"]
    else:
        own_port = policy.master_port
        own_port_source = policy.label_or_default("master_port")
        if own_port_source == "default":
            own_port_source = "default (29500, PyTorch's)"
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
        port_source = "MASTER_PORT (already set)"
    return Master(
        addr=addr, addr_source=addr_source, port=port, port_source=port_source,
        derived_addr=own_addr, derived_addr_source=own_addr_source,
        derived_port=own_port, derived_port_source=own_port_source,
    )


def framework_port(
    ctx: Context, framework: str, field: str, default_text: str
) -> tuple[int, str]:
    """A framework's server port and its provenance: label > the manager's port policy
    (:attr:`Context.job_ports`) > the default.

    :param framework: ``tensorflow`` or ``jax`` (a key of :data:`derive_env.ports.FRAMEWORKS`).
    :param field: the :class:`ImagePolicy` field (``tensorflow_port``, ``jax_port``).
    :param default_text: how to name the default (``"default (2222)"``).
    :raises TopologyError: the port equals the master port while a launcher serves its store
        there (torchrun: ``topology.preset`` holds ``MASTER_PORT``) or PyTorch is asked
        for too: two servers cannot listen on one port of rank 0's host.
    """
    source = ctx.policy.label_or_default(field)
    port = getattr(ctx.policy, field)
    if source == "default":
        job = ctx.job_ports
        if job is not None:
            port, source = job[framework]
        else:
            source = default_text
    shares_host = "MASTER_PORT" in ctx.topology.preset or "pytorch" in ctx.policy.frameworks
    if shares_host and port == ctx.master.port:
        label = f"ai.backend.distributed.{field.replace('_', '-')}"
        raise TopologyError(
            f"the {framework} port {port} ({source}) is the master port ({ctx.master.port_source})"
            f", which {'the launcher' if 'MASTER_PORT' in ctx.topology.preset else 'PyTorch'} "
            f"serves its rendezvous on, on the same host: set label {label} to another port")
    return port, source


def nodes_source(topology: ClusterTopology) -> str:
    """Provenance of the node count for a framework: the host list's variables, else the
    count's (torchrun's ``GROUP_WORLD_SIZE``), or a single-container session."""
    if not topology.multi_node:
        return "single-container session"
    return topology.inputs_of("nodes" if topology.nodes else "num_nodes")


def node_rank_of(topology: ClusterTopology) -> tuple[int, str]:
    """This node's rank for a framework that numbers nodes, with its provenance.

    The topology's node rank; without one (``mpirun`` one process per node inside a Slurm
    allocation: the hosts are known, not which one is this), the process's rank, which
    numbers the nodes as well when every node runs one process.

    :raises TopologyError: neither is known.
    """
    if topology.node_rank is not None:
        source = (topology.inputs_of("node_rank") if topology.multi_node
                  else "single-container session")
        return topology.node_rank, source
    if topology.processes is not None and not topology.per_process:
        return topology.processes.rank, (
            f"{topology.inputs_of('processes')}: rank (one process per node)")
    raise TopologyError(
        "no source states this node's rank: " + (topology.missing or "unknown"))


def variable(framework: str) -> Callable[[str, object, str], DerivedVariable]:
    """Shorthand maker: ``var("MASTER_ADDR", value, source)`` for one framework."""

    def make(name: str, value: object, source: str) -> DerivedVariable:
        return DerivedVariable(name=name, value=str(value), source=source, framework=framework)

    return make
