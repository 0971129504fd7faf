"""Interface hints for gloo and NCCL: ``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``.

gloo reads ``GLOO_SOCKET_IFNAME`` (torch/csrc/distributed/c10d/init.cpp); without it, it
binds to the address its host name resolves to, and falls back to the loopback address when
the name does not resolve to one of its own (ProcessGroupGloo::createDefaultDevice). NCCL
reads ``NCCL_SOCKET_IFNAME`` (NCCL User Guide, "Environment Variables").

Rules, in order (docs/variables.md, "GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME"):

* label ``ai.backend.distributed.socket-ifname=none``: nothing is set.
* no label, a session of more than one node, neither variable set by the user, and the
  container has ``baimulti0`` (Backend.AI's multi-node overlay interface, Docker 28+): both
  are set to it. Only one stat of ``/sys/class/net/baimulti0``, no name resolution. Without
  ``baimulti0`` in Backend.AI's own container (its ``/home/config/environ.txt``), a
  Backend.AI session: the interface of the route to the master (:func:`_route_default`).
* an interface name: used as is; it must exist in the container, and ``lo`` is an error in
  a session of more than one node (gloo would advertise 127.0.0.1 to the other nodes).
* ``auto``: the first candidate that is usable: ``baimulti0``; the interface holding the
  address the own host name has in ``/etc/hosts`` (read as a file: no DNS wait); the
  interface the kernel routes to the master through (longest prefix, then lowest metric,
  then the first in table order as the kernel does, with a warning: NVIDIA/nccl#1581).
  Never ``lo`` in a session of more than one node; never an interface none of whose
  connected subnets holds an address of the session's peers (when peers resolved: the
  ``docker_gwbridge`` of a Swarm overlay reaches only the local host). In a single-container
  session only the route rule applies (the master is 127.0.0.1, so ``lo``). In a Kubernetes
  pod, peers whose names did not resolve in time get a warning naming them: a pod's name
  resolves only once the pod is ready (cloud survey pitfall 4); never an error, no longer wait.

All name resolution of one start happens in one call of :attr:`HostFacts.resolve`, bounded
in all by :data:`derive_env.frameworks.context.RESOLVE_SECONDS`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from derive_env.errors import LabelError, describe
from derive_env.frameworks.context import (
    RESOLVE_SECONDS,
    SHARED,
    Context,
    Contribution,
    HostFacts,
    variable,
)
from derive_env.hosts import hosts_addresses
from derive_env.labels import PREFIX

LABEL = PREFIX + "socket-ifname"
#: Backend.AI's multi-node overlay interface (Docker 28+; older Docker: an ``ethN``).
OVERLAY = "baimulti0"
#: Linux's loopback device: one per network namespace, always this name (loopback_net_init).
LOOPBACK = "lo"
#: The variables set, both to the same interface.
VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
#: Set by the kubelet in every container (enableServiceLinks or not: kubelet_pods.go,
#: getServiceEnvVarMap): the peers are pods, whose names resolve late (pitfall 4).
POD = "KUBERNETES_SERVICE_HOST"
#: Peers resolved for the subnet rule: the first ones in canonical order, so a session of
#: thousands of nodes does not ask DNS for every node at every container start.
MAX_PEERS = 8

_NOT_SET = "GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME not set"

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

var = variable("network")


def route_choice(address: str, facts: HostFacts) -> tuple[str | None, tuple[str, ...]]:
    """The interface the kernel's main routing table sends ``address`` through.

    Longest prefix first, then lowest metric; among routes equal in both, the first in table
    order, which is the one the kernel uses (a later one with the same prefix and metric was
    appended after it, ``ip route append``). Loopback addresses go through ``lo``. For IPv6,
    this container's own addresses (``/proc/net/if_inet6``) map to the interface holding
    them, and routes through ``lo`` (the local table's) are skipped otherwise.

    :returns: the interface name (``None`` when no route matches), and the other interfaces
        that have a route as good (prefix and metric) to ``address``, in table order.
    """
    from derive_env.hostnet import own_v6, routes_v4, routes_v6  # only with socket-ifname

    ip = ipaddress.ip_address(address)
    if ip.is_loopback:
        return LOOPBACK, ()
    if isinstance(ip, ipaddress.IPv4Address):
        routes = [r for r in routes_v4(facts.routes_v4) if ip in r.network]
    else:
        own = own_v6(facts.addresses_v6)
        if ip in own:
            return own[ip], ()
        routes = [r for r in routes_v6(facts.routes_v6)
                  if ip in r.network and r.interface != LOOPBACK]
    if not routes:
        return None, ()
    best = min((-r.network.prefixlen, r.metric) for r in routes)
    equal = [r.interface for r in routes if (-r.network.prefixlen, r.metric) == best]
    chosen = equal[0]
    return chosen, tuple(dict.fromkeys(i for i in equal if i != chosen))


def connected_subnets(facts: HostFacts) -> dict[str, list[IPNetwork]]:
    """Interface -> the subnets it reaches directly (routes without a gateway).

    From the main routing tables: ``/0`` routes, link-local and multicast prefixes and
    routes through ``lo`` are left out (they say nothing about which peers an interface
    reaches).
    """
    from derive_env.hostnet import routes_v4, routes_v6

    subnets: dict[str, list[IPNetwork]] = {}
    for net, _, iface, gateway, _ in routes_v4(facts.routes_v4) + routes_v6(facts.routes_v6):
        if gateway or net.prefixlen == 0 or iface == LOOPBACK:
            continue
        if net.is_link_local or net.is_multicast:
            continue
        subnets.setdefault(iface, [])
        if net not in subnets[iface]:
            subnets[iface].append(net)
    return subnets


def session_subnets(facts: HostFacts) -> list[IPNetwork]:
    """The subnets this container reaches directly, every interface's but ``lo``'s."""
    return [net for nets in connected_subnets(facts).values() for net in nets]


def own_interface(address: str, facts: HostFacts) -> str | None:
    """The interface holding ``address`` as one of this container's own addresses.

    IPv4: ``address`` must be local (``/proc/net/fib_trie``); its interface is the one whose
    directly connected subnet holds it (longest prefix, then table order). IPv6:
    ``/proc/net/if_inet6``. ``None`` when it is not an address of this container.
    """
    from derive_env.hostnet import local_v4, own_v6, routes_v4

    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        return own_v6(facts.addresses_v6).get(ip)
    if ip not in local_v4(facts.local_v4):
        return None
    holding = [
        (-net.prefixlen, position, iface)
        for position, (net, _, iface, gateway, _) in enumerate(routes_v4(facts.routes_v4))
        if not gateway and ip in net and iface != LOOPBACK
    ]
    return min(holding)[2] if holding else None


def derive(ctx: Context) -> Contribution:
    """Interface hints: the ``socket-ifname`` label's, or the ``baimulti0`` default.

    :raises LabelError: the label names an interface this container does not have, or
        ``lo`` in a session of more than one node.
    """
    out = Contribution()
    wanted = ctx.policy.socket_ifname
    if wanted == "none":
        return out
    if wanted is None:
        _overlay_default(ctx, out)
        return out
    if wanted == LOOPBACK and ctx.topology.multi_node:
        # Decided from the label and the session size, which every node shares: all stop.
        raise LabelError(describe(
            f"label {LABEL}", wanted,
            "an interface the other nodes can reach in a job of "
            f"{ctx.topology.num_nodes or 'several'} nodes; lo is loopback, gloo and NCCL "
            "would advertise 127.0.0.1 (use auto, or "
            "the interface of the network between the nodes)",
        ))
    facts = ctx.facts
    if facts is None:
        out.notes.append(
            f"GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME: label {LABEL}={wanted} is decided in the "
            "container at start, from its own interfaces and routes (not shown here)"
        )
        return out
    if wanted != "auto":
        if wanted not in facts.interfaces:
            raise LabelError(describe(
                f"label {LABEL}", wanted,
                # Only this container can check its own interfaces: name it
                # (docs/behaviour.md section 7).
                f"'auto' or an interface of this container, "
                f"{_own_name(ctx)} ({', '.join(facts.interfaces)})",
            ))
        _set(out, wanted, f"label {LABEL}")
        return out
    resolved = _auto(ctx, facts, out)
    user_set = ctx.environ.get("GLOO_SOCKET_IFNAME") or ctx.environ.get("NCCL_SOCKET_IFNAME")
    if ctx.topology.multi_node and facts.hostname and not out.variables and not user_set:
        _hostname_warning(facts.hostname, resolved, out)
    return out


def _own_name(ctx: Context) -> str:
    me = ctx.topology.this_node
    if me is not None:
        return me.host
    facts = ctx.facts
    return (facts.hostname if facts is not None else "") or "this node"


def _set(out: Contribution, iface: str, source: str) -> None:
    out.variables += [var(name, iface, source, scope=SHARED, node_decided=True)
                      for name in VARIABLES]


def _overlay_default(ctx: Context, out: Contribution) -> None:
    """No label: ``baimulti0`` in a session of more than one node, when the user set none;
    without it, in Backend.AI's container, the interface of the route to the master."""
    if not ctx.topology.multi_node or any(ctx.environ.get(name) for name in VARIABLES):
        return
    facts = ctx.facts
    # Without host facts (--env-file: another container) the default is not decided; it
    # adds no note either, to keep --explain of every multi-node session short.
    if facts is not None and OVERLAY in facts.interfaces:
        _set(out, OVERLAY, (
            f"default: {OVERLAY}, Backend.AI's multi-node overlay interface, is present "
            f"(label {LABEL}=none turns this off)"
        ))
    elif facts is not None and facts.routes_v4 and ctx.topology.source == "backendai":
        _route_default(ctx, facts, out)


def route_default_wanted(environ: Mapping[str, str]) -> bool:
    """Whether the edge reads the routes for :func:`_route_default` (when ``baimulti0`` is
    missing and :data:`BACKENDAI_MARKER` exists): a Backend.AI session of more than one
    container (``BACKENDAI_CLUSTER_SIZE`` > 1), the user having set no interface."""
    size = environ.get("BACKENDAI_CLUSTER_SIZE", "").strip()
    return (size.isascii() and size.isdigit() and int(size) > 1
            and not any(environ.get(name) for name in VARIABLES))


#: The file Backend.AI's agent mounts into every container of a session, Docker and
#: Kubernetes backends alike (``/home/config``: ai/backend/agent/docker/agent.py,
#: kubernetes/agent.py ``get_intrinsic_mounts``); Docker or Compose running the same image
#: with the same variables have no such file.
BACKENDAI_MARKER = "/home/config/environ.txt"


def _route_default(ctx: Context, facts: HostFacts, out: Contribution) -> None:
    """No ``baimulti0`` in Backend.AI's container (a session on a project's persistent
    network joins it in bridge mode, lablup/backend.ai#14133; Docker before 28 names the
    overlay ``ethN``): the interface the kernel routes to the master through, as label
    ``socket-ifname=auto``'s route rule (never ``lo``), so NCCL does not pick a gateway
    bridge. Unresolved master or no route: a warning, nothing set."""
    master = ctx.master.addr
    addresses = _addresses(master, {} if _addresses(master, {}) else
                           dict(facts.resolve([master])))
    why = (f"default: no {OVERLAY} in this Backend.AI container (a Backend.AI session on a "
           "project's persistent network, or Docker before 28)")
    for address in addresses:
        iface, ties = route_choice(address, facts)
        if iface and iface != LOOPBACK and iface in facts.interfaces:
            _set(out, iface, f"{why}: the interface of the route to the master {master} "
                             f"({address}), as label {LABEL}=auto (label {LABEL}=none turns "
                             "this off)")
            if ties:
                out.warnings.append(
                    f"{why}: the routes to the master {master} through {iface} and "
                    f"{', '.join(ties)} have the same prefix and metric; took {iface}, the "
                    f"first in the routing table; name the interface in label {LABEL}")
            return
    out.warnings.append(
        f"{why}: no route to the master {master!r} (resolved: "
        f"{', '.join(addresses) or f'nothing within {RESOLVE_SECONDS:g} s'}); {_NOT_SET}, "
        f"so NCCL may choose another bridge: name the interface in label {LABEL}")


def _addresses(name: str, resolved: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """An IP literal is its own address; a name has what resolution found."""
    try:
        return (str(ipaddress.ip_address(name)),)
    except ValueError:
        return tuple(resolved.get(name, ()))


#: A candidate interface: (interface, provenance, interfaces with an equally good route).
Candidate = tuple[str, str, tuple[str, ...]]


def _auto(ctx: Context, facts: HostFacts, out: Contribution) -> dict[str, tuple[str, ...]]:
    """``auto``: the first usable candidate (module docstring); returns what was resolved."""
    multi = ctx.topology.multi_node
    master = ctx.master.addr
    peers = _peers(ctx) if multi else []
    names = [master, *peers, facts.hostname] if multi else [master]
    names = [n for n in dict.fromkeys(names) if n and not _addresses(n, {})]
    resolved = dict(facts.resolve(names)) if names else {}
    peer_addresses = [(host, a) for host in peers for a in _addresses(host, resolved)]
    rejected: list[str] = []
    candidates = _hosts_candidates(facts, rejected) if multi else []
    master_addresses = _addresses(master, resolved)
    for address in master_addresses:
        iface, ties = route_choice(address, facts)
        if iface and iface in facts.interfaces:
            route = f"label {LABEL}=auto: route to the master {master} ({address})"
            candidates.append((iface, route, ties))
    subnets = connected_subnets(facts)
    judged = [(c, _unusable(c[0], multi, subnets, peer_addresses)) for c in candidates]
    chosen = _choose(judged, rejected, master, out)
    out.notes += [f"label {LABEL}=auto: not chosen: {reason}" for reason in rejected]
    late = [host for host in peers if not _addresses(host, resolved)]
    if late and ctx.environ.get(POD):
        out.warnings.append(_not_ready(late, bool(peer_addresses)))
    elif peers and not peer_addresses:
        out.notes.append(
            f"label {LABEL}=auto: no peer's name resolved within {RESOLVE_SECONDS:g} s "
            f"({', '.join(peers)}): the subnet rule was not checked"
        )
    if chosen is None and rejected:
        out.warnings.append(
            f"label {LABEL}=auto: no usable interface ({'; '.join(rejected)}); {_NOT_SET}")
    elif chosen is None:
        out.warnings.append(
            f"label {LABEL}=auto: no interface routes to the master {master!r} "
            f"(resolved: {', '.join(master_addresses) or 'not resolvable'}); {_NOT_SET}")
    return resolved


def _not_ready(late: list[str], some: bool) -> str:
    """Cloud survey pitfall 4: a pod's name resolves only once the pod is ready (a headless
    Service publishes ready pods only, unless ``publishNotReadyAddresses``); a pod starts
    before its peers, so this is a warning, never an error, and never a longer wait."""
    checked = "checked against the peers that did" if some else "not checked"
    return (f"label {LABEL}=auto: {', '.join(late)} did not resolve within "
            f"{RESOLVE_SECONDS:g} s: on Kubernetes a pod's name resolves only once the pod "
            f"is ready, so the subnet rule was {checked}; not an error, the peers may still be "
            "starting (derive-env check, as an init container of every pod, waits for every "
            "name within its bound)")


def _peers(ctx: Context) -> list[str]:
    """The peers whose addresses the subnet rule checks: the master first (a user-set
    ``MASTER_ADDR`` need not be a node; it is a peer all the same) unless it is this node,
    then the other nodes in canonical order, at most :data:`MAX_PEERS`."""
    topology, master = ctx.topology, ctx.master.addr
    peers = [n.host for r, n in enumerate(topology.nodes) if r != topology.node_rank]
    me = topology.this_node
    if me is None or master.lower() != me.host.lower():
        peers.insert(0, master)
    return list(dict.fromkeys(peers))[:MAX_PEERS]


def _hosts_candidates(facts: HostFacts, rejected: list[str]) -> list[Candidate]:
    """The candidates before the route to the master: ``baimulti0``, then the interface
    holding each address ``/etc/hosts`` gives the own host name (loopback skipped; an
    address that is not this container's goes to ``rejected``)."""
    candidates: list[Candidate] = []
    if OVERLAY in facts.interfaces:
        overlay = f"label {LABEL}=auto: {OVERLAY}, Backend.AI's multi-node overlay"
        candidates.append((OVERLAY, overlay, ()))
    for address in hosts_addresses(facts.hosts, facts.hostname):
        if ipaddress.ip_address(address).is_loopback:
            continue
        iface = own_interface(address, facts)
        if iface is None:
            rejected.append(f"{address} ({facts.hostname} in /etc/hosts) is not an address "
                            "of this container")
            continue
        candidates.append((iface, (
            f"label {LABEL}=auto: the interface holding {address}, the address of this "
            f"container's host name {facts.hostname} in /etc/hosts"), ()))
    return candidates


def _choose(judged: list[tuple[Candidate, str | None]], rejected: list[str], master: str,
            out: Contribution) -> str | None:
    """Set the first usable candidate of ``judged`` (each with why it is not usable, or
    ``None``: :func:`_unusable`), with a warning when its route ties with another's; the
    reasons the others before it were not usable go to ``rejected``. :returns: it, or
    ``None``."""
    for (iface, source, ties), reason in judged:
        if reason:
            if reason not in rejected:
                rejected.append(reason)
            continue
        _set(out, iface, source)
        if ties:
            out.warnings.append(
                f"label {LABEL}=auto: the routes to the master {master} through {iface} and "
                f"{', '.join(ties)} have the same prefix and metric; took {iface}, the first "
                "in the routing table, as the kernel does, but another node may list them in "
                "another order and choose differently (NVIDIA/nccl#1581); give the routes "
                "different metrics, or name the interface in the label")
        return iface
    return None


def _unusable(iface: str, multi: bool, subnets: dict[str, list[IPNetwork]],
              peer_addresses: list[tuple[str, str]]) -> str | None:
    """Why a candidate interface cannot carry the job's traffic, or ``None`` when it can."""
    if not multi:
        return None
    if iface == LOOPBACK:
        return f"{LOOPBACK} is loopback, which the other nodes cannot reach"
    if not peer_addresses:
        return None  # no peer resolved in time: the subnet rule cannot be checked
    nets = subnets.get(iface, [])
    if any(ipaddress.ip_address(a) in net for _, a in peer_addresses for net in nets):
        return None
    shown = ", ".join(f"{host} {address}" for host, address in peer_addresses[:4])
    more = ", ..." if len(peer_addresses) > 4 else ""
    return (f"{iface}: its subnets ({', '.join(map(str, nets)) or 'none'}) hold none of the "
            f"peers' addresses ({shown}{more})")


def _hostname_warning(hostname: str, resolved: dict[str, tuple[str, ...]],
                      out: Contribution) -> None:
    """gloo without an interface hint binds to what its host name resolves to."""
    addresses = _addresses(hostname, resolved)
    if not addresses:
        out.warnings.append(
            f"this container's host name {hostname!r} did not resolve within "
            f"{RESOLVE_SECONDS:g} s: gloo then binds to the loopback address 127.0.0.1 and "
            "advertises it to the other nodes, which cannot reach it; add the name to "
            "/etc/hosts or set GLOO_SOCKET_IFNAME")
    elif all(ipaddress.ip_address(a).is_loopback for a in addresses):
        out.warnings.append(
            f"this container's host name {hostname!r} resolves only to loopback "
            f"({', '.join(addresses)}): gloo and NCCL would advertise it to the other "
            "nodes, which cannot reach it; fix /etc/hosts or set GLOO_SOCKET_IFNAME")
