"""derive-env check, the pure part: every check's verdict and message, the master's
comparison of name resolutions, the table exactly as printed, the rows on the wire."""

from __future__ import annotations

import ipaddress

import pytest

from derive_env.frameworks.context import HostFacts
from derive_env.pipeline import derive
from derive_env.preflight import (
    NOT_CHECKED,
    Cell,
    Row,
    check_iface,
    check_name,
    check_peers,
    compare_resolutions,
    failed,
    job_key,
    judge,
    own_addresses,
    passed,
    plan_of,
    row_from_wire,
    row_to_wire,
    table,
    title,
    verdict,
    wanted_interfaces,
)

HEADER = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"


def _le(address: str) -> str:
    return int(ipaddress.IPv4Address(address)).to_bytes(4, "little").hex().upper()


def v4(iface: str, network: str, gateway: str = "0.0.0.0") -> str:
    """One line of /proc/net/route."""
    net = ipaddress.IPv4Network(network)
    flags = 0x1 | (0x2 if gateway != "0.0.0.0" else 0)
    return (f"{iface}\t{_le(str(net.network_address))}\t{_le(gateway)}\t{flags:04X}\t0\t0\t0\t"
            f"{_le(str(net.netmask))}\t0\t0\t0")


def trie(*addresses: str) -> str:
    """/proc/net/fib_trie's local entries for ``addresses``."""
    return "".join(f"     |-- {a}\n        /32 host LOCAL\n" for a in addresses)


#: sub1 of the simulated session: eth0 198.18.0.11/24, and a docker_gwbridge look-alike eth1
#: 198.18.1.2/24 holding the default route.
SUB1 = HostFacts(
    interfaces=("eth0", "eth1", "lo"),
    routes_v4="\n".join([HEADER, v4("eth1", "0.0.0.0/0", "198.18.1.1"),
                         v4("eth0", "198.18.0.0/24"), v4("eth1", "198.18.1.0/24")]) + "\n",
    local_v4=trie("127.0.0.1", "198.18.0.11", "198.18.1.2"),
    addresses_v6="00000000000000000000000000000001 01 80 10 80       lo\n",
    hostname="sub1",
)
PEERS = [("main1", "198.18.0.10"), ("sub2", "198.18.0.12")]


def test_own_addresses_name_the_interface_holding_each() -> None:
    assert own_addresses(SUB1) == {"127.0.0.1": "lo", "198.18.0.11": "eth0",
                                   "198.18.1.2": "eth1", "::1": "lo"}


def test_name_passes_on_an_address_this_node_holds() -> None:
    own = list(own_addresses(SUB1))
    assert check_name("sub1", ["198.18.0.11"], own) == passed("198.18.0.11")
    assert check_name("sub1", [], own) == failed("sub1 does not resolve on sub1")
    assert check_name("sub1", ["127.0.1.1"], own) == failed(
        "sub1 resolves only to loopback (127.0.1.1) on sub1: gloo would advertise it to the "
        "other nodes, which cannot reach it")
    assert check_name("sub1", ["198.18.0.99"], own) == failed(
        "sub1 resolves to 198.18.0.99, not an address of sub1 (198.18.0.11, 198.18.1.2)")
    assert check_name("localhost", ["127.0.0.1"], own, single=True) == passed("127.0.0.1")


def test_name_of_a_kernel_host_name_names_the_node_it_belongs_to() -> None:
    """The row shows node n2; the name checked is its kernel host name vm (a Slurm node
    name that is not the host name): the message says whose name it is."""
    own = list(own_addresses(SUB1))
    assert check_name("vm", [], own, node="n2") == failed(
        "n2's own host name vm does not resolve on n2")
    assert check_name("vm", ["127.0.1.1"], own, node="n2") == failed(
        "n2's own host name vm resolves only to loopback (127.0.1.1) on n2: gloo would "
        "advertise it to the other nodes, which cannot reach it")
    assert check_name("vm", ["198.18.0.99"], own, node="n2") == failed(
        "n2's own host name vm resolves to 198.18.0.99, not an address of n2 (198.18.0.11, "
        "198.18.1.2)")


def test_peers_must_resolve_to_something_else_than_loopback() -> None:
    resolved = {"main1": ("198.18.0.10",), "sub2": ("127.0.0.1",)}
    assert check_peers("sub1", ["main1"], resolved) == passed("ok")
    assert check_peers("sub1", ["main1", "sub2", "sub3"], resolved) == failed(
        "sub1 resolves sub2 to loopback (127.0.0.1); sub3 does not resolve on sub1")
    assert check_peers("sub1", [], resolved) is NOT_CHECKED


@pytest.mark.parametrize(("variable", "value", "expected"), [
    ("GLOO_SOCKET_IFNAME", "eth0,eth1", ["eth0", "eth1"]),
    ("GLOO_SOCKET_IFNAME", "eth", ["eth"]),          # gloo: exact names only
    ("NCCL_SOCKET_IFNAME", "eth", ["eth0", "eth1"]),  # NCCL: prefixes
    ("NCCL_SOCKET_IFNAME", "=eth", ["eth"]),          # NCCL: = exact
    ("NCCL_SOCKET_IFNAME", "ib", ["ib"]),             # matches nothing: kept, reported missing
    ("NCCL_SOCKET_IFNAME", "^docker,lo", None),       # exclusion: not checked
])
def test_interfaces_as_gloo_and_nccl_read_them(variable, value, expected) -> None:
    assert wanted_interfaces(variable, value, ("eth0", "eth1", "lo")) == expected


def test_iface_reaches_every_peer() -> None:
    settings = {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth"}
    assert check_iface(settings, SUB1, ("sub1", ["198.18.0.11"]), PEERS) == passed("eth0,eth1")
    assert check_iface({"GLOO_SOCKET_IFNAME": "eth1"}, SUB1, ("sub1", []), PEERS) == failed(
        "GLOO_SOCKET_IFNAME=eth1: eth1 (198.18.1.0/24) does not reach main1 (198.18.0.10) on "
        "sub1: the kernel routes it through eth0")
    assert check_iface({"GLOO_SOCKET_IFNAME": "eth9"}, SUB1, ("sub1", []), PEERS) == failed(
        "GLOO_SOCKET_IFNAME=eth9: no interface eth9 on sub1 (eth0, eth1, lo)")
    bare = SUB1._replace(interfaces=("eth0", "eth1", "eth2", "lo"))
    assert check_iface({"NCCL_SOCKET_IFNAME": "=eth2"}, bare, ("sub1", []), PEERS) == failed(
        "NCCL_SOCKET_IFNAME==eth2: eth2 holds no address on sub1")


def test_iface_without_a_variable_is_the_one_holding_the_host_name() -> None:
    assert check_iface({}, SUB1, ("sub1", ["198.18.0.11"]), PEERS) == passed("eth0")
    assert check_iface({}, SUB1, ("sub1", ["198.18.1.2"]), PEERS) == failed(
        "eth1, holding sub1's address (no GLOO_SOCKET_IFNAME): eth1 (198.18.1.0/24) does not "
        "reach main1 (198.18.0.10) on sub1: the kernel routes it through eth0")
    assert check_iface({}, SUB1, ("sub1", ["127.0.1.1"]), PEERS) is NOT_CHECKED
    assert check_iface({"NCCL_SOCKET_IFNAME": "^lo"}, SUB1, ("sub1", []), PEERS) is NOT_CHECKED


OK_CELLS = {"name": passed("198.18.0.1x"), "peers": passed("ok"), "port": passed("connected"),
            "iface": passed("eth0")}
NAMES = {"main1": ("198.18.0.10",), "sub1": ("198.18.0.11",), "sub2": ("198.18.0.12",)}


def row(rank: int, host: str, resolved=NAMES, **cells: Cell) -> Row:
    name = passed(NAMES[host][0])
    port = passed("listening" if rank == 0 else "connected")
    return Row(str(rank), host, {**OK_CELLS, "name": name, "port": port, **cells}, resolved,
               (NAMES[host][0], "127.0.0.1"))


EXPECTED = (("0", "main1"), ("1", "sub1"), ("2", "sub2"))
HEALTHY = [row(0, "main1"), row(1, "sub1"), row(2, "sub2")]
SUB1_SEES_99 = {**NAMES, "sub2": ("198.18.0.99",)}


def test_a_name_one_node_resolves_otherwise_is_named() -> None:
    rows = [row(0, "main1"), row(1, "sub1", SUB1_SEES_99), row(2, "sub2")]
    assert compare_resolutions(rows) == {
        "sub1": ["sub1 resolves sub2 to 198.18.0.99, the others to 198.18.0.12"]}
    assert compare_resolutions(HEALTHY) == {}


def test_two_nodes_that_disagree_the_named_node_decides() -> None:
    rows = [row(0, "main1"), row(2, "sub2", {**NAMES, "main1": ("198.18.0.77",)})]
    assert compare_resolutions(rows) == {
        "sub2": ["sub2 resolves main1 to 198.18.0.77, the others to 198.18.0.10"]}
    # sub3 has no row: neither address is known to be its own, and it is a tie
    rows = [row(0, "main1", {"sub3": ("10.0.0.1",)}), row(1, "sub1", {"sub3": ("10.0.0.2",)})]
    assert compare_resolutions(rows) == {
        "main1": ["main1 resolves sub3 to 10.0.0.1, sub1 to 10.0.0.2"],
        "sub1": ["sub1 resolves sub3 to 10.0.0.2, main1 to 10.0.0.1"]}


HEALTHY_TABLE = """\
derive-env check: 3 nodes, master main1:29500, within 15 s
node  host   name         peers  port       iface
0     main1  198.18.0.10  ok     listening  eth0
1     sub1   198.18.0.11  ok     connected  eth0
2     sub2   198.18.0.12  ok     connected  eth0
all checks pass on 3 nodes
"""

FAILING_TABLE = """\
derive-env check: 3 nodes, master main1:29500, within 15 s
node  host   name         peers  port       iface
0     main1  198.18.0.10  ok     listening  eth0
1     sub1   198.18.0.11  FAIL   connected  eth0
2     sub2   198.18.0.12  ok     connected  eth0
sub1 peers: sub1 resolves sub2 to 198.18.0.99, the others to 198.18.0.12
FAILED: sub1 (peers)
"""

MISSING_TABLE = """\
derive-env check: 3 nodes, master main1:29500, within 15 s
node  host   name         peers  port       iface
0     main1  198.18.0.10  ok     listening  eth0
1     sub1   198.18.0.11  ok     connected  eth0
2     sub2   -            -      FAIL       -
sub2 port: sub2 did not report to the master (not started, or it cannot connect)
FAILED: sub2 (port)
"""


def _output(rows: list[Row]) -> str:
    judged = judge(rows, EXPECTED)
    return title(3, "nodes", "main1:29500", 15) + table(judged) + verdict(judged)[1] + "\n"


def test_the_master_prints_the_whole_table() -> None:
    assert _output(HEALTHY) == HEALTHY_TABLE
    assert verdict(judge(HEALTHY, EXPECTED)) == (True, "all checks pass on 3 nodes")
    assert _output([row(0, "main1"), row(1, "sub1", SUB1_SEES_99), row(2, "sub2")]) == (
        FAILING_TABLE)
    assert _output([row(0, "main1"), row(1, "sub1")]) == MISSING_TABLE


def test_a_large_job_shows_only_the_failing_rows() -> None:
    hosts = [f"n{i}" for i in range(70)]
    rows = [Row(str(i), h, OK_CELLS) for i, h in enumerate(hosts)]
    rows[5] = rows[5]._replace(cells={**OK_CELLS, "iface": failed("x")})
    assert table(rows) == ("node  host  name         peers  port       iface\n"
                           "5     n5    198.18.0.1x  ok     connected  FAIL\n"
                           "(69 more rows: every check passed)\n"
                           "n5 iface: x\n")
    assert verdict(rows) == (False, "FAILED: n5 (iface)")


def test_title_and_verdict_of_one_node_or_task() -> None:
    assert title(1, "nodes", "127.0.0.1:29500", 2.5) == (
        "derive-env check: 1 node, master 127.0.0.1:29500, within 2.5 s\n")
    assert title(6, "tasks", "[2001:db8::1]:29500", 15) == (
        "derive-env check: 6 tasks, master [2001:db8::1]:29500, within 15 s\n")
    assert verdict([HEALTHY[0]], "tasks") == (True, "all checks pass on 1 task")


def test_a_row_survives_the_wire_and_anything_else_is_refused() -> None:
    original = row(1, "sub1", SUB1_SEES_99, peers=failed("why"))
    assert row_from_wire(row_to_wire(original)) == original
    for bad in (None, [], {"label": 1}, {**row_to_wire(original), "cells": {"name": [2, "", None]}},
                {**row_to_wire(original), "own": None}):
        assert row_from_wire(bad) is None


def test_the_plan_of_every_node_of_a_session(backendai_env) -> None:
    labels = {"ai.backend.distributed.frameworks": "pytorch"}
    plans = {}
    for host in ("main1", "sub1", "sub2"):
        derivation = derive(backendai_env(["sub1", "main1", "sub2"], host), labels)
        job = {"MASTER_ADDR": "main1", "MASTER_PORT": "29500"}
        plans[host] = plan_of(derivation.topology, job, host)
    main, sub1 = plans["main1"], plans["sub1"]
    assert (main.per_task, main.label, main.host, main.leader) == (False, "0", "main1", True)
    assert (sub1.label, sub1.peers, sub1.names, sub1.leader) == (
        "1", ("main1", "sub2"), ("sub1", "main1", "sub2"), None)
    assert sub1.expected == EXPECTED
    assert len({p.key for p in plans.values()}) == 1
    assert sub1.is_master(["198.18.0.11"], ["198.18.0.10"]) is False
    assert sub1.is_master(["198.18.0.10"], ["198.18.0.10"]) is True


def test_a_pytorchjob_master_pod_given_localhost_has_the_workers_key() -> None:
    """The training operator (up to v1.3, pytorch.go setPodEnv) gives the master pod
    MASTER_ADDR=localhost and the workers <job>-master-0: one key, the master pod leads."""
    labels = {"ai.backend.distributed.frameworks": "pytorch"}
    plans = []
    for pod in range(3):
        host = "j-master-0" if pod == 0 else f"j-worker-{pod - 1}"
        env = {"MASTER_PORT": "23456", "MASTER_ADDR": "localhost" if pod == 0 else "j-master-0",
               "WORLD_SIZE": "3", "RANK": str(pod), "KUBERNETES_SERVICE_HOST": "10.96.0.1",
               "HOSTNAME": host}
        derivation = derive(env, labels)
        plans.append(plan_of(derivation.topology, {**env, **derivation.changes()}, host))
    assert len({p.key for p in plans}) == 1
    assert {p.master for p in plans} == {"j-master-0"}
    assert [p.leader for p in plans] == [True, False, False]
    assert plans[0].peers == ()


def test_the_plan_of_a_task_of_two_per_node() -> None:
    env = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_LOCALID": "1",
           "SLURM_NTASKS": "4", "SLURM_NNODES": "2", "SLURM_NODEID": "1",
           "SLURM_JOB_NODELIST": "c[1-2]", "SLURM_STEP_NODELIST": "c[1-2]",
           "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NUM_TASKS": "4",
           "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_TASKS_PER_NODE": "2(x2)",
           "SLURMD_NODENAME": "c2"}
    derivation = derive(env, {"ai.backend.distributed.frameworks": "pytorch"})
    plan = plan_of(derivation.topology, {"MASTER_ADDR": "c1", "MASTER_PORT": "29500"}, "c2")
    assert (plan.per_task, plan.label, plan.host, plan.peers, plan.leader, plan.what) == (
        True, "3", "c2", ("c1",), False, "tasks")
    assert plan.expected == (("0", "rank 0"), ("1", "rank 1"), ("2", "rank 2"), ("3", "c2"))


def test_the_job_key_tells_jobs_and_ports_apart() -> None:
    key = job_key("backendai", "s1", ("main1", 29500), 3)
    assert key == job_key("backendai", "s1", ("MAIN1", 29500), 3)
    assert len(key) == 16
    assert len({key, job_key("backendai", "s2", ("main1", 29500), 3),
                job_key("backendai", "s1", ("main1", 29501), 3),
                job_key("backendai", "s1", ("main1", 29500), 4)}) == 4


def test_the_operator_guide_shows_these_tables() -> None:
    """docs/operator-guide.md, section 8, shows the master's output of the e2e sessions
    (tests/e2e/test_e2e_check.py) with port 29500: kept equal to the renderer here."""
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[1] / "docs" / "operator-guide.md").read_text()
    for output in (HEALTHY_TABLE, FAILING_TABLE):
        assert f"```console\n$ on-every-node derive-env check\n{output}```\n" in guide


def test_the_plan_of_an_mpirun_rank_without_a_host_list() -> None:
    """Open MPI over SSH states ranks, not hosts: rows are tasks; rank 2 connects to h0."""
    env = {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "2",
           "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
           "OMPI_COMM_WORLD_NODE_RANK": "2", "MASTER_ADDR": "h0", "MASTER_PORT": "29500"}
    derivation = derive(env, {"ai.backend.distributed.frameworks": "pytorch"})
    plan = plan_of(derivation.topology, {**env, **derivation.changes()}, "h2")
    assert (plan.per_task, plan.label, plan.host, plan.peers, plan.names, plan.leader) == (
        True, "2", "h2", ("h0",), ("h2", "h0"), False)
    assert plan.expected == (("0", "rank 0"), ("1", "rank 1"), ("2", "h2"), ("3", "rank 3"))


def test_the_master_pod_of_a_pytorchjob_is_the_master_under_its_services_name() -> None:
    """The training operator gives the master pod MASTER_ADDR=localhost and the workers the
    master's Service (bert-1-master-0, the pod's name): the master pod listens, and every
    pod's check carries the same key (issue 25, the init container)."""
    labels = {"ai.backend.distributed.frameworks": "pytorch"}
    plans = {}
    for rank, (host, master) in enumerate((("bert-1-master-0", "localhost"),
                                           ("bert-1-worker-0", "bert-1-master-0"))):
        env = {"MASTER_ADDR": master, "MASTER_PORT": "23456", "RANK": str(rank),
               "WORLD_SIZE": "4", "PET_NODE_RANK": str(rank), "PET_NNODES": "2",
               "PET_NPROC_PER_NODE": "2"}
        derivation = derive(env, labels)
        plans[host] = plan_of(derivation.topology, {**env, **derivation.changes()}, host)
    main, worker = plans["bert-1-master-0"], plans["bert-1-worker-0"]
    assert (main.master, main.leader, main.peers) == ("bert-1-master-0", True, ())
    assert (worker.master, worker.leader, worker.peers) == (
        "bert-1-master-0", None, ("bert-1-master-0",))
    assert main.key == worker.key
