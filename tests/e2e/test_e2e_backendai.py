"""The main job as Backend.AI starts it: hook sourced by the entrypoint, runner, SSH fan-out.

Each container of a simulated session sources the repository's docker/bootstrap.sh from a
stand-in of Backend.AI's entrypoint, then runs a stand-in kernel runner serving OpenSSH's
sshd on port 2200 with the runner's environment; only main1 runs the batch command
(tests/e2e/bai_session.py). The batch commands are what docs/backendai.md tells users:
``on-every-node torchrun train.py`` and ``mpirun --hostfile``. Under CI=true a machine without
root, sshd, Open MPI or torch FAILS these tests.
"""

from __future__ import annotations

import os
import random
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bai_session import (
    DEFAULT,
    TEMPLATE,
    TORCH_BATCH,
    TORCH_USER_ENV,
    BackendAISession,
    expected_torch_exports,
    missing_tools,
    torch_labels,
    torch_problems,
    torch_summary,
)
from sessions import require, require_frameworks

pytestmark = pytest.mark.e2e

#: Seconds for a torch session (imports take ~4 s per process on 2 loaded cores).
TORCH_TIMEOUT_S = 150.0
#: Seconds for a session whose batch command is a few shell commands.
SHORT_TIMEOUT_S = 60.0


def _require_sessions(*modules: str) -> None:
    require_frameworks(*modules)
    missing = missing_tools()
    require(not missing, f"missing {missing} (install openssh-server)")


def _port() -> int:
    return random.randrange(20000, 60000)


def test_default_session_torchrun_over_ssh() -> None:
    """HOSTS sub1,main1,sub2: the hook exports canonical node ranks; main1's batch command
    fans torchrun out over SSH; 6 ranks, 2 per container in canonical order, sum to 21."""
    _require_sessions("torch")
    port = _port()
    with BackendAISession(DEFAULT, TORCH_BATCH, torch_labels(port),
                          user_env=TORCH_USER_ENV) as session:
        result = session.run(timeout=TORCH_TIMEOUT_S)
    problems = torch_problems(result, port)
    assert problems == [], torch_summary(result, port, problems) + "\n" + result.describe()
    assert {h: c.exports["NODE_RANK"] for h, c in result.containers.items()} == {
        "main1": "0", "sub1": "1", "sub2": "2"}
    for host in DEFAULT.hosts:
        exports = result.containers[host].exports
        assert {k: exports[k] for k in expected_torch_exports(DEFAULT, host, port)} == (
            expected_torch_exports(DEFAULT, host, port))
        assert exports["GLOO_SOCKET_IFNAME"] == "eth0"
    assert session.leftovers() == []


def test_template_session_workers_listed_first() -> None:
    """A cluster template main:1,worker:2 with LOCAL_RANK worker1=0, worker2=1, main1=2:
    derive-env derives canonical node ranks main1=0,
    worker1=1, worker2=2, so the same fan-out joins one rendezvous on main1."""
    _require_sessions("torch")
    port = _port()
    with BackendAISession(TEMPLATE, TORCH_BATCH, torch_labels(port),
                          user_env=TORCH_USER_ENV) as session:
        result = session.run(timeout=TORCH_TIMEOUT_S)
    assert {h: c.given["BACKENDAI_CLUSTER_LOCAL_RANK"] for h, c in result.containers.items()} == {
        "main1": "2", "worker1": "0", "worker2": "1"}
    problems = torch_problems(result, port)
    assert problems == [], torch_summary(result, port, problems) + "\n" + result.describe()
    assert {h: c.exports["NODE_RANK"] for h, c in result.containers.items()} == {
        "main1": "0", "worker1": "1", "worker2": "2"}
    for host in ("main1", "worker1", "worker2"):
        # A valid template session starts every container without a message (contract
        # section 5, revised): the LOCAL_RANK order shows in --explain only.
        assert "BACKENDAI_CLUSTER_LOCAL_RANK" not in result.containers[host].stderr, host
    assert session.leftovers() == []


MPI_WORKER = "echo \"mpi-rank $OMPI_COMM_WORLD_RANK $(hostname)\""
MPI_BATCH = (
    # on-every-node true: waits until every peer's SSH answers (no barrier at start).
    "on-every-node true"
    " && derive-env --dry-run --format openmpi-hostfile > hostfile"
    " && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi"
    " --hostfile hostfile --mca plm_rsh_agent ssh"
    " --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0"
    f" sh -c '{MPI_WORKER}'"
)


def test_openmpi_hostfile_mpirun_over_session_ssh() -> None:
    """Real Open MPI: mpirun --hostfile (from derive-env) in main1 starts 2 processes per
    container over the session's SSH, ranks in canonical order main1, sub1, sub2."""
    _require_sessions()
    require(shutil.which("mpirun.openmpi") is not None, "mpirun.openmpi missing (openmpi-bin)")
    with BackendAISession(DEFAULT, MPI_BATCH, torch_labels(_port())) as session:
        result = session.run(timeout=SHORT_TIMEOUT_S)
        hostfile = (session.container_dir("main1") / "work" / "hostfile").read_text()
    assert result.batch_rc == 0, result.describe()
    assert hostfile == "main1 slots=2\nsub1 slots=2\nsub2 slots=2\n"
    ranks = sorted(line.split()[1:] for line in result.main.stdout.splitlines()
                   if line.startswith("mpi-rank "))
    assert ranks == [["0", "main1"], ["1", "main1"], ["2", "sub1"], ["3", "sub1"],
                     ["4", "sub2"], ["5", "sub2"]], result.describe()
    assert session.leftovers() == []


def test_on_every_node_status_arguments_and_cleanup_after_failure() -> None:
    """Arguments arrive byte for byte on every node, in its working directory, with no input
    to read; the SSH sessions see the runner's environment (NODE_RANK) and ON_EVERY_NODE=1;
    with --keep-going the exit status is the first non-zero one in canonical order, each
    failed node named; a failing batch command that leaves a process running leaves
    nothing on the machine."""
    _require_sessions()
    arg = "it's  \"two\"\n$HOME `x` \\ *\n\n"
    batch = (
        # cat: COMMAND's input is at its end on every node (a terminal's would block).
        "on-every-node mkdir sub && cd sub && on-every-node --keep-going sh -c 'cat; "
        "printf \"%s|%s|%s|%s\" \"$(hostname)\" \"$PWD\" \"$ON_EVERY_NODE\" \"$1\" "
        "> \"$(hostname).out\"; "
        "sleep 600 </dev/null >/dev/null 2>&1 & "
        f"exit $((NODE_RANK + 3))' sh {shlex.quote(arg)}"
    )
    with BackendAISession(DEFAULT, batch, torch_labels(_port())) as session:
        result = session.run(timeout=SHORT_TIMEOUT_S)
        outs = {h: (session.container_dir(h) / "work" / "sub" / f"{h}.out").read_text()
                for h in DEFAULT.hosts}
    assert result.batch_rc == 3, result.describe()
    assert outs == {h: f"{h}|/home/work/sub|1|{arg}" for h in DEFAULT.hosts}
    assert [line for line in result.main.stderr.splitlines()
            if line.startswith("on-every-node:")] == [
        "on-every-node: main1: exit status 3",
        "on-every-node: sub1: exit status 4",
        "on-every-node: sub2: exit status 5",
    ]
    assert session.leftovers() == []


def _wait_for(paths: list[Path], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() and p.read_text().strip() for p in paths):
        assert time.monotonic() < deadline, f"not all of {paths} appeared in {timeout}s"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
def test_on_every_node_signal_stops_every_node(sig: signal.Signals, status: int) -> None:
    """SIGTERM / Ctrl-C to on-every-node stops the command on every node, the remote ones
    too (their sessions get SIGHUP), and it exits 143 / 130."""
    _require_sessions()
    batch = ("echo $$ > oen.pid; exec on-every-node sh -c "
             "'echo $$ > cmd.pid; exec sleep 600'")
    with BackendAISession(DEFAULT, batch, torch_labels(_port())) as session:
        session.start()
        work = {h: session.container_dir(h) / "work" for h in DEFAULT.hosts}
        _wait_for([work["main1"] / "oen.pid", *(w / "cmd.pid" for w in work.values())],
                  SHORT_TIMEOUT_S)
        pids = {h: int((w / "cmd.pid").read_text()) for h, w in work.items()}
        assert all(_alive(p) for p in pids.values()), pids
        os.kill(int((work["main1"] / "oen.pid").read_text()), sig)
        result = session.wait(timeout=SHORT_TIMEOUT_S)
        # Checked before the session's cleanup kills everything in the namespaces (stopping
        # the other runners does not: sshd's sessions run in sessions of their own). The
        # remote SIGHUP follows the ssh client's exit asynchronously: a bounded wait.
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        alive = {h: p for h, p in pids.items() if _alive(p)}
    assert result.batch_rc == status, result.describe()
    assert alive == {}
    assert session.leftovers() == []
