"""Interface hints for gloo and NCCL: ``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``.

Enabled by label ``ai.backend.distributed.socket-ifname``: ``auto`` picks the interface
the kernel routes to the master through (longest-prefix match over the main routing table,
``/proc/net/route`` and ``/proc/net/ipv6_route``, no external tools); a name is used as is.
Either way, an interface that does not exist in the container is never emitted. gloo reads
``GLOO_SOCKET_IFNAME`` (torch/csrc/distributed/c10d/init.cpp), NCCL reads
``NCCL_SOCKET_IFNAME`` (NCCL environment variables documentation).

Also warns when, in a session of more than one node, this container's host name resolves
only to loopback: gloo then advertises 127.0.0.1 to its peers, which cannot reach it.
"""

from __future__ import annotations

import ipaddress

from derive_env.errors import LabelError, describe
from derive_env.frameworks import Context, Contribution, HostFacts, variable
from derive_env.labels import PREFIX

LABEL = PREFIX + "socket-ifname"
_RTF_UP = 0x1

var = variable("network")


def _routes_v4(text: str) -> list[tuple[ipaddress.IPv4Network, int, str]]:
    routes = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        iface, dest, flags, metric, mask = fields[0], fields[1], fields[3], fields[6], fields[7]
        try:
            if not int(flags, 16) & _RTF_UP:
                continue
            # /proc/net/route prints addresses as host-order (little-endian) hex.
            net = ipaddress.IPv4Network(
                (int.from_bytes(bytes.fromhex(dest), "little"),
                 bin(int.from_bytes(bytes.fromhex(mask), "little")).count("1")),
                strict=False,
            )
            routes.append((net, int(metric), iface))
        except ValueError:
            continue
    return routes


def _routes_v6(text: str) -> list[tuple[ipaddress.IPv6Network, int, str]]:
    routes = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 10:
            continue
        try:
            net = ipaddress.IPv6Network(
                (int(fields[0], 16), int(fields[1], 16)), strict=False
            )
            flags, metric, iface = int(fields[8], 16), int(fields[5], 16), fields[9]
        except ValueError:
            continue
        if flags & _RTF_UP:
            routes.append((net, metric, iface))
    return routes


def _own_v6(text: str) -> dict[ipaddress.IPv6Address, str]:
    own = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 6:
            try:
                own[ipaddress.IPv6Address(int(fields[0], 16))] = fields[5]
            except ValueError:
                continue
    return own


def route_interface(address: str, facts: HostFacts) -> str | None:
    """The interface the kernel's main routing table sends ``address`` through.

    Longest prefix first, then lowest metric. Loopback addresses go through ``lo``. For
    IPv6, this container's own addresses (``/proc/net/if_inet6``) map to the interface
    holding them, and routes through ``lo`` (the local table's) are skipped otherwise.

    :returns: the interface name, or ``None`` when no route matches.
    """
    ip = ipaddress.ip_address(address)
    if ip.is_loopback:
        return "lo"
    candidates: list[tuple[int, int, str]] = []
    if isinstance(ip, ipaddress.IPv4Address):
        candidates = [(-n.prefixlen, m, i) for n, m, i in _routes_v4(facts.routes_v4) if ip in n]
    else:
        own = _own_v6(facts.addresses_v6)
        if ip in own:
            return own[ip]
        candidates = [
            (-n.prefixlen, m, i)
            for n, m, i in _routes_v6(facts.routes_v6)
            if ip in n and i != "lo"
        ]
    return min(candidates)[2] if candidates else None


def derive(ctx: Context) -> Contribution:
    """Interface hints, when the ``socket-ifname`` label asks for them.

    :raises LabelError: the label names an interface this container does not have.
    """
    out = Contribution()
    wanted, facts = ctx.policy.socket_ifname, ctx.facts
    if wanted is None:
        return out
    if facts is None:
        out.notes.append(
            f"GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME: label {LABEL}={wanted} is decided in the "
            "container at start, from its own interfaces and routes (not shown here)"
        )
        return out
    _derive_interface(ctx, facts, wanted, out)
    user_set = ctx.environ.get("GLOO_SOCKET_IFNAME") or ctx.environ.get("NCCL_SOCKET_IFNAME")
    if ctx.topology.num_nodes > 1 and facts.hostname and not out.variables and not user_set:
        # Without an interface hint gloo advertises the address its host name resolves to.
        resolved = facts.resolve(facts.hostname)
        if resolved and all(ipaddress.ip_address(a).is_loopback for a in resolved):
            out.warnings.append(
                f"this container's host name {facts.hostname!r} resolves only to loopback "
                f"({', '.join(resolved)}): gloo and NCCL would advertise it to the other "
                "nodes, which cannot reach it; fix /etc/hosts or set GLOO_SOCKET_IFNAME"
            )
    return out


def _derive_interface(ctx: Context, facts: HostFacts, wanted: str, out: Contribution) -> None:
    if wanted != "auto":
        if wanted not in facts.interfaces:
            raise LabelError(describe(
                f"label {LABEL}", wanted,
                f"'auto' or an interface of this container ({', '.join(facts.interfaces)})",
            ))
        iface, source = wanted, f"label {LABEL}"
    else:
        addresses = facts.resolve(ctx.master.addr)
        routed = [(a, route_interface(a, facts)) for a in addresses]
        found = [(a, i) for a, i in routed if i and i in facts.interfaces]
        if not found:
            out.warnings.append(
                f"label {LABEL}=auto: no interface routes to the master {ctx.master.addr!r} "
                f"(resolved: {', '.join(addresses) or 'not resolvable'}); "
                "GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME not set"
            )
            return
        address, iface = found[0]
        source = f"label {LABEL}=auto: route to the master {ctx.master.addr} ({address})"
    out.variables += [
        var("GLOO_SOCKET_IFNAME", iface, source),
        var("NCCL_SOCKET_IFNAME", iface, source),
    ]
