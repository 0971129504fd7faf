"""No ``baimulti0`` in Backend.AI's container: the interface default follows the route to the
master (frameworks/network.py ``_route_default``; the edge's part: cli ``gather_facts``).

A session on a project's persistent network joins it in bridge mode (lablup/backend.ai#14133):
the container has no ``baimulti0``; here its eth0 is the gateway bridge (the default route)
and eth1 the persistent network holding the session's containers.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from derive_env import cli
from derive_env.frameworks import network
from derive_env.frameworks.context import HostFacts
from derive_env.pipeline import derive
from derive_env.render.explain import explain

HEADER = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"


def _le(address: str) -> str:
    """An IPv4 address as /proc/net/route prints it: host-order (little-endian) hex."""
    return ipaddress.IPv4Address(address).packed[::-1].hex().upper()


def v4(iface: str, network: str, gateway: str = "0.0.0.0") -> str:
    """One line of /proc/net/route: up, RTF_GATEWAY with a gateway, metric 0."""
    net = ipaddress.IPv4Network(network)
    flags = 0x3 if gateway != "0.0.0.0" else 0x1
    return (f"{iface}\t{_le(str(net.network_address))}\t{_le(gateway)}\t{flags:04X}\t0\t0\t0"
            f"\t{_le(str(net.netmask))}\t0\t0\t0")


def v4_table(*lines: str) -> str:
    return "\n".join([HEADER, *lines]) + "\n"

ROUTES = v4_table(v4("eth0", "0.0.0.0/0", gateway="172.30.0.1"), v4("eth0", "172.30.0.0/16"),
                  v4("eth1", "10.20.0.0/24"))
NAMES = {"main1": ("10.20.0.5",), "sub1": ("10.20.0.6",), "sub2": ("10.20.0.7",)}
WHY = ("default: no baimulti0 in this Backend.AI container (a Backend.AI session on a "
       "project's persistent network, or Docker before 28)")
CHOSEN = (f"{WHY}: the interface of the route to the master main1 (10.20.0.5), as label "
          "ai.backend.distributed.socket-ifname=auto (label "
          "ai.backend.distributed.socket-ifname=none turns this off)")


def facts(names=NAMES, routes=ROUTES, interfaces=("eth0", "eth1", "lo")) -> HostFacts:
    return HostFacts(interfaces=interfaces, routes_v4=routes, hostname="sub1",
                     resolve=lambda wanted: {n: names.get(n, ()) for n in wanted})


def network_of(environ, labels, host: HostFacts | None):
    derivation = derive(environ, labels, host)
    assert derivation is not None
    return ({v.name: (v.value, v.provenance) for v in derivation.variables
             if v.framework == "network"}, list(derivation.warnings), derivation)


@pytest.fixture
def sub1(backendai_env) -> dict[str, str]:
    return backendai_env(["sub2", "sub1", "main1"], "sub1")


@pytest.mark.parametrize("host", ["sub1", "main1"])
def test_route_to_the_master_without_baimulti0(backendai_env, opt_in, host) -> None:
    """Every container, main1 too (its own address routes through eth1 in the main table),
    takes eth1, the persistent network, not eth0, the gateway bridge."""
    env = backendai_env(["sub2", "sub1", "main1"], host)
    found, warnings, _ = network_of(env, opt_in, facts())
    assert found == {"GLOO_SOCKET_IFNAME": ("eth1", CHOSEN), "NCCL_SOCKET_IFNAME": ("eth1", CHOSEN)}
    assert warnings == []


def test_the_reason_is_in_explain(sub1, opt_in) -> None:
    text = explain(network_of(sub1, opt_in, facts())[2])
    assert f"GLOO_SOCKET_IFNAME = eth1\n                     source: {CHOSEN}\n" in text


def test_master_not_resolved_warns_and_sets_nothing(sub1, opt_in) -> None:
    found, warnings, _ = network_of(sub1, opt_in, facts(names={}))
    assert found == {}
    assert warnings == [
        f"{WHY}: no route to the master 'main1' (resolved: nothing within 5 s); "
        "GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME not set, so NCCL may choose another "
        "bridge: name the interface in label ai.backend.distributed.socket-ifname"]


def test_never_loopback(sub1, opt_in) -> None:
    """A master that routes through lo only (no route to 10.20.0.5): nothing set."""
    only_lo = v4_table(v4("lo", "10.20.0.0/24"))
    found, warnings, _ = network_of(sub1, opt_in, facts(routes=only_lo))
    assert found == {}
    assert warnings == [f"{WHY}: no route to the master 'main1' (resolved: 10.20.0.5); "
                        "GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME not set, so NCCL may choose "
                        "another bridge: name the interface in label "
                        "ai.backend.distributed.socket-ifname"]


def test_baimulti0_still_first(sub1, opt_in) -> None:
    found, _, _ = network_of(sub1, opt_in, facts(interfaces=("baimulti0", "eth0", "eth1", "lo")))
    assert {k: v[0] for k, v in found.items()} == dict.fromkeys(network.VARIABLES, "baimulti0")


@pytest.mark.parametrize("user", [{"GLOO_SOCKET_IFNAME": "eth0"}, {"NCCL_SOCKET_IFNAME": "^lo"}])
def test_not_when_the_user_chose(sub1, opt_in, user) -> None:
    assert network_of({**sub1, **user}, opt_in, facts())[:2] == ({}, [])


def test_only_on_backendai(opt_in) -> None:
    """The same routes in another manager's container (SageMaker): no default, as before."""
    sagemaker = {"SM_HOSTS": '["algo-1", "algo-2"]', "SM_CURRENT_HOST": "algo-2"}
    found, _, derivation = network_of(sagemaker, opt_in, facts(names={"algo-1": ("10.20.0.5",)}))
    assert derivation.topology.source == "sagemaker"
    assert found == {}


def test_no_routes_read_means_no_default(sub1, opt_in) -> None:
    """The edge read no routes (outside Backend.AI's container): nothing, as before."""
    assert network_of(sub1, opt_in, HostFacts(interfaces=("eth0",), routes_v4=""))[:2] == ({}, [])
    assert network_of(sub1, opt_in, facts(routes=HEADER + "\n"))[0] == {}


@pytest.mark.parametrize(("environ", "wanted"), [
    ({"BACKENDAI_CLUSTER_SIZE": "3"}, True),
    ({"BACKENDAI_CLUSTER_SIZE": " 2 "}, True),
    ({"BACKENDAI_CLUSTER_SIZE": "1"}, False),
    ({"BACKENDAI_CLUSTER_SIZE": "three"}, False),
    ({}, False),
    ({"BACKENDAI_CLUSTER_SIZE": "3", "NCCL_SOCKET_IFNAME": "eth0"}, False),
])
def test_route_default_wanted(environ, wanted) -> None:
    assert network.route_default_wanted(environ) is wanted


def test_the_edge_reads_the_routes_only_in_backendai_container(
        sub1, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gather_facts without the label: the routes only with Backend.AI's /home/config
    file (here a stand-in) in a session of more than one container."""
    if Path("/sys/class/net/baimulti0").exists():
        pytest.skip("this host has baimulti0")
    marker = tmp_path / "environ.txt"
    monkeypatch.setattr(network, "BACKENDAI_MARKER", str(marker))
    assert cli.gather_facts(False, sub1).routes_v4 == ""
    marker.write_text("")
    read = cli.gather_facts(False, sub1)
    assert read.routes_v4 == Path("/proc/net/route").read_text()
    assert "lo" in read.interfaces
    assert cli.gather_facts(False, {**sub1, "BACKENDAI_CLUSTER_SIZE": "1"}).routes_v4 == ""
