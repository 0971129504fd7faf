"""socket-ifname: GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME from synthetic routing tables."""

from __future__ import annotations

import ipaddress

import pytest

from derive_env.errors import LabelError
from derive_env.frameworks import HostFacts
from derive_env.frameworks.network import route_interface
from derive_env.labels import PREFIX
from derive_env.pipeline import derive

IFNAME = PREFIX + "socket-ifname"
HEADER = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"


def _le(address: str) -> str:
    """An IPv4 address as /proc/net/route prints it: host-order (little-endian) hex."""
    return int(ipaddress.IPv4Address(address)).to_bytes(4, "little").hex().upper()


def v4(iface: str, network: str, *, metric: int = 0, up: bool = True, gateway: str = "0.0.0.0"
       ) -> str:
    net = ipaddress.IPv4Network(network)
    flags = (0x1 if up else 0) | (0x2 if gateway != "0.0.0.0" else 0)
    return (f"{iface}\t{_le(str(net.network_address))}\t{_le(gateway)}\t{flags:04X}\t0\t0\t"
            f"{metric}\t{_le(str(net.netmask))}\t0\t0\t0")


def v4_table(*lines: str) -> str:
    return "\n".join([HEADER, *lines]) + "\n"


def v6(iface: str, network: str, *, metric: int = 256, flags: int = 0x1) -> str:
    net = ipaddress.IPv6Network(network)
    zero = "0" * 32
    return (f"{int(net.network_address):032x} {net.prefixlen:02x} {zero} 00 {zero} "
            f"{metric:08x} 00000001 00000000 {flags:08x} {iface:>8}")


def inet6(address: str, iface: str) -> str:
    return f"{int(ipaddress.IPv6Address(address)):032x} 02 40 00 80 {iface:>8}"


def facts(**kwargs) -> HostFacts:
    return HostFacts(**kwargs)


# --- the synthetic text itself matches what the kernel prints -------------------------------


def test_helper_matches_kernel_format() -> None:
    assert v4("eth0", "10.0.0.0/24") == "eth0\t0000000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0"
    assert v4("eth0", "0.0.0.0/0", gateway="172.17.0.1") == (
        "eth0\t00000000\t010011AC\t0003\t0\t0\t0\t00000000\t0\t0\t0")


# --- route_interface, IPv4 ------------------------------------------------------------------

LITERAL_V4 = (
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    "eth0\t00000000\t010012AC\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
    "eth0\t000012AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
    "baimulti0\t000A000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
)


@pytest.mark.parametrize(("address", "iface"), [
    ("10.0.10.7", "baimulti0"),   # 10.0.10.0/24
    ("172.18.3.4", "eth0"),       # 172.18.0.0/16
    ("8.8.8.8", "eth0"),          # default route
])
def test_literal_proc_net_route(address: str, iface: str) -> None:
    assert route_interface(address, facts(routes_v4=LITERAL_V4)) == iface


@pytest.mark.parametrize(("address", "iface"), [
    ("10.1.2.3", "eth2"),
    ("10.2.0.1", "eth1"),
    ("192.0.2.1", "eth0"),
])
def test_longest_prefix_wins(address: str, iface: str) -> None:
    table = v4_table(
        v4("eth0", "0.0.0.0/0", gateway="192.168.0.1"),
        v4("eth1", "10.0.0.0/8"),
        v4("eth2", "10.1.0.0/16"),
    )
    assert route_interface(address, facts(routes_v4=table)) == iface


def test_lowest_metric_wins_for_same_prefix() -> None:
    table = v4_table(v4("eth0", "10.0.0.0/24", metric=100), v4("eth1", "10.0.0.0/24", metric=10),
                     v4("eth2", "10.0.0.0/24", metric=50))
    assert route_interface("10.0.0.9", facts(routes_v4=table)) == "eth1"


def test_longer_prefix_beats_lower_metric() -> None:
    table = v4_table(v4("eth0", "10.0.0.0/8", metric=0), v4("eth1", "10.0.0.0/24", metric=500))
    assert route_interface("10.0.0.9", facts(routes_v4=table)) == "eth1"


def test_down_routes_ignored() -> None:
    table = v4_table(v4("eth1", "10.0.0.0/8"), v4("eth2", "10.1.0.0/16", up=False))
    assert route_interface("10.1.2.3", facts(routes_v4=table)) == "eth1"


@pytest.mark.parametrize("table", [
    "", HEADER, v4_table(v4("eth0", "10.0.0.0/8")), v4_table(v4("eth0", "0.0.0.0/0", up=False)),
])
def test_no_route(table: str) -> None:
    assert route_interface("192.0.2.1", facts(routes_v4=table)) is None


def test_malformed_lines_skipped() -> None:
    table = v4_table("garbage", "eth9\tZZZZZZZZ\t0\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0",
                     "short line", v4("eth1", "10.0.0.0/8"))
    assert route_interface("10.9.9.9", facts(routes_v4=table)) == "eth1"


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.1.1", "::1"])
def test_loopback_goes_through_lo(address: str) -> None:
    assert route_interface(address, facts()) == "lo"


# --- route_interface, IPv6 ------------------------------------------------------------------

V6_ROUTES = "\n".join([
    v6("eth0", "2001:db8::/32"),
    v6("eth1", "2001:db8:1::/48"),
    v6("eth1", "2001:db8:2::/48", flags=0x0),                    # down
    v6("eth2", "::/0", metric=1024, flags=0x3),                  # default via gateway
    v6("lo", "2001:db8:1::10/128", metric=0, flags=0x80200001),  # local table
    v6("lo", "::/0", metric=0xFFFFFFFF, flags=0x00200200),       # unreachable, not up
]) + "\n"


@pytest.mark.parametrize(("address", "iface"), [
    ("2001:db8:1::5", "eth1"),
    ("2001:db8:2::5", "eth0"),   # the /48 is down: the /32
    ("2001:db8:ffff::1", "eth0"),
    ("2001:4860::1", "eth2"),    # default route
    ("2001:db8:1::10", "eth1"),  # lo route skipped: the /48
])
def test_ipv6_routes(address: str, iface: str) -> None:
    assert route_interface(address, facts(routes_v6=V6_ROUTES)) == iface


def test_ipv6_own_address_maps_to_its_interface() -> None:
    own = inet6("2001:db8:1::10", "baimulti0") + "\n" + inet6("fe80::1", "eth0") + "\n"
    assert route_interface("2001:db8:1::10", facts(routes_v6=V6_ROUTES, addresses_v6=own)) == (
        "baimulti0")


def test_ipv6_no_route() -> None:
    table = v6("eth0", "2001:db8::/32") + "\n"
    assert route_interface("2001:4860::1", facts(routes_v6=table)) is None


def test_ipv6_metric() -> None:
    table = "\n".join([v6("eth0", "fd00::/8", metric=0x400), v6("eth1", "fd00::/8", metric=0x100)])
    assert route_interface("fd00::9", facts(routes_v6=table)) == "eth1"


# --- derive with host facts -----------------------------------------------------------------

ROUTES = v4_table(v4("eth0", "0.0.0.0/0", gateway="172.17.0.1"), v4("eth0", "172.17.0.0/16"),
                  v4("baimulti0", "198.18.0.0/24"))
NAMES = {"main1": ("198.18.0.10",), "sub1": ("198.18.0.11",), "sub2": ("198.18.0.12",)}
NO_OVERLAY = ("lo", "eth0")


def host_facts(*, interfaces=("lo", "eth0", "baimulti0"), names=None, hostname="sub1",
               routes=ROUTES) -> HostFacts:
    table = NAMES if names is None else names
    return HostFacts(interfaces=interfaces, routes_v4=routes, hostname=hostname,
                     resolve=lambda names: {name: table.get(name, ()) for name in names})


def run(environ, labels, host_facts_: HostFacts | None):
    derivation = derive(environ, labels, host_facts_)
    assert derivation is not None
    network = {v.name: v for v in derivation.variables if v.framework == "network"}
    return network, list(derivation.warnings)


@pytest.fixture
def sub1(backendai_env) -> dict[str, str]:
    return backendai_env(["sub2", "sub1", "main1"], "sub1")


def test_auto_routes_to_master(sub1, opt_in) -> None:
    # Changed by issue 6 item 6: auto prefers baimulti0 itself, before the route rule.
    network, warnings = run(sub1, {**opt_in, IFNAME: "auto"}, host_facts())
    assert {k: v.value for k, v in network.items()} == {
        "GLOO_SOCKET_IFNAME": "baimulti0", "NCCL_SOCKET_IFNAME": "baimulti0"}
    assert network["GLOO_SOCKET_IFNAME"].source == (
        "label ai.backend.distributed.socket-ifname=auto: baimulti0, Backend.AI's multi-node "
        "overlay")
    assert warnings == []


def test_auto_route_rule_without_overlay(sub1, opt_in) -> None:
    routes = ROUTES.replace("baimulti0", "eth1")
    network, warnings = run(sub1, {**opt_in, IFNAME: "auto"},
                            host_facts(interfaces=("lo", "eth0", "eth1"), routes=routes))
    assert {k: (v.value, v.source) for k, v in network.items()} == {
        name: ("eth1", "label ai.backend.distributed.socket-ifname=auto: route to the master "
                       "main1 (198.18.0.10)")
        for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")}
    assert warnings == []


def test_auto_follows_user_master_addr(sub1, opt_in) -> None:
    env = {**sub1, "MASTER_ADDR": "172.17.0.5"}
    network, _ = run(env, {**opt_in, IFNAME: "auto"}, host_facts(interfaces=NO_OVERLAY))
    assert network["NCCL_SOCKET_IFNAME"].value == "eth0"


def test_auto_skips_route_through_missing_interface(sub1, opt_in) -> None:
    network, warnings = run(sub1, {**opt_in, IFNAME: "auto"}, host_facts(interfaces=("lo", "eth0")))
    assert network == {}
    assert warnings == [
        "label ai.backend.distributed.socket-ifname=auto: no interface routes to the master "
        "'main1' (resolved: 198.18.0.10); GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME not set"
    ]


def test_auto_without_route(sub1, opt_in) -> None:
    network, warnings = run(sub1, {**opt_in, IFNAME: "auto"},
                            host_facts(interfaces=NO_OVERLAY, routes=HEADER + "\n"))
    assert network == {}
    assert warnings == [
        "label ai.backend.distributed.socket-ifname=auto: no interface routes to the master "
        "'main1' (resolved: 198.18.0.10); GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME not set"
    ]


def test_auto_master_not_resolvable(sub1, opt_in) -> None:
    network, warnings = run(sub1, {**opt_in, IFNAME: "auto"},
                            host_facts(interfaces=NO_OVERLAY, names={"sub1": NAMES["sub1"]}))
    assert network == {}
    assert warnings == [
        "label ai.backend.distributed.socket-ifname=auto: no interface routes to the master "
        "'main1' (resolved: not resolvable); GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME not set"
    ]


def test_explicit_interface(sub1, opt_in) -> None:
    network, _ = run(sub1, {**opt_in, IFNAME: "eth0"}, host_facts())
    assert {k: (v.value, v.source) for k, v in network.items()} == {
        "GLOO_SOCKET_IFNAME": ("eth0", "label ai.backend.distributed.socket-ifname"),
        "NCCL_SOCKET_IFNAME": ("eth0", "label ai.backend.distributed.socket-ifname"),
    }


def test_explicit_interface_not_present(sub1, opt_in) -> None:
    with pytest.raises(LabelError) as info:
        derive(sub1, {**opt_in, IFNAME: "ib0"}, host_facts())
    assert str(info.value) == (
        "label ai.backend.distributed.socket-ifname='ib0': expected 'auto' or an interface of "
        "this container (lo, eth0, baimulti0)"
    )


LOOPBACK_WARNING = (
    "this container's host name 'sub1' resolves only to loopback (127.0.1.1): gloo and "
    "NCCL would advertise it to the other nodes, which cannot reach it; fix /etc/hosts or "
    "set GLOO_SOCKET_IFNAME"
)


def test_loopback_warning_when_no_interface_hint(sub1, opt_in) -> None:
    names = {**NAMES, "sub1": ("127.0.1.1",)}
    network, warnings = run(sub1, {**opt_in, IFNAME: "auto"},
                            host_facts(interfaces=NO_OVERLAY, names=names, routes=HEADER + "\n"))
    assert network == {}
    assert warnings == [
        "label ai.backend.distributed.socket-ifname=auto: no interface routes to the master "
        "'main1' (resolved: 198.18.0.10); GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME not set",
        LOOPBACK_WARNING,
    ]


def test_no_loopback_warning_when_interface_set(sub1, opt_in) -> None:
    """With GLOO_SOCKET_IFNAME set, gloo advertises that interface's address, not the name's."""
    names = {**NAMES, "sub1": ("127.0.1.1",)}
    network, warnings = run(sub1, {**opt_in, IFNAME: "eth0"}, host_facts(names=names))
    assert network["GLOO_SOCKET_IFNAME"].value == "eth0"
    assert warnings == []


def test_no_loopback_warning_when_user_set_interface(sub1, opt_in) -> None:
    names = {**NAMES, "sub1": ("127.0.1.1",)}
    env = {**sub1, "GLOO_SOCKET_IFNAME": "eth0"}
    _, warnings = run(env, {**opt_in, IFNAME: "auto"},
                      host_facts(interfaces=NO_OVERLAY, names=names, routes=HEADER + "\n"))
    assert LOOPBACK_WARNING not in warnings


def test_no_loopback_warning_with_a_routable_address(sub1, opt_in) -> None:
    names = {**NAMES, "sub1": ("127.0.1.1", "198.18.0.11")}
    _, warnings = run(sub1, {**opt_in, IFNAME: "auto"},
                      host_facts(interfaces=NO_OVERLAY, names=names, routes=HEADER + "\n"))
    assert LOOPBACK_WARNING not in warnings


def test_no_loopback_warning_in_single_container(opt_in) -> None:
    names = {"sub1": ("127.0.0.1",), "127.0.0.1": ("127.0.0.1",)}
    network, warnings = run({}, {**opt_in, IFNAME: "auto"}, host_facts(names=names))
    assert warnings == []
    assert network["GLOO_SOCKET_IFNAME"].value == "lo"


def test_nothing_without_label(sub1, opt_in) -> None:
    network, warnings = run(sub1, opt_in,
                            host_facts(interfaces=NO_OVERLAY, names={"sub1": ("127.0.1.1",)}))
    assert (network, warnings) == ({}, [])


def test_nothing_without_facts_but_a_note(sub1, opt_in) -> None:
    derivation = derive(sub1, {**opt_in, IFNAME: "auto"}, None)
    assert derivation is not None
    assert [v for v in derivation.variables if v.framework == "network"] == []
    assert derivation.warnings == ()
    assert (
        "GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME: label ai.backend.distributed.socket-ifname="
        "auto is decided in the container at start, from its own interfaces and routes (not "
        "shown here)"
    ) in derivation.notes


def test_user_set_ifname_kept(sub1, opt_in) -> None:
    derivation = derive({**sub1, "GLOO_SOCKET_IFNAME": "eth0"}, {**opt_in, IFNAME: "auto"},
                        host_facts())
    assert derivation is not None
    assert derivation.changes()["NCCL_SOCKET_IFNAME"] == "baimulti0"
    assert "GLOO_SOCKET_IFNAME" not in derivation.changes()
