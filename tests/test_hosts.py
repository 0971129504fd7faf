"""Host names, addresses and host lists (derive_env.hosts): the rules every stage shares."""

from __future__ import annotations

import pytest

from derive_env.hosts import (
    check_hosts,
    host_port,
    host_problem,
    is_ipv6,
    is_loopback,
    repeated_host,
)

HOSTNAME_EXPECTED = "a host name (letters, digits, '-' and '.') or an IP address"
ZONE_EXPECTED = (
    "a host name or an IP address without a zone; link-local IPv6 addresses with a "
    "zone (fe80::...%eth0) cannot be carried in host:port values, use a global or "
    "unique-local address or a host name"
)
LINK_LOCAL_EXPECTED = (
    "a host name or a routable IP address; a link-local IPv6 address needs a "
    "zone, which cannot be carried in host:port values"
)
BAD_IPV6_EXPECTED = "a host name or an IP address (IPv6 without brackets, no port)"


@pytest.mark.parametrize(
    "host",
    ["main1", "sub10", "node-3.cluster.local", "10.0.0.1", "198.18.0.10", "2001:db8::1",
     "fd00::1", "::1", "a" * 63, "A1",
     # fully qualified, a trailing dot (issue 15, item 7): the 253 do not count it
     "main1.", "node-3.cluster.local.", ".".join(["a" * 63] * 3 + ["a" * 61]) + "."],
)
def test_host_problem_accepts(host: str) -> None:
    assert host_problem(host) is None


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("main_1", HOSTNAME_EXPECTED),
        ("", HOSTNAME_EXPECTED),
        ("-main1", HOSTNAME_EXPECTED),
        ("main1-", HOSTNAME_EXPECTED),
        ("main1..", HOSTNAME_EXPECTED),
        ("a" * 64, HOSTNAME_EXPECTED),
        (" main1", HOSTNAME_EXPECTED),
        ("main1:29500", BAD_IPV6_EXPECTED),
        ("[2001:db8::1]", BAD_IPV6_EXPECTED),
        ("2001:db8::zz", BAD_IPV6_EXPECTED),
        ("fe80::1%eth0", ZONE_EXPECTED),
        ("main1%eth0", ZONE_EXPECTED),
        ("fe80::1", LINK_LOCAL_EXPECTED),
        ("fe80::abcd:1", LINK_LOCAL_EXPECTED),
    ],
)
def test_host_problem_rejects(host: str, expected: str) -> None:
    assert host_problem(host) == expected


@pytest.mark.parametrize(
    ("host", "port", "joined"),
    [
        ("main1", 2222, "main1:2222"),
        ("10.0.0.1", 29500, "10.0.0.1:29500"),
        ("2001:db8::1", 2222, "[2001:db8::1]:2222"),
        ("::1", 1, "[::1]:1"),
    ],
)
def test_host_port_brackets_ipv6_only(host: str, port: int, joined: str) -> None:
    assert host_port(host, port) == joined
    assert is_ipv6(host) == joined.startswith("[")


@pytest.mark.parametrize("host", ["999.1.1.1", "1.2.3", "10.0.0.256", "123"])
def test_numeric_names_that_are_not_ipv4_are_rejected(host: str) -> None:
    """RFC 1123 section 2.1: an all-numeric name is never a host name."""
    assert host_problem(host) == "a host name or an IPv4 address (four numbers 0-255)"


@pytest.mark.parametrize(("host", "loopback"), [
    ("localhost", True), ("localhost.", True), ("ip6-localhost", True), ("127.255.0.1", True),
    ("::1", True), ("main1", False), ("10.0.0.1", False), ("localhostx", False),
    ("2001:db8::1", False),
    # inet_aton's legacy forms, which getaddrinfo resolves (glibc): hex, octal, short.
    ("0x7f000001", True), ("0177.0.0.1", True), ("0x7f.1", True), ("2130706433", True),
    ("0x0a000001", False), ("a1001", False), ("0x", False), ("0x7f.0x100000000", False),
])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


# --- a whole host list: check_hosts, repeated_host -------------------------------------------


@pytest.mark.parametrize("hosts", [
    [], ["main1"], ["n0001", "n0002"], ["node-3.cluster.local", "10.0.0.1", "2001:db8::1"],
    ["a" * 63, "A1", "fd00::1"], ["gpu-a100-09", "gpu-a100-10"], ["10.0.0.1", "10.0.0.2"],
])
def test_check_hosts_accepts(hosts: list[str]) -> None:
    assert check_hosts(hosts) is None


@pytest.mark.parametrize(("hosts", "position", "host", "expected"), [
    (["sub1", "main_1", "sub2"], 2, "main_1", HOSTNAME_EXPECTED),
    (["sub1", "", "sub2"], 2, "", HOSTNAME_EXPECTED),
    (["n1", "n2", "n3-"], 3, "n3-", HOSTNAME_EXPECTED),
    (["n1", "fe80::1%eth0"], 2, "fe80::1%eth0", ZONE_EXPECTED),
    (["n1", "fe80::1"], 2, "fe80::1", LINK_LOCAL_EXPECTED),
    (["n1", "main1:29500"], 2, "main1:29500", BAD_IPV6_EXPECTED),
    (["10.0.0.1", "10.0.0.256"], 2, "10.0.0.256", "a host name or an IPv4 address (four "
     "numbers 0-255)"),
    (["n1", "123"], 2, "123", "a host name or an IPv4 address (four numbers 0-255)"),
    (["a\nb", "c"], 1, "a\nb", HOSTNAME_EXPECTED),  # the separator of the shapes
    (["a1", "b" * 64, "c2"], 2, "b" * 64, HOSTNAME_EXPECTED),
])
def test_check_hosts_names_the_first_refused_entry(hosts: list[str], position: int, host: str,
                                                   expected: str) -> None:
    """The first refused entry in list order, with host_problem's exact expectation."""
    assert check_hosts(hosts) == (position, host, expected)
    assert expected == host_problem(host)


def test_check_hosts_one_shape_many_hosts() -> None:
    """4096 entries of one shape: a bad one is found wherever it is, and named exactly."""
    hosts = [f"n{i:04d}" for i in range(1, 4097)]
    assert check_hosts(hosts) is None
    for at in (0, 2047, 4095):
        bad = list(hosts)
        bad[at] = bad[at] + "_"
        assert check_hosts(bad) == (at + 1, bad[at], HOSTNAME_EXPECTED)
    mixed = [f"sub{i}" for i in range(1, 4096)] + ["main1"]
    assert check_hosts(mixed) is None
    assert check_hosts([*mixed[:-1], "-main1"]) == (4096, "-main1", HOSTNAME_EXPECTED)


def test_check_hosts_addresses_are_checked_one_by_one() -> None:
    """Digits decide whether an address is valid (10.0.0.255 / 10.0.0.256), so lists with
    addresses do not share a check per shape."""
    addresses = [f"10.0.{i // 256}.{i % 256}" for i in range(4096)]
    assert check_hosts(addresses) is None
    assert check_hosts([*addresses, "10.0.0.256"]) == (4097, "10.0.0.256",
                                                       "a host name or an IPv4 address "
                                                       "(four numbers 0-255)")
    assert check_hosts(["2001:db8::1", "fe80::2"]) == (2, "fe80::2", LINK_LOCAL_EXPECTED)


@pytest.mark.parametrize(("hosts", "twice"), [
    ([], None), (["main1"], None), (["main1", "sub1"], None),
    (["sub1", "sub1", "main1"], "sub1"),
    (["sub2", "main1", "SUB2"], "SUB2"),  # compared as DNS does (RFC 4343)
    (["A", "b", "B", "a"], "B"),  # the first repeat in list order, spelled as listed
    (["n1", "n2", "n1", "n2"], "n1"),
])
def test_repeated_host(hosts: list[str], twice: str | None) -> None:
    assert repeated_host(hosts) == twice


def test_repeated_host_in_4096_entries() -> None:
    hosts = [f"n{i:04d}" for i in range(1, 4097)]
    assert repeated_host(hosts) is None
    assert repeated_host([*hosts, "N2048"]) == "N2048"
    assert repeated_host([*hosts[:100], "n0050", *hosts[100:]]) == "n0050"
    upper = [host.upper() for host in hosts]
    assert repeated_host(upper) is None
    assert repeated_host([*upper, "n4096"]) == "n4096"


@pytest.mark.parametrize(("host", "expected"), [
    ("main1..", HOSTNAME_EXPECTED), (".", HOSTNAME_EXPECTED),
    (".".join(["a" * 63] * 3 + ["a" * 62]) + ".", HOSTNAME_EXPECTED),  # 254 before the dot
    ("10.0.0.1.", "a host name or an IPv4 address (four numbers 0-255)"),
])
def test_host_problem_trailing_dot_refused_beyond_one_name(host: str, expected: str) -> None:
    assert host_problem(host) == expected


def test_host_key_is_how_dns_compares() -> None:
    from derive_env.hosts import host_key

    assert host_key("Main1.") == host_key("main1") == "main1"
