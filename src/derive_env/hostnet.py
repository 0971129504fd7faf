"""The kernel's network tables, parsed: their text in, addresses and routes out.

One parser per table, pure (the text is read at the edge, :mod:`derive_env.cli.hostfacts`,
or handed to a source as a file it needs), for every reader of them: the interface rules
(:mod:`derive_env.frameworks.network`), ``derive-env check`` (:mod:`derive_env.preflight`)
and a main node's own address (AWS Batch). The formats are the kernel's:

* ``/proc/net/route``: a heading line, then one route per line, addresses and masks as
  host-order (little-endian) hex, flags and the rest as printed by net/ipv4/fib_trie.c
  (``fib_route_seq_show``);
* ``/proc/net/ipv6_route``: one route per line, hex fields (net/ipv6/route.c,
  ``rt6_info_seq_show``);
* ``/proc/net/if_inet6``: an address (32 hex digits) and, in the sixth field, its interface
  (net/ipv6/addrconf.c, ``if6_seq_show``);
* ``/proc/net/fib_trie``: leaves ``|-- a.b.c.d``, a ``/32 host LOCAL`` line under a leaf
  marking an address of this network namespace (net/ipv4/fib_trie.c, ``fib_trie_seq_show``).

And the problems of a Backend.AI session's names as resolved (:func:`name_problems`), for
``derive-env check``.

Lines that are malformed (too few fields, not hex, not an address) are skipped; routes that
are not up (``RTF_UP``) too. Loaded only by the readers above, never on a container start
that does not ask for them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from collections import namedtuple
from collections.abc import Mapping, Sequence

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: The kernel's IPv4 routes and local addresses (the files' names, for messages).
ROUTES_V4, FIB_TRIE = "/proc/net/route", "/proc/net/fib_trie"
#: Route flags (linux/route.h).
RTF_UP, RTF_GATEWAY = 0x1, 0x2

_TRIE_LEAF = re.compile(r"\s*\|--\s+(\d+\.\d+\.\d+\.\d+)\s*$")
_TRIE_LOCAL = re.compile(r"\s*/32\s+host\s+LOCAL\s*$")



class Route(namedtuple("Route", "network metric interface via_gateway gateway",
                       defaults=(None,))):
    """One route of a main routing table.

    :ivar network: its destination (an ``IPv4Network`` or ``IPv6Network``).
    :ivar metric: its metric (lower wins among equal prefixes).
    :ivar interface: the interface it goes out through.
    :ivar via_gateway: whether it goes through a gateway (``RTF_GATEWAY``), else the
        destination is directly connected.
    :ivar gateway: the gateway's IPv4 address (``0.0.0.0`` without one); ``None`` for IPv6
        routes and for an IPv4 gateway field that is not a 4-byte hex address.
    """

    __slots__ = ()  # a plain namedtuple: nothing evaluated per field at import


def routes_v4(text: str) -> list[Route]:
    """The routes that are up of ``/proc/net/route``'s ``text``, in table order."""
    routes: list[Route] = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        iface, dest, flags, metric, mask = fields[0], fields[1], fields[3], fields[6], fields[7]
        try:
            flag_bits = int(flags, 16)
            if not flag_bits & RTF_UP:
                continue
            net = ipaddress.IPv4Network(
                (_host_order(dest), bin(_host_order(mask)).count("1")), strict=False)
            route = Route(net, int(metric), iface, bool(flag_bits & RTF_GATEWAY))
        except ValueError:
            continue
        with contextlib.suppress(ValueError):
            route = route._replace(gateway=ipaddress.IPv4Address(_host_order(fields[2])))
        routes.append(route)
    return routes


def _host_order(field: str) -> int:
    """A host-order (little-endian) hex field of ``/proc/net/route`` as an integer."""
    return int.from_bytes(bytes.fromhex(field), "little")


def routes_v6(text: str) -> list[Route]:
    """The routes that are up of ``/proc/net/ipv6_route``'s ``text``, in table order."""
    routes: list[Route] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 10:
            continue
        try:
            net = ipaddress.IPv6Network((int(fields[0], 16), int(fields[1], 16)), strict=False)
            flags, metric, iface = int(fields[8], 16), int(fields[5], 16), fields[9]
        except ValueError:
            continue
        if flags & RTF_UP:
            routes.append(Route(net, metric, iface, bool(flags & RTF_GATEWAY)))
    return routes


def own_v6(text: str) -> dict[ipaddress.IPv6Address, str]:
    """This container's own IPv6 addresses -> the interface holding each, from
    ``/proc/net/if_inet6``'s ``text`` (a repeated address: its last interface)."""
    own = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 6:
            try:
                own[ipaddress.IPv6Address(int(fields[0], 16))] = fields[5]
            except ValueError:
                continue
    return own


def local_v4(fib_trie: str) -> tuple[ipaddress.IPv4Address, ...]:
    """This container's own IPv4 addresses, loopback included, each once, in the order of
    ``/proc/net/fib_trie``'s ``text``: a leaf ``|-- a.b.c.d`` followed by a
    ``/32 host LOCAL`` line (a local route of the kernel's local table). Other and malformed
    lines are skipped."""
    found: dict[ipaddress.IPv4Address, None] = {}
    leaf: str | None = None
    for line in fib_trie.splitlines():
        match = _TRIE_LEAF.match(line)
        if match:
            leaf = match[1]
        elif leaf is not None and _TRIE_LOCAL.match(line):
            with contextlib.suppress(ValueError):
                found[ipaddress.IPv4Address(leaf)] = None
        elif not line.lstrip().startswith("/"):
            leaf = None
    return tuple(found)


def reachable_v4(fib_trie: str) -> list[ipaddress.IPv4Address]:
    """This node's own IPv4 addresses in ``fib_trie``, without loopback and link-local."""
    return [a for a in local_v4(fib_trie) if not (a.is_loopback or a.is_link_local)]


def own_address(routes: str, fib_trie: str) -> tuple[str | None, str]:
    """A node's own address, the source address of the default route (the texts of
    :data:`ROUTES_V4`, :data:`FIB_TRIE`): its address on the subnets of the route's
    interface, the one holding the gateway first (an AWS Batch main node's).
    Returns ``(address or None, how it was found or why not)``."""
    # a route whose gateway field is no 4-byte address is of no use here (gateway None)
    table = [r for r in routes_v4(routes) if r.gateway is not None]
    defaults = sorted((r.metric, position, r.interface, r.gateway)
                      for position, r in enumerate(table)
                      if r.network.prefixlen == 0 and r.interface != "lo")
    if not defaults:
        return None, f"no default route in {ROUTES_V4}"
    _, _, iface, gateway = defaults[0]
    subnets = [r.network for r in table
               if r.interface == iface and not r.via_gateway and r.network.prefixlen > 0]
    own = reachable_v4(fib_trie)
    candidates = [a for a in own if any(a in net for net in subnets)]
    on_gateway = [a for a in candidates
                  if any(a in net and gateway in net for net in subnets)]
    chosen = on_gateway or candidates
    if len(chosen) != 1:
        found = ", ".join(map(str, chosen)) or "none"
        return None, (f"the default route's interface {iface} has {len(chosen)} own "
                      f"addresses on its subnets ({found}; {ROUTES_V4}, {FIB_TRIE})")
    return str(chosen[0]), f"the source address of the default route (via {iface})"


def name_problems(host: str, names: Sequence[str], resolved: Mapping[str, Sequence[str]],
                  subnets: Sequence[IPNetwork]) -> list[str]:
    """:func:`name_problem` of each of ``names`` as ``host`` resolved them (``derive-env
    check`` in a Backend.AI session: its own name and its peers')."""
    found = (name_problem(n, host, tuple(resolved.get(n, ())), subnets) for n in names)
    return [problem for problem in found if problem]


def name_problem(name: str, host: str, addresses: Sequence[str],
                 subnets: Sequence[IPNetwork]) -> str | None:
    """Why a Backend.AI session's name ``name`` may reach another session's container, as
    ``host`` resolved it, or ``None``: more than one address of one family (every Backend.AI
    session on a project's persistent network registers the same aliases main1, sub1 ...:
    lablup/backend.ai#14133), or an address outside ``subnets`` (``network.session_subnets``)."""
    ips = [ipaddress.ip_address(a) for a in addresses]
    for version in (4, 6):
        same = [str(ip) for ip in ips if ip.version == version]
        if len(same) > 1:
            return (f"{host} resolves {name} to {len(same)} addresses ({', '.join(same)}): "
                    "several containers answer to that name, as when Backend.AI sessions "
                    "share a project's persistent network and each registers the same "
                    "main1, sub1 ... names, so gloo and NCCL may reach another Backend.AI "
                    "session's container; start the Backend.AI session on a network of its "
                    "own")
    outside = [str(ip) for ip in ips if not ip.is_loopback
               and not any(ip in net for net in subnets)]
    if outside and subnets:
        return (f"{host} resolves {name} to {outside[0]}, outside this container's subnets "
                f"({', '.join(map(str, subnets))}): not a container of this Backend.AI "
                "session's network")
    return None
