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
from typing import NamedTuple

from derive_env.errors import TopologyError, describe
from derive_env.labels import FRAMEWORK_NAMES
from derive_env.policy import ImagePolicy
from derive_env.topology import ClusterTopology, host_problem
from derive_env.validation import parse_port

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
        return master_of(self.topology, self.policy, self.environ)


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


def master_of(
    topology: ClusterTopology, policy: ImagePolicy, environ: Mapping[str, str]
) -> Master:
    """Resolve the master address and port, a user-set value first.

    Precedence for the address: ``MASTER_ADDR`` already set (non-empty) > node rank 0 of
    the topology (``127.0.0.1`` for a single container). For the port: ``MASTER_PORT``
    already set > the cluster manager's (``BACKENDAI_DIST_MASTER_PORT``) > label
    ``master-port`` > 29500 (torch/distributed/run.py's default). A user-set pair feeds
    every value derived from the master, so nothing contradicts it (contract section 6).

    :raises TopologyError: a user-set ``MASTER_ADDR`` is not a host name or IP literal, or
        ``MASTER_PORT`` is not a port number 1-65535.
    """
    if topology.num_nodes == 1:
        own_addr, own_addr_source = topology.master_addr, "single-container session: loopback"
    else:
        own_addr = topology.master_addr
        own_addr_source = f"{topology.inputs_of('nodes')}: node rank 0 in canonical order"
    if topology.master_port is not None:
        own_port, own_port_source = topology.master_port, topology.inputs_of("master_port")
    else:
        own_port = policy.master_port
        own_port_source = policy.label_or_default("master_port")
        if own_port_source == "default":
            own_port_source = "default (29500, PyTorch's)"
    addr, addr_source = own_addr, own_addr_source
    port, port_source = own_port, own_port_source
    user_addr = environ.get("MASTER_ADDR", "")
    if user_addr:
        problem = host_problem(user_addr)
        if problem:
            raise TopologyError(describe("MASTER_ADDR", user_addr, problem))
        addr, addr_source = user_addr, "MASTER_ADDR (already set)"
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


def variable(framework: str) -> Callable[[str, object, str], DerivedVariable]:
    """Shorthand maker: ``var("MASTER_ADDR", value, source)`` for one framework."""

    def make(name: str, value: object, source: str) -> DerivedVariable:
        return DerivedVariable(name=name, value=str(value), source=source, framework=framework)

    return make
