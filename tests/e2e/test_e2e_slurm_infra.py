"""The real-Slurm harness itself (tests/e2e/slurmcluster.py): a job runs on every node, and
every daemon, namespace and temporary folder is gone afterwards, also after a failed setup and
after Ctrl-C; and the recorder (record_envs.py) reproduces the recorded fixtures. Needs root,
``ip netns``, slurm-wlm and munge (the recorder test also Open MPI, MPICH, script, sshd):
skipped without them, FAILS under CI=true (helpers.require)."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import require
from record_envs import FIXTURES, SCENARIOS, load_fixture, record_all, stable
from slurmcluster import (
    NODELIST,
    NODES,
    SlurmCluster,
    SlurmError,
    can_run_slurm,
    find_program,
    leftovers,
)

pytestmark = pytest.mark.e2e

#: Seconds the --hold child may take to be ready, and to clean up after SIGINT.
HOLD_READY_S = 40.0
HOLD_EXIT_S = 30.0


def _prefix() -> str:
    """A namespace prefix no other run uses (pid plus a random part)."""
    return f"dt{os.getpid() % 10000}x{random.randrange(1000)}"


def _require_slurm() -> None:
    ok, why = can_run_slurm()
    require(ok, f"cannot run a Slurm cluster: {why}")


def test_srun_runs_two_tasks_on_each_node_and_everything_is_removed() -> None:
    _require_slurm()
    prefix = _prefix()
    with SlurmCluster(prefix=prefix) as slurm:
        tmp = slurm.tmp
        part = slurm.run(["sinfo", "-h", "-o", "%N %D %t"], timeout=20)
        assert part.ok, part.describe()
        assert part.stdout.split() == [NODELIST, "3", "idle"]
        res = slurm.run(["srun", "-N3", "--ntasks-per-node=2", "hostname"], timeout=30)
        assert res.ok, res.describe() + slurm.log_tail("slurmctld.log")
        assert sorted(res.stdout.split()) == [n for n in NODES for _ in range(2)]
    assert leftovers(prefix, tmp) == []


def test_failed_setup_removes_everything() -> None:
    _require_slurm()
    prefix = _prefix()
    slurm = SlurmCluster(prefix=prefix, ready_timeout=0.0)
    with pytest.raises(SlurmError, match=r"not ready after 0s"):
        slurm.__enter__()
    assert leftovers(prefix, slurm.tmp) == []


def test_ctrl_c_removes_everything() -> None:
    _require_slurm()
    prefix = _prefix()
    here = Path(__file__).resolve().parent
    child = subprocess.Popen(
        [sys.executable, str(here / "slurmcluster.py"), "--hold", prefix],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )
    try:
        ready, _, _ = select.select([child.stdout], [], [], HOLD_READY_S)
        line = child.stdout.readline() if ready else ""  # type: ignore[union-attr]
        assert line.startswith(f"READY {prefix} "), (line, child.poll())
        tmp = Path(line.split()[2])
        assert (tmp / "slurm.conf").exists()
        assert leftovers(prefix, tmp) != []  # the check sees a live cluster
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=HOLD_EXIT_S) == 0, child.stderr.read()  # type: ignore[union-attr]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    assert leftovers(prefix, tmp) == []


def test_a_fresh_recording_matches_the_fixtures() -> None:
    """Every scenario re-recorded on a new cluster gives the fixtures' tasks, on the same
    nodes, with the same values (except the VARYING ones): the golden tests' oracle is what
    the installed Slurm/Open MPI/MPICH do today, not a one-off."""
    _require_slurm()
    for prog in ("mpirun.openmpi", "mpiexec.mpich", "script", "sshd"):
        require(find_program(prog) is not None, f"`{prog}` not installed")
    results, skipped = record_all(list(SCENARIOS), log=False)
    assert skipped == {}
    for name, tasks in results.items():
        fixtures = {f.stem: load_fixture(f) for f in sorted((FIXTURES / name).glob("*.env"))}
        assert sorted(tasks) == sorted(fixtures), name
        for task, (host, env) in tasks.items():
            want_host, want_env = fixtures[task]
            assert (name, task, host) == (name, task, want_host)
            assert stable(env) == stable(want_env), f"{name}/{task}"
