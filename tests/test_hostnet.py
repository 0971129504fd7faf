"""hostnet.py: the kernel's network tables parsed, exactly, on tables recorded in a simulated
container (tests/data/netns-gwbridge) and on the lines the parsers must skip."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from derive_env.hostnet import Route, local_v4, own_address, own_v6, routes_v4, routes_v6

RECORDED = Path(__file__).parent / "data" / "netns-gwbridge"
HEADER = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"
IP, NET = ipaddress.ip_address, ipaddress.ip_network


def test_recorded_route_table() -> None:
    assert routes_v4((RECORDED / "route").read_text()) == [
        Route(NET("0.0.0.0/0"), 0, "eth1", True, IP("198.18.1.1")),
        Route(NET("198.18.0.0/24"), 0, "eth0", False, IP("0.0.0.0")),
        Route(NET("198.18.1.0/24"), 0, "eth1", False, IP("0.0.0.0")),
    ]


def test_route_lines_down_short_or_not_hex_are_skipped() -> None:
    text = "\n".join([
        HEADER,
        "eth0\t000012C6\t00000000\t0000\t0\t0\t0\t00FFFFFF",      # not up
        "eth0\t000012C6\t00000000\t0001\t0\t0\t0",                # too few fields
        "eth0\tXX0012C6\t00000000\t0001\t0\t0\t0\t00FFFFFF",      # destination not hex
        "eth0\t000012C6\t00000000\t0001\t0\t0\tfive\t00FFFFFF",   # metric not a number
        "eth2\t000012C6\tZZ\t0001\t0\t0\t7\t0000FFFF",            # gateway not hex: kept
    ])
    assert routes_v4(text) == [Route(NET("198.18.0.0/16"), 7, "eth2", False, None)]
    assert routes_v4("") == []


def test_ipv6_routes_and_own_addresses() -> None:
    zero = "0" * 32
    up = (f"fd000001000000000000000000000000 40 {zero} 00 {zero} 00000100 00000001 00000000 "
          "00000001 eth0")
    via = f"{zero} 00 {zero} 00 fe80{'0' * 28} 00000400 00000001 00000000 00000003 eth1"
    down = f"fd000002000000000000000000000000 40 {zero} 00 {zero} 00000100 0 0 00000000 eth0"
    assert routes_v6("\n".join([up, via, down, "short line", "zz " * 10])) == [
        Route(NET("fd00:1::/64"), 256, "eth0", False),
        Route(NET("::/0"), 1024, "eth1", True),
    ]
    inet6 = ("20010db8000000000000000000000011 02 40 00 80     eth3\n"
             "00000000000000000000000000000001 01 80 10 80       lo\nnot hex 1 2 3 4 5\n")
    assert own_v6(inet6) == {IP("2001:db8::11"): "eth3", IP("::1"): "lo"}


def test_local_addresses_in_order_once_each() -> None:
    fib_trie = (RECORDED / "fib_trie").read_text()
    assert local_v4(fib_trie) == (IP("127.0.0.1"), IP("198.18.0.11"), IP("198.18.1.2"))
    twice = "|-- 10.0.0.2\n   /32 host LOCAL\n|-- 10.0.0.1\n   /32 host LOCAL\n" * 2
    assert local_v4(twice) == (IP("10.0.0.2"), IP("10.0.0.1"))
    assert local_v4("") == ()
    assert local_v4("|-- 999.1.1.1\n   /32 host LOCAL\n") == ()
    # a LOCAL line belongs to the leaf above it only while no other line came between
    assert local_v4("|-- 10.0.0.3\n  +-- 10.0.0.0/8 2 0 2\n   /32 host LOCAL\n") == ()


def test_own_address_is_the_default_routes_source() -> None:
    """The recorded container's default route leaves by eth1, whose subnet holds 198.18.1.2;
    of two default routes the lower metric wins, and the address on its gateway's subnet."""
    recorded = [(RECORDED / name).read_text() for name in ("route", "fib_trie")]
    assert own_address(*recorded) == (
        "198.18.1.2", "the source address of the default route (via eth1)")
    text = "\n".join([HEADER, "eth1\t00000000\t0100A8C0\t0003\t0\t0\t100\t00000000",
                      "eth0\t00000000\t0100000A\t0003\t0\t0\t3\t00000000",
                      "eth0\t0000000A\t00000000\t0001\t0\t0\t1\t00F0FFFF",
                      "eth1\t0000A8C0\t00000000\t0001\t0\t0\t1\t00FFFFFF"])
    trie = "|-- 192.168.0.5\n   /32 host LOCAL\n|-- 10.0.1.17\n   /32 host LOCAL\n"
    assert own_address(text, trie) == (
        "10.0.1.17", "the source address of the default route (via eth0)")
