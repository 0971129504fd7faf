"""Tests of the namespace cluster harness itself (tests/e2e/simcluster.py).

Needs root and a working ``ip netns``; otherwise skipped, except under CI=true, where a
machine that cannot simulate is an error (FAIL with the reason) rather than a silent skip.
The two torchrun tests additionally need torch importable by this Python (else skipped); they
are the control experiment for the derive-env end-to-end tests: explicit torchrun flags, no shim.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# Why: import the harness by path so this works whatever pytest import mode / package layout.
import simcluster
from simcluster import SimulatedCluster, backendai_env, can_simulate

pytestmark = pytest.mark.e2e

HOSTS = ["main1", "sub1", "sub2"]
#: Seconds allowed for one short in-namespace command (getent, client connect ...).
SHORT_S = 20.0


def _require_simulation() -> None:
    """Skip (or, under CI=true, fail) when this machine cannot run a SimulatedCluster."""
    ok, reason = can_simulate()
    if ok:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but cannot simulate a cluster: {reason}")
    pytest.skip(f"cannot simulate a cluster: {reason}")


def _require_torch() -> None:
    """Skip (or, under CI=true, fail) when torch is not importable by this Python."""
    if importlib.util.find_spec("torch") is not None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but torch is not importable by {sys.executable}")
    pytest.skip(f"torch not importable by {sys.executable}")


@pytest.fixture
def cluster() -> Iterator[SimulatedCluster]:
    """A 3-host cluster (main1, sub1, sub2) with a per-test unique prefix; removed afterwards."""
    _require_simulation()
    with SimulatedCluster(HOSTS, prefix=_unique_prefix()) as c:
        yield c
    _assert_gone(c)


def _unique_prefix() -> str:
    """Namespace prefix unique to this process and call (tests may create several clusters)."""
    return f"det{os.getpid() % 100000}x{random.randrange(1000)}"


def _netns_list() -> str:
    """Output of ``ip netns list`` (bounded)."""
    return subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, timeout=10, check=True
    ).stdout


def _assert_gone(c: SimulatedCluster) -> None:
    """Assert that none of the cluster's namespaces or /etc/netns folders is left."""
    listed = {line.split()[0] for line in _netns_list().splitlines() if line.strip()}
    left = [ns for ns in c.namespaces() if ns in listed]
    assert not left, f"namespaces left behind: {left}"
    left_etc = [ns for ns in c.namespaces() if (simcluster.NETNS_ETC / ns).exists()]
    assert not left_etc, f"/etc/netns folders left behind: {left_etc}"


# ---- small in-namespace TCP tools ------------------------------------------------------------

# Server: bind (addr, 0), print the port, answer every connection with its hostname, for at most
# argv[2] seconds.
_SERVER = r"""
import socket, sys, time
addr, lifetime = sys.argv[1], float(sys.argv[2])
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.bind((addr, 0))
srv.listen(8)
print(srv.getsockname()[1], flush=True)
end = time.monotonic() + lifetime
while time.monotonic() < end:
    srv.settimeout(max(0.1, end - time.monotonic()))
    try:
        conn, _ = srv.accept()
    except socket.timeout:
        break
    conn.sendall(("hello from " + socket.gethostname()).encode())
    conn.close()
"""

# Client: connect to argv[1]:argv[2] (a name is resolved inside the namespace), print the reply.
# Exit 0 = got a reply, 3 = connection refused, 4 = any other error.
_CLIENT = r"""
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) as s:
        print(s.recv(100).decode())
except ConnectionRefusedError:
    print("refused"); sys.exit(3)
except OSError as e:
    print(type(e).__name__, e); sys.exit(4)
"""


def _start_server(
    c: SimulatedCluster, host: str, bind_addr: str, lifetime: float = 30.0
) -> tuple[subprocess.Popen[str], int]:
    """Start the TCP server in ``host`` bound to ``bind_addr``; return (process, port).

    Waits at most 10 s for the port line; fails the test otherwise.
    """
    proc = c.popen(
        host,
        [sys.executable, "-c", _SERVER, bind_addr, str(lifetime)],
        {},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 10.0)
    line = proc.stdout.readline() if ready else ""
    if not line.strip().isdigit():
        proc.kill()
        proc.wait(timeout=5)
        pytest.fail(f"server in {host} did not start: {line!r}")
    return proc, int(line)


def _stop(proc: subprocess.Popen[str]) -> None:
    """Kill a helper process and reap it (bounded)."""
    proc.kill()
    proc.wait(timeout=5)


def _connect(c: SimulatedCluster, host: str, target: str, port: int) -> simcluster.HostResult:
    """Run the TCP client in ``host`` against target:port."""
    return c.run(host, [sys.executable, "-c", _CLIENT, target, str(port)], timeout=SHORT_S)


# ---- tests ------------------------------------------------------------------------------------


def test_backendai_env_canonical_ranks() -> None:
    """LOCAL_RANK follows the canonical order whatever HOSTS order; IDX is within the role."""
    order = simcluster.scrambled_order(HOSTS)
    assert order[0] != "main1"
    envs = {h: backendai_env(order, h) for h in HOSTS}
    assert [envs[h]["BACKENDAI_CLUSTER_LOCAL_RANK"] for h in HOSTS] == ["0", "1", "2"]
    assert [envs[h]["BACKENDAI_CLUSTER_IDX"] for h in HOSTS] == ["1", "1", "2"]
    assert [envs[h]["BACKENDAI_CLUSTER_ROLE"] for h in HOSTS] == ["main", "sub", "sub"]
    for h in HOSTS:
        assert envs[h]["BACKENDAI_CLUSTER_SIZE"] == "3"
        assert envs[h]["BACKENDAI_CLUSTER_HOSTS"] == ",".join(order)
        assert envs[h]["BACKENDAI_CLUSTER_HOST"] == h
        assert envs[h]["BACKENDAI_CLUSTER_REPLICAS"] == "main:1,sub:2"
        assert envs[h]["BACKENDAI_SESSION_ID"]
    # Numeric, not lexical, index order: sub2 before sub10.
    many = ["sub10", "sub2", "main1"] + [f"sub{i}" for i in (1, 3, 4, 5, 6, 7, 8, 9)]
    assert backendai_env(many, "sub10")["BACKENDAI_CLUSTER_LOCAL_RANK"] == "10"
    assert backendai_env(many, "sub2")["BACKENDAI_CLUSTER_LOCAL_RANK"] == "2"
    with pytest.raises(ValueError):
        backendai_env(HOSTS, "sub9")


def test_backendai_env_group_order_and_roles_ending_in_digits() -> None:
    """LOCAL_RANK follows the request's group order; a100:2 names a1001, a1002 (role a100)."""
    order = ["worker1", "main1", "worker2"]
    ranks = {h: backendai_env(order, h, "main:1,worker:2", group_order=["worker", "main"])
             ["BACKENDAI_CLUSTER_LOCAL_RANK"] for h in order}
    assert ranks == {"worker1": "0", "worker2": "1", "main1": "2"}
    env = backendai_env(["a1002", "main1", "a1001"], "a1002", "a100:2,main:1")
    assert (env["BACKENDAI_CLUSTER_ROLE"], env["BACKENDAI_CLUSTER_IDX"],
            env["BACKENDAI_CLUSTER_LOCAL_RANK"]) == ("a100", "2", "2")
    assert simcluster.canonical_order(["a1002", "b1", "main1", "a1001"], "a100:2,b:1,main:1") == [
        "main1", "a1001", "a1002", "b1"]


def test_namespaces_created_and_removed() -> None:
    """Setup makes bridge + host namespaces with hostname, address and hosts file; exit removes
    all of them and nothing is added to the root namespace."""
    _require_simulation()
    c = SimulatedCluster(HOSTS, prefix=_unique_prefix())
    with c:
        listed = _netns_list()
        for ns in c.namespaces():
            assert ns in listed
        for i, h in enumerate(HOSTS):
            assert c.addresses[h] == f"198.18.0.{10 + i}"
            hosts_file = (simcluster.NETNS_ETC / c.namespace(h) / "hosts").read_text()
            assert "127.0.0.1 localhost" in hosts_file and "::1 localhost" in hosts_file
            r = c.run(h, ["sh", "-c", "hostname; ip -o -4 addr show dev eth0"], timeout=SHORT_S)
            assert r.ok, r.describe()
            name, addr_line = r.stdout.splitlines()
            assert name == h
            assert f"inet {c.addresses[h]}/24" in addr_line
        root = subprocess.run(
            ["ip", "addr"], check=True, capture_output=True, text=True, timeout=10
        ).stdout
        assert "198.18." not in root, "an address leaked into the root namespace"
    _assert_gone(c)


def test_cleanup_after_exception() -> None:
    """An exception inside the with-block still removes everything, processes included."""
    _require_simulation()
    c = SimulatedCluster(HOSTS, prefix=_unique_prefix())
    with pytest.raises(RuntimeError, match="boom"), c:
        c.popen("sub1", ["sleep", "300"], {})
        raise RuntimeError("boom")
    _assert_gone(c)


def test_cleanup_after_half_setup_and_foreign_namespace_untouched() -> None:
    """If setup fails half way (here: a namespace of the same name already exists), what was
    made is removed and the pre-existing namespace is left alone."""
    _require_simulation()
    prefix = _unique_prefix()
    foreign = f"{prefix}-sub1"
    subprocess.run(["ip", "netns", "add", foreign], check=True, timeout=10)
    try:
        c = SimulatedCluster(HOSTS, prefix=prefix)
        with pytest.raises(simcluster.SimulationError, match="already exists"), c:
            pass
        listed = _netns_list()
        assert foreign in listed
        for ns in (f"{prefix}-br", f"{prefix}-main1", f"{prefix}-sub2"):
            assert ns not in listed
            assert not (simcluster.NETNS_ETC / ns).exists()
    finally:
        subprocess.run(["ip", "netns", "del", foreign], check=False, timeout=10)


def test_name_resolution(cluster: SimulatedCluster) -> None:
    """Every host resolves every host name to its 198.18 address, and localhost to loopback."""
    for h in HOSTS:
        r = cluster.run(h, ["getent", "hosts", *HOSTS], timeout=SHORT_S)
        assert r.ok, r.describe()
        got = dict(reversed(line.split()) for line in r.stdout.splitlines())
        assert got == cluster.addresses
        r = cluster.run(h, ["getent", "ahostsv4", "localhost"], timeout=SHORT_S)
        assert r.ok and r.stdout.split()[0] == "127.0.0.1", r.describe()


def test_tcp_between_namespaces(cluster: SimulatedCluster) -> None:
    """A server bound to sub1's 198.18 address is reachable by name from main1 and sub2."""
    server, port = _start_server(cluster, "sub1", cluster.addresses["sub1"])
    try:
        for client in ("main1", "sub2"):
            r = _connect(cluster, client, "sub1", port)
            assert r.ok and r.stdout.strip() == "hello from sub1", r.describe()
    finally:
        _stop(server)


def test_loopback_is_isolated(cluster: SimulatedCluster) -> None:
    """127.0.0.1 in main1 does NOT reach a listener on 127.0.0.1 in sub1 (it does from sub1)."""
    server, port = _start_server(cluster, "sub1", "127.0.0.1")
    try:
        own = _connect(cluster, "sub1", "127.0.0.1", port)  # positive control
        assert own.ok and own.stdout.strip() == "hello from sub1", own.describe()
        other = _connect(cluster, "main1", "127.0.0.1", port)
        assert other.returncode == 3 and other.stdout.strip() == "refused", other.describe()
        by_addr = _connect(cluster, "main1", cluster.addresses["sub1"], port)
        assert not by_addr.ok, "a loopback-bound listener answered on eth0"
    finally:
        _stop(server)


def test_run_all_timeout_kills_everything(cluster: SimulatedCluster) -> None:
    """run_all's overall timeout marks and kills running processes, also ones that escaped
    the process group with setsid (as torchrun workers do)."""
    t0 = time.monotonic()
    results = cluster.run_all(
        {
            "main1": (["sleep", "300"], {}),
            "sub1": (["sh", "-c", "setsid sleep 300 & wait"], {}),
            "sub2": (["true"], {}),
        },
        timeout=1.0,
    )
    assert time.monotonic() - t0 < 15
    assert results["main1"].timed_out and results["sub1"].timed_out
    assert results["sub2"].ok and not results["sub2"].timed_out
    for h in ("main1", "sub1"):
        assert simcluster._netns_pids(cluster.namespace(h)) == []


# ---- control experiment: torchrun with explicit flags, no shim ---------------------------------

_ALLREDUCE = Path(__file__).resolve().parents[2] / "examples" / "training" / "torch_allreduce.py"


def _torchrun_all(
    c: SimulatedCluster, master_addr: str, timeout: float, rdzv_timeout_s: int
) -> dict[str, simcluster.HostResult]:
    """Run torchrun (3 nodes x 2 procs) of torch_allreduce.py in every host, explicit flags."""
    port = random.randint(20000, 60000)
    per_host = {}
    for node_rank, h in enumerate(HOSTS):
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            str(len(HOSTS)),
            "--nproc-per-node",
            "2",
            "--node-rank",
            str(node_rank),
            "--master-addr",
            master_addr,
            "--master-port",
            str(port),
            "--rdzv-conf",
            f"timeout={rdzv_timeout_s}",
            str(_ALLREDUCE),
        ]
        per_host[h] = (argv, {"GLOO_SOCKET_IFNAME": "eth0", "E2E_PG_TIMEOUT_S": "60"})
    return c.run_all(per_host, timeout=timeout)


def _reports(results: dict[str, simcluster.HostResult]) -> list[dict[str, object]]:
    """All JSON lines printed by the workers, across hosts."""
    out = []
    for r in results.values():
        for line in r.stdout.splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
    return out


def test_torchrun_explicit_flags_all_ranks_ok(cluster: SimulatedCluster) -> None:
    """3 nodes x 2 procs all-reduce through main1's store: all 6 ranks report ok."""
    _require_torch()
    results = _torchrun_all(cluster, "main1", timeout=120, rdzv_timeout_s=60)
    detail = "\n".join(r.describe() for r in results.values())
    assert all(r.ok for r in results.values()), detail
    reports = _reports(results)
    assert sorted(int(str(d["rank"])) for d in reports) == list(range(6)), detail
    for d in reports:
        assert d["ok"] and d["world_size"] == 6 and d["result"] == 21.0
        assert d["hostname"] == HOSTS[int(str(d["group_rank"]))]


def test_torchrun_wrong_master_fails(cluster: SimulatedCluster) -> None:
    """Every node told master 127.0.0.1 must NOT form a group (it would on a shared loopback)."""
    _require_torch()
    results = _torchrun_all(cluster, "127.0.0.1", timeout=90, rdzv_timeout_s=10)
    detail = "\n".join(r.describe() for r in results.values())
    assert not any(r.ok for r in results.values()), detail
    assert not any(d.get("ok") for d in _reports(results)), detail
    # The failure must be the rendezvous one (sub nodes cannot reach a store on their own
    # loopback), not e.g. a crash at import time.
    assert any("127.0.0.1" in r.stderr for r in results.values()), detail
