"""Issue #17 item 7: real Grid Engine parallel jobs whose every task runs ``derive-env -- ...``.

One real Son of Grid Engine 8.1.9 cluster for the module (tests/e2e/gecluster.py:
sge_qmaster on ``sgemaster``, one sge_execd per host ``sge-c3``, ``sge-a1``, ``sge-b2``,
each host a network namespace; queue all.q of 2 slots per host; PEs ``rr``
($round_robin) and ``one`` (one slot per host), both control_slaves TRUE). The scheduler
chooses the master host, so each test reads the job's PE_HOSTFILE (the job script copies
it to the shared folder) and asserts the exact variables every rank saw against it:

- a PE job of 6 slots whose script runs ``mpirun.openmpi -n 6 derive-env -- python
  examples/training/torch_allreduce.py``: Open MPI reads PE_HOSTFILE (ras/gridengine) and
  starts its daemons with ``qrsh -inherit -V``; every rank gets RANK/WORLD_SIZE/MASTER_ADDR
  (the master host) and one port, and the gloo all-reduce of 6 ranks is 21;
- a PE job of one slot per host whose script starts ``qrsh -inherit -V <host> derive-env --
  torchrun --nproc-per-node=2 ...`` on every host of PE_HOSTFILE: the node layer (PET_*);
- ``derive-env -- torchrun`` as the job script of a 3-host job: refused with the fix, the
  command not run.
- a cluster whose execds are not ready in time: an error naming the wait, nothing left.

The module's cluster starts in about 10 s; the four tests take about a minute here.

Needs root, ``ip netns``, gridengine-master/-exec/-client, openmpi-bin and torch: skipped
without them, FAILS under CI=true (``make test`` installs the packages).
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Iterator

import pytest

from gecluster import (
    GridEngineCluster,
    GridEngineError,
    can_run_gridengine,
    find_program,
    leftovers,
)
from hpc_jobs import reports
from sessions import BASE_ENV, EXAMPLES, LABEL, require, venv_bin
from simcluster import HostResult

pytestmark = pytest.mark.e2e

#: Seconds a whole job may take (qsub -sync y waits for it; the harness kills qsub later).
JOB_TIMEOUT_S = 150.0
TORCH = str(EXAMPLES / "torch_allreduce.py")


@pytest.fixture(scope="module")
def ge() -> Iterator[GridEngineCluster]:
    """One cluster for every job of this module, removed afterwards (also on failure);
    then nothing of it may be left."""
    require(*can_run_gridengine())
    require(find_program("mpirun.openmpi") is not None, "`mpirun.openmpi` not installed")
    exe = venv_bin() / "derive-env"
    require(exe.exists(), f"no derive-env next to {sys.executable} ({exe})")
    import importlib.util

    require(importlib.util.find_spec("torch") is not None, "torch is not importable")
    prefix = f"gx{os.getpid() % 10000}x{random.randrange(1000)}"
    with GridEngineCluster(prefix=prefix) as cluster:
        yield cluster
    assert leftovers(prefix, cluster.tmp) == []


def _qsub(ge: GridEngineCluster, pe: str, slots: int, script: str,
          labels: dict[str, str]) -> tuple[HostResult, str, list[str], str]:
    """Submit ``script`` (shell text after a line that copies PE_HOSTFILE to the shared
    folder) with ``qsub -V -sync y -pe PE SLOTS``; returns (qsub's result, the job's
    output, the hosts of its PE_HOSTFILE in order, the job id)."""
    name = f"job-{random.randrange(10**9)}"
    shared = ge.tmp / "shared"
    labels_file = shared / f"{name}.labels.json"
    labels_file.write_text(json.dumps({LABEL + k: v for k, v in labels.items()}))
    (shared / f"{name}.sh").write_text(
        f'#!/bin/sh\ncp "$PE_HOSTFILE" {name}.pe_hostfile\n{script}\n')
    env = {**BASE_ENV, "DERIVE_ENV_LABELS_FILE": str(labels_file)}
    res = ge.run(["qsub", "-V", "-sync", "y", "-cwd", "-N", name, "-pe", pe, str(slots),
                  "-o", f"{name}.out", "-j", "y", f"{name}.sh"], timeout=JOB_TIMEOUT_S, env=env)
    out = shared / f"{name}.out"
    hostfile = shared / f"{name}.pe_hostfile"
    hosts = list(dict.fromkeys(
        line.split()[0] for line in hostfile.read_text().splitlines() if line.strip())
    ) if hostfile.exists() else []
    job_id = res.stdout.split("Your job ")[1].split()[0] if "Your job " in res.stdout else "?"
    return res, out.read_text(errors="replace") if out.exists() else "", hosts, job_id


def test_mpirun_in_a_pe_job_every_rank_joins_by_env(ge: GridEngineCluster) -> None:
    """qsub -pe rr 6 of mpirun -n 6 derive-env -- python: ranks 2h, 2h+1 on the h-th host of
    PE_HOSTFILE (Open MPI's order), master = its first host, one derived port (61000-65535)
    for every rank; the all-reduce of 6 ranks sums to 21."""
    de = venv_bin() / "derive-env"
    res, output, hosts, _ = _qsub(
        ge, "rr", 6, f"exec mpirun.openmpi --allow-run-as-root -n 6 {de} -- {sys.executable} "
        f"{TORCH}", {"frameworks": "pytorch"})
    got = reports(res, 6, "rank", output)
    assert len(hosts) == 3, output
    # No port label: Open MPI's job id (the innermost source's) gives the port, one for all.
    ports = {r["env"]["MASTER_PORT"] for r in got}
    assert len(ports) == 1 and 61000 <= int(port := ports.pop()) <= 65535, got
    assert [r["hostname"] for r in got] == [h for h in hosts for _ in range(2)]
    for rank, r in enumerate(got):
        assert r["env"] == {
            "RANK": str(rank), "LOCAL_RANK": str(rank % 2), "WORLD_SIZE": "6",
            "LOCAL_WORLD_SIZE": "2", "NODE_RANK": str(rank // 2),
            "MASTER_ADDR": hosts[0], "MASTER_PORT": port}, r
    assert {r["result"] for r in got} == {21.0}


def test_qrsh_inherit_one_task_per_host_torchrun_needs_no_flags(ge: GridEngineCluster) -> None:
    """qsub -pe one 3 whose script starts qrsh -inherit -V <host> derive-env -- torchrun
    --nproc-per-node=2 on every host: the node layer (PET_NNODES=3, PET_NODE_RANK = the
    host's line, PET_MASTER_* = the first host and the label's port); 6 ranks sum to 21."""
    port = random.randrange(20000, 30000)
    de = venv_bin() / "derive-env"
    torchrun = f"torchrun --nproc-per-node=2 {TORCH}"  # found on PATH (qsub -V), as a user has it
    script = (f'for h in $(awk \'{{print $1}}\' "$PE_HOSTFILE"); do\n'
              f'  qrsh -inherit -V "$h" {de} -- {torchrun} &\ndone\nwait')
    res, output, hosts, _ = _qsub(ge, "one", 3, script,
                                  {"frameworks": "pytorch", "master-port": str(port)})
    got = reports(res, 6, "rank", output)
    assert len(hosts) == 3, output
    assert [(r["hostname"], r["local_rank"], r["group_rank"]) for r in got] == [
        (h, i % 2, i // 2) for i, h in enumerate(h for h in hosts for _ in range(2))]
    for rank, r in enumerate(got):
        node = str(rank // 2)
        assert {k: r["env"].get(k) for k in (
            "PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
            "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")} == {
            "PET_NNODES": "3", "PET_NODE_RANK": node, "PET_MASTER_ADDR": hosts[0],
            "PET_MASTER_PORT": str(port), "NODE_RANK": node, "MASTER_ADDR": hosts[0],
            "MASTER_PORT": str(port), "WORLD_SIZE": "6"}, r["env"]
    assert {r["result"] for r in got} == {21.0}


def test_job_script_of_three_hosts_refuses_with_the_fix(ge: GridEngineCluster) -> None:
    """derive-env -- torchrun as the job script of a 3-host job: exit 3 with the fix (mpirun
    or qrsh -inherit -V), torchrun never started."""
    de = venv_bin() / "derive-env"
    res, output, hosts, _ = _qsub(
        ge, "one", 3, f"{de} -- torchrun {TORCH}\n"
        'echo "exit=$?"', {"frameworks": "pytorch"})
    assert res.ok, res.describe() + output
    assert len(hosts) == 3, output
    assert "derive-env: error: run derive-env inside mpirun or qrsh -inherit, after it: " \
        "mpirun derive-env -- python train.py" in output, output
    assert "which runs on the master host only, the first of PE_HOSTFILE's NHOSTS='3'" \
        in output, output
    assert "qrsh -inherit -V <host> derive-env -- torchrun" in output
    assert output.rstrip().endswith("exit=3"), output
    assert '"rank"' not in output


def test_a_cluster_that_is_not_ready_in_time_leaves_nothing() -> None:
    """A readiness wait too short for the execds: GridEngineError naming the wait, and
    every daemon, namespace and folder removed."""
    require(*can_run_gridengine())
    prefix = f"gy{os.getpid() % 10000}x{random.randrange(1000)}"
    cluster = GridEngineCluster(prefix=prefix, ready_timeout=0.05)
    with pytest.raises(GridEngineError, match=r"not ready after 0s"):
        cluster.__enter__()
    assert leftovers(prefix, cluster.tmp) == []
