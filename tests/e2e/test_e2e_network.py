"""End to end: interface hints in simulated containers, and the waits and signals as PID 1.

Each test makes its own simulated session (network namespaces, unique prefix, removed
afterwards) and runs the installed ``derive-env``:

* a Backend.AI overlay container (``baimulti0``, a docker_gwbridge look-alike ``eth1`` with
  the default route): without any label, and with ``auto``, gloo and NCCL get ``baimulti0``;
  before Docker 28 (overlay ``eth0``) ``auto`` takes ``eth0``, never the gwbridge;
* a DNS server that never answers: all name resolution of one start ends after 5 s, and
  SIGTERM / SIGINT during it end ``derive-env`` at once with 143 / 130, also as PID 1 of a
  PID namespace (the image's ENTRYPOINT without tini), and the command is not run.

Needs root and ``ip netns`` / ``unshare``; under CI=true a machine that cannot run them FAILS.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import wait_for_handler
from sessions import (
    EXAMPLES,
    LABEL,
    random_ports,
    reports_of,
    require,
    require_frameworks,
    run_session,
    venv_bin,
)
from simcluster import SimulatedCluster, backendai_env, can_simulate, scrambled_order

pytestmark = pytest.mark.e2e

HOSTS = ["main1", "sub1", "sub2"]
AUTO = {LABEL + "frameworks": "pytorch", LABEL + "socket-ifname": "auto"}


def _prefix() -> str:
    return f"dnw{os.getpid() % 100000}x{random.randrange(1000)}"


@pytest.fixture
def derive_env() -> str:
    require(*can_simulate())
    exe = venv_bin() / "derive-env"
    require(exe.exists(), f"no derive-env next to {sys.executable} ({exe})")
    return str(exe)


def _env(tmp_path: Path, host: str, labels: dict[str, str]) -> dict[str, str]:
    """Backend.AI's variables of ``host`` in a session of :data:`HOSTS`, the labels file."""
    labels_file = tmp_path / "labels.json"
    labels_file.write_text(json.dumps(labels))
    return {
        **backendai_env(scrambled_order(HOSTS), host),
        "DERIVE_ENV_LABELS_FILE": str(labels_file),
        "PATH": os.pathsep.join([str(venv_bin()), "/usr/bin", "/bin"]),
    }


def _dry_runs(cluster: SimulatedCluster, exe: str, tmp_path: Path, labels: dict[str, str]
              ) -> dict[str, dict[str, str]]:
    """``derive-env --dry-run --format json`` in every container: host -> its variables."""
    per_host = {
        h: ([exe, "--dry-run", "--format", "json"], _env(tmp_path, h, labels))
        for h in cluster.hosts
    }
    results = cluster.run_all(per_host, timeout=60)
    for result in results.values():
        assert result.ok and result.stderr == "", result.describe()
    return {h: json.loads(r.stdout) for h, r in results.items()}


def _ifnames(derived: dict[str, dict[str, str]]) -> dict[str, tuple[str | None, str | None]]:
    return {h: (v.get("GLOO_SOCKET_IFNAME"), v.get("NCCL_SOCKET_IFNAME"))
            for h, v in derived.items()}


def test_overlay_interface_with_and_without_label(derive_env: str, tmp_path: Path) -> None:
    with SimulatedCluster(HOSTS, prefix=_prefix(), interface="baimulti0", gwbridge=True) as c:
        default = _dry_runs(c, derive_env, tmp_path, {LABEL + "frameworks": "pytorch"})
        auto = _dry_runs(c, derive_env, tmp_path, AUTO)
        off = _dry_runs(c, derive_env, tmp_path, {**AUTO, LABEL + "socket-ifname": "none"})
    assert _ifnames(default) == dict.fromkeys(HOSTS, ("baimulti0", "baimulti0"))
    assert _ifnames(auto) == dict.fromkeys(HOSTS, ("baimulti0", "baimulti0"))
    assert _ifnames(off) == dict.fromkeys(HOSTS, (None, None))
    assert {v["MASTER_ADDR"] for v in off.values()} == {"main1"}


def test_gloo_all_reduce_over_the_default_overlay_interface() -> None:
    """Without any socket-ifname label, gloo runs over baimulti0 (docker_gwbridge next to it)."""
    require_frameworks("torch")
    labels = {LABEL + "frameworks": "pytorch", LABEL + "pytorch-mode": "process-per-container",
              LABEL + "master-port": str(random_ports(1)[0])}
    show = ('echo "GLOO_SOCKET_IFNAME=$GLOO_SOCKET_IFNAME NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME"'
            ' >&2; exec python "$0"')
    results, _ = run_session(
        labels, lambda host: ["sh", "-c", show, str(EXAMPLES / "torch_allreduce.py")], timeout=240,
        # The sessions' eth0 hint, emptied: an empty value counts as unset.
        extra_env={"GLOO_SOCKET_IFNAME": "", "E2E_PG_TIMEOUT_S": "120"},
        cluster_options={"interface": "baimulti0", "gwbridge": True},
    )
    reports = reports_of(results)
    assert {h: (r["rank"], r["result"]) for h, r in reports.items()} == {
        "main1": (0, 6.0), "sub1": (1, 6.0), "sub2": (2, 6.0)}
    for result in results.values():
        assert "GLOO_SOCKET_IFNAME=baimulti0 NCCL_SOCKET_IFNAME=baimulti0" in (
            result.stderr.splitlines()), result.describe()


def test_auto_before_docker_28_takes_the_overlay_not_the_gwbridge(derive_env: str,
                                                                   tmp_path: Path) -> None:
    # The overlay is eth0; eth1 holds the default route and the same address on every node.
    with SimulatedCluster(HOSTS, prefix=_prefix(), gwbridge=True) as c:
        auto = _dry_runs(c, derive_env, tmp_path, AUTO)
        default = _dry_runs(c, derive_env, tmp_path, {LABEL + "frameworks": "pytorch"})
    assert _ifnames(auto) == dict.fromkeys(HOSTS, ("eth0", "eth0"))
    assert _ifnames(default) == dict.fromkeys(HOSTS, (None, None))


def test_name_resolution_is_bounded_in_all(derive_env: str, tmp_path: Path) -> None:
    """No name of the session is in /etc/hosts, not even the own one, and DNS never answers:
    5 s in all (before: up to 5 s per name plus the resolver's own timeouts)."""
    # The container is named x1 in /etc/hosts; its host name is set to sub1 after that.
    argv = ["sh", "-c", 'hostname sub1 && exec "$@"', "sh", derive_env, "--dry-run",
            "--format", "json"]
    with SimulatedCluster(["x1"], prefix=_prefix(), blackhole_dns=True) as c:
        started = time.monotonic()
        result = c.run("x1", argv, _env(tmp_path, "sub1", AUTO), timeout=30)
        elapsed = time.monotonic() - started
    assert result.returncode == 0, result.describe()
    assert _ifnames({"sub1": json.loads(result.stdout)}) == {"sub1": (None, None)}
    assert result.stderr == (
        "derive-env: warning: label ai.backend.distributed.socket-ifname=auto: no interface "
        "routes to the master 'main1' (resolved: not resolvable); GLOO_SOCKET_IFNAME and "
        "NCCL_SOCKET_IFNAME not set\n"
        "derive-env: warning: this container's host name 'sub1' did not resolve within 5 s: "
        "gloo then binds to the loopback address 127.0.0.1 and advertises it to the other "
        "nodes, which cannot reach it; add the name to /etc/hosts or set GLOO_SOCKET_IFNAME\n"
    )
    assert 4.9 < elapsed < 8.0, elapsed


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_during_name_resolution_as_pid_1(derive_env: str, tmp_path: Path, signum: int,
                                                code: int) -> None:
    marker = tmp_path / "the-command-ran"
    argv = [derive_env, "--", "touch", str(marker)]
    with SimulatedCluster(["sub1"], prefix=_prefix(), blackhole_dns=True) as c:
        proc = subprocess.Popen(
            c.command("sub1", argv, pid1=True), env=c.container_env("sub1", _env(
                tmp_path, "sub1", AUTO)),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True,
        )
        try:
            pid = _pid_1_of(proc.pid, "derive-env")
            wait_for_handler(pid, signum, timeout=30)
            os.kill(pid, signum)
            sent = time.monotonic()
            out, err = proc.communicate(timeout=10)
            elapsed = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
    name = signal.Signals(signum).name
    assert (proc.returncode, out, err) == (code, "", (
        f"derive-env: error: interrupted by {name} while resolving host names (label "
        f"socket-ifname): nothing was run (exit {code})\n"))
    assert not marker.exists()
    assert elapsed < 1.5, elapsed


def _pid_1_of(unshare_pid: int, program: str, timeout: float = 30.0) -> int:
    """The host PID of the PID-1 process ``unshare --fork`` started, once it runs ``program``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text()
            for pid in map(int, children.split()):
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                status = Path(f"/proc/{pid}/status").read_text()
                nspid = next(x for x in status.splitlines() if x.startswith("NSpid:")).split()
                if any(program.encode() in part for part in cmdline[:2]) and nspid[-1] == "1":
                    return pid
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            pass
        time.sleep(0.02)
    raise AssertionError(f"no PID 1 running {program} under unshare {unshare_pid}")
