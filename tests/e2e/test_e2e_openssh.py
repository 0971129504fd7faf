"""on-every-node over OpenSSH's sshd, and mpirun: what the real Backend.AI runtime cannot show.

Backend.AI's own runtime (tests/e2e/test_e2e_backendai.py, test_e2e_fanout.py: containers of
the example image, Backend.AI's entrypoint, kernel runner and dropbear) is where the product
is proven. This file keeps the simulated session of tests/e2e/bai_session.py (network
namespaces, stand-ins of the entrypoint and runner, OpenSSH's sshd on port 2200) for two
things the containers cannot do:

- on-every-node on OpenSSH's sshd (a site whose images bring their own sshd, and the other
  half of "dropbear and OpenSSH alike"): the healthy torchrun fan-out, fail-fast and
  Ctrl-C/SIGTERM;
- mpirun --hostfile over the session's SSH (Open MPI is on this machine, not in the
  example image).

Under CI=true a machine without root, sshd, Open MPI or torch FAILS these tests.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
from pathlib import Path

import pytest

from bai_session import (
    DEFAULT,
    STOPPED_AFTER_SUB1,
    TORCH_BATCH,
    TORCH_USER_ENV,
    BackendAISession,
    assert_torch_session,
    missing_tools,
    torch_labels,
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
    assert_torch_session(result, port)
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


#: The issue's bound from one node's failure to every other node's command stopped.
STOP_BOUND_S = 15.0


def test_a_node_that_fails_after_the_start_stops_every_other_node() -> None:
    """sub1's command exits 1 three seconds after the start; main1's and sub2's sleep: both
    are stopped (SIGTERM locally, SIGHUP over the closed SSH session) within 15 s."""
    _require_sessions()
    batch = ("on-every-node sh -c 'echo $$ > \"$(hostname).pid\"; "
             "[ \"$(hostname)\" = sub1 ] && { sleep 3; exit 1; }; exec sleep 600'")
    with BackendAISession(DEFAULT, batch, torch_labels(_port())) as session:
        session.start()
        work = {h: session.container_dir(h) / "work" for h in DEFAULT.hosts}
        _wait_for([w / f"{h}.pid" for h, w in work.items()], SHORT_TIMEOUT_S)
        pids = {h: int((w / f"{h}.pid").read_text()) for h, w in work.items()}
        deadline = time.monotonic() + SHORT_TIMEOUT_S
        while _alive(pids["sub1"]):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        failed_at = time.monotonic()
        while any(_alive(pids[h]) for h in ("main1", "sub2")):
            if time.monotonic() > failed_at + 30:
                break
            time.sleep(0.02)
        stopped_after = time.monotonic() - failed_at
        alive = {h: p for h, p in pids.items() if _alive(p)}
        result = session.wait(timeout=SHORT_TIMEOUT_S)
    print(f"every other node stopped {stopped_after:.2f}s after sub1 failed "
          f"(bound {STOP_BOUND_S}s)")
    assert alive == {}
    assert stopped_after < STOP_BOUND_S
    assert result.batch_rc == 1, result.describe()
    assert [line for line in result.main.stderr.splitlines()
            if line.startswith("on-every-node:") and " (DERIVE_ENV_RUN_ID) " not in line
            # a wait for a peer's sshd (on-every-node may start before every sshd is up)
            and " SSH answered after " not in line and "for every node's SSH" not in line] == (
        STOPPED_AFTER_SUB1), result.describe()
    assert session.leftovers() == []
