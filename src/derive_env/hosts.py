"""What a host name, an address and a role name may be: the rules every stage shares.

Sources check a host they read with :func:`host_problem` and a whole host list with
:func:`check_hosts` and :func:`repeated_host`; frameworks join hosts and ports with
:func:`host_port`; the merge refuses a loopback master with :func:`is_loopback`;
label ``socket-ifname`` reads the own name's ``/etc/hosts`` lines with :func:`hosts_addresses`.
Pure and pydantic-free: the standard library's ``ipaddress`` and ``re`` only.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence

#: RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens; one
#: trailing dot allowed (a fully qualified name, ``node1.cluster.local.``, as resolvers and
#: torchrun's ``--master-addr`` take it: RFC 1034 section 3.1), not counted in the 253.
_HOSTNAME = re.compile(
    r"(?=.{1,253}\.?\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?\Z"
)

_NUMERIC = re.compile(r"[0-9.]+\Z")

#: A cluster manager's role name (Backend.AI: free-form, ``main``, ``sub``, ``a100``,
#: ``gpu-2``): letters, digits and '-', with a letter, not starting with '-', so that
#: ``{role}{idx}`` is a host name (Backend.AI's default_hostname in
#: expand_kernel_groups_rule.py). Shared by the Backend.AI source and the tensorflow-roles
#: label, so a role the source accepts can always be mapped.
ROLE_NAME = re.compile(r"(?=[0-9-]*[A-Za-z])[A-Za-z0-9][A-Za-z0-9-]*\Z")
#: A Backend.AI container's host name ``{role}{index}`` (default_hostname), the role taken as
#: not ending in a digit: the fallback without REPLICAS (sources/managers/backendai.py and
#: its canonical order, backendai_order.py). A pattern, compiled by them: only a Backend.AI
#: start pays for it.
ROLE_INDEX = r"(?P<role>[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z-])?)(?P<index>[0-9]+)\Z"


def host_problem(value: str) -> str | None:
    """Say why ``value`` cannot be used as a node's address, or ``None`` when it can.

    Accepted: an RFC 1123 host name (``main1``, ``node-3.cluster.local``) or an IPv4 / IPv6
    literal without brackets. Rejected with a reason: anything else, and IPv6 link-local
    addresses (``fe80::/10``): with a zone (``fe80::1%eth0``) the zone cannot be carried
    through ``host:port`` values that frameworks parse (TF_CONFIG, the JAX coordinator
    address), and without one the address is ambiguous to the kernel.

    :param value: a host name or IP literal, as set by a cluster manager or a user.
    :returns: the expectation that was not met, phrased to follow "expected ...".
    """
    if "%" in value:
        return (
            "a host name or an IP address without a zone; link-local IPv6 addresses with a "
            "zone (fe80::...%eth0) cannot be carried in host:port values, use a global or "
            "unique-local address or a host name"
        )
    if ":" in value:
        try:
            address = ipaddress.IPv6Address(value)
        except ValueError:
            return "a host name or an IP address (IPv6 without brackets, no port)"
        if address.is_link_local:
            return (
                "a host name or a routable IP address; a link-local IPv6 address needs a "
                "zone, which cannot be carried in host:port values"
            )
        return None
    if _HOSTNAME.match(value):
        if _NUMERIC.match(value):  # "10.0.0.1." too: an address takes no trailing dot
            try:
                ipaddress.IPv4Address(value)
            except ValueError:
                # RFC 1123 section 2.1: a name is never all-numeric like an address.
                return "a host name or an IPv4 address (four numbers 0-255)"
        return None
    return "a host name (letters, digits, '-' and '.') or an IP address"


#: Digits to ``0``: a host's shape. The host name rules treat every digit alike (RFC 1123
#: labels, :data:`_HOSTNAME`), so hosts of one shape are all valid or all invalid; except
#: addresses (IPv4, IPv6 hex, zones), which :func:`check_hosts` checks one by one.
_ZEROS = str.maketrans("123456789", "000000000")


def check_hosts(hosts: Sequence[str]) -> tuple[int, str, str] | None:
    """The first entry of a host list that cannot be a node's address, or ``None``.

    Each entry must pass :func:`host_problem` (an RFC 1123 host name or an IP literal; an
    empty entry does not). Names are checked once per shape (``n0001`` to ``n4096`` are one
    shape, :data:`_ZEROS`), addresses one by one.

    :param hosts: the entries in the manager's order.
    :returns: ``(position, entry, expectation)`` of the first refused entry in list order,
        ``position`` counted from 1 and ``expectation`` phrased to follow "expected ...".
    """
    shapes = "\n".join(hosts).translate(_ZEROS).split("\n")
    if len(shapes) == len(hosts):  # else an entry holds the separator: check each
        distinct = set(shapes)
        if not any(":" in shape or "%" in shape or not shape.strip("0.") for shape in distinct):
            bad = {shape for shape in distinct if host_problem(shape)}
            if not bad:
                return None
            suspects: Iterable[tuple[int, str]] = (
                (position, host) for position, (host, shape)
                in enumerate(zip(hosts, shapes, strict=True), 1) if shape in bad)
            return _first_problem(suspects)
    return _first_problem(enumerate(hosts, 1))


def _first_problem(entries: Iterable[tuple[int, str]]) -> tuple[int, str, str] | None:
    for position, host in entries:
        problem = host_problem(host)
        if problem:
            return position, host, problem
    return None


def repeated_host(hosts: Sequence[str]) -> str | None:
    """The first entry of a host list that repeats an earlier one, or ``None``.

    Names are compared case-insensitively, as DNS compares them (RFC 4343): ``sub1`` and
    ``SUB1`` are one node (docs/behaviour.md section 5).

    :returns: the second occurrence, spelled as the list spells it.
    """
    joined = "\n".join(hosts)
    folded = hosts if joined.lower() == joined else [host.lower() for host in hosts]
    if len(set(folded)) == len(hosts):
        return None
    seen: set[str] = set()
    for host, key in zip(hosts, folded, strict=True):
        if key in seen:
            return host
        seen.add(key)
    return None  # unreachable: the set above was smaller than the list


def host_key(host: str) -> str:
    """``host`` as DNS compares names: without regard to case (RFC 4343), and a fully
    qualified ``main1.`` equal to ``main1``; two hosts are one when their keys are equal."""
    return host.lower().rstrip(".")


def is_ipv6(host: str) -> bool:
    """True when ``host`` is an IPv6 literal (which then needs brackets before ``:port``)."""
    return ":" in host


def host_port(host: str, port: int) -> str:
    """Join a host and a port as frameworks parse them: ``main1:2222``, ``[2001:db8::1]:2222``.

    IPv6 literals are bracketed (RFC 3986 section 3.2.2), as TensorFlow's gRPC targets and
    JAX's coordinator address expect.
    """
    return f"[{host}]:{port}" if is_ipv6(host) else f"{host}:{port}"


#: Names that resolve to loopback (RFC 6761 ``localhost``; Debian's /etc/hosts ip6 names).
_LOOPBACK_NAMES = ("localhost", "ip6-localhost", "ip6-loopback", "localhost.localdomain",
                   "localhost6", "localhost6.localdomain6")  # the last two: RHEL's /etc/hosts


def inet_aton(text: str) -> ipaddress.IPv4Address | None:
    """An IPv4 address in the legacy forms glibc's inet_aton() (so getaddrinfo) accepts:
    1 to 4 parts, each decimal, hex (``0x7f``) or octal (``0177``), the last part filling
    the remaining bytes (``0x7f000001``, ``127.1``, ``0x7f.1``). ``None`` for anything else."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = []
    for part in parts:
        try:
            if part[:2] in ("0x", "0X"):
                values.append(int(part[2:], 16) if part[2:] else -1)  # "0x": not inet_aton
            elif len(part) > 1 and part[0] == "0":
                values.append(int(part, 8))
            else:
                values.append(int(part) if part.isdigit() else -1)
        except ValueError:
            return None
        if values[-1] < 0 or len(part) > 12:
            return None
    *head, last = values
    if any(v > 255 for v in head) or last >= 1 << (8 * (4 - len(head))):
        return None
    number = 0
    for v in head:
        number = number << 8 | v
    return ipaddress.IPv4Address(number << (8 * (4 - len(head))) | last)


def is_loopback(host: str) -> bool:
    """``127.0.0.0/8``, ``::1`` (also IPv4-mapped), ``0.0.0.0`` / ``::`` (which connect to
    this host on Linux), also written in inet_aton's legacy forms (``0x7f000001``), and the
    ``localhost`` names (RFC 6761, including ``*.localhost``; RHEL's ``localhost6``)."""
    lowered = host.lower().rstrip(".")
    if lowered in _LOOPBACK_NAMES or lowered.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(lowered)
    except ValueError:
        # 0x7f000001, 0x7f.1: names to ipaddress, loopback to the resolver (inet_aton).
        address = inet_aton(lowered)
        if address is None:
            return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or address.is_unspecified
                or (mapped is not None and mapped.is_loopback))


def is_ip(host: str) -> bool:
    """True when ``host`` is an IPv4 or IPv6 literal (no inet_aton legacy forms)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def hosts_addresses(hosts: str, hostname: str) -> list[str]:
    """The addresses ``/etc/hosts`` gives ``hostname`` (case-insensitive), in file order.

    glibc's files backend reads the same lines (``address name [alias...]``, ``#`` starts a
    comment, hosts(5)). Entries whose address is not an IP literal are skipped.
    """
    wanted = hostname.lower()
    found: list[str] = []
    if not wanted:
        return found
    for line in hosts.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2 or wanted not in (name.lower() for name in fields[1:]):
            continue
        try:
            address = str(ipaddress.ip_address(fields[0]))
        except ValueError:
            continue
        if address not in found:
            found.append(address)
    return found
