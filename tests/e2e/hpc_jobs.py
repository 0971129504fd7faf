"""Shared by the real-manager jobs (test_e2e_slurm.py, test_e2e_mpi.py): one real Slurm cluster
per module (slurmcluster.SlurmCluster, sshd on every node for the MPI jobs), the image's labels
as a file every node reads, the command prefix every task runs, and the workers' reports.

Every task runs ``<venv>/bin/derive-env -- <the user's command>``, as a user would write it
after ``srun``/``mpirun``. With ``E2E_HPC_STANDIN=1`` in the test runner's environment, every
task runs ``python standin.py LAYER MASTER PORT -- <command>`` instead (standin.py: sets the
contract's variables by hand from the launcher's): the same jobs and assertions then check
the infrastructure alone (Slurm, sshd, Open MPI, MPICH, gloo over the namespaces), which
tells a harness problem from a derive-env one. The stand-in is a debugging aid, never the
test: CI runs without that variable.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from sessions import BASE_ENV, EXAMPLES, HERE, LABEL, json_lines, require, venv_bin
from simcluster import HostResult
from slurmcluster import NODES, SlurmCluster, can_run_slurm, find_program, leftovers

__all__ = [
    "EXAMPLES",
    "HERE",
    "LABEL",
    "NODES",
    "RESV_PORTS",
    "STANDIN",
    "cluster",
    "job_env",
    "launch",
    "reports",
    "require_hpc",
    "sbatch",
    "write_labels",
]

#: Ports Slurm may reserve for steps (slurm.conf ``MpiParams=ports=``). With it set, Slurm
#: 22.05 reserves ports for EVERY step (tasks per node + 1 of them, SLURM_STEP_RESV_PORTS
#: ``12001-12003``), not only for ``srun --resv-ports=N``.
RESV_PORTS = "12000-12999"
#: True when the jobs run the stand-in instead of derive-env (module doc).
STANDIN = os.environ.get("E2E_HPC_STANDIN") == "1"


def require_hpc(*programs: str, modules: tuple[str, ...] = ()) -> None:
    """Skip (FAIL under CI=true, sessions.require) unless a Slurm cluster can run here, every
    program in ``programs`` is installed, derive-env is next to this Python and every module
    in ``modules`` is importable by it."""
    ok, why = can_run_slurm()
    require(ok, f"cannot run a Slurm cluster: {why}")
    for prog in programs:
        require(find_program(prog) is not None, f"`{prog}` not installed")
    exe = venv_bin() / "derive-env"
    require(exe.exists(), f"no derive-env next to {sys.executable} ({exe})")
    import importlib.util

    for module in modules:
        require(importlib.util.find_spec(module) is not None,
                f"{module} is not importable by {sys.executable}")


@contextmanager
def cluster(ssh: bool = False, resv_ports: str | None = None) -> Iterator[SlurmCluster]:
    """A fresh SlurmCluster (unique namespace prefix; sshd on every node when ``ssh``;
    ``resv_ports``: slurm.conf's MpiParams=ports=, e.g. RESV_PORTS),
    removed on exit, also when a test failed; then asserts that nothing of it is left
    (slurmcluster.leftovers: namespaces, /etc/netns folders, files, processes)."""
    prefix = f"dh{os.getpid() % 10000}x{random.randrange(1000)}"
    with SlurmCluster(prefix=prefix, ssh=ssh, resv_ports=resv_ports) as slurm:
        yield slurm
    assert leftovers(prefix, slurm.tmp) == []


def write_labels(slurm: SlurmCluster, labels: Mapping[str, str]) -> Path:
    """Write the image's labels (short keys: ``frameworks`` means
    ``ai.backend.distributed.frameworks``) as a JSON labels file on the cluster's shared
    folder, readable by every node; return its path (for DERIVE_ENV_LABELS_FILE)."""
    path = slurm.tmp / "shared" / f"labels-{random.randrange(10**9)}.json"
    path.write_text(json.dumps({LABEL + k: v for k, v in labels.items()}))
    path.chmod(0o644)
    return path


def job_env(labels_file: Path, **extra: str) -> dict[str, str]:
    """What the user's shell exports before ``srun``/``mpirun`` (on top of the cluster's
    client environment): sessions.BASE_ENV (GLOO_SOCKET_IFNAME=eth0, no GPU, unbuffered
    Python), the labels file, ``extra``; no proxy for traffic between the nodes."""
    env = {**BASE_ENV, "DERIVE_ENV_LABELS_FILE": str(labels_file)}
    if any("_proxy" in k.lower() for k in os.environ):
        env.update(no_proxy="*", NO_PROXY="*", no_grpc_proxy="*")
    env.update(extra)
    return env


def launch(layer: str, master: str, port: int) -> list[str]:
    """The argv every task starts with, before the user's command: ``derive-env --``, or
    with E2E_HPC_STANDIN=1 the stand-in told ``layer`` (``process``/``node``), the
    ``master`` host and the master ``port`` the test expects."""
    if STANDIN:
        return [sys.executable, str(HERE / "standin.py"), layer, master, str(port), "--"]
    return [str(venv_bin() / "derive-env"), "--"]


def sbatch(slurm: SlurmCluster, options: list[str], command: list[str], env: Mapping[str, str],
           timeout: float) -> tuple[HostResult, str]:
    """Submit a batch script that execs ``command`` with ``sbatch --wait --time=2 OPTIONS``
    (on the login node, ``env`` on top of the client's, which sbatch exports to the script)
    and wait for the job, at most ``timeout`` s. Returns (sbatch's result: its exit status is
    the job's, the job's output file's text; empty when it wrote none)."""
    name = f"batch-{random.randrange(10**9)}"
    script = slurm.tmp / "shared" / f"{name}.sh"
    output = slurm.tmp / "shared" / f"{name}.out"
    script.write_text(f"#!/bin/sh\nexec {shlex.join(command)}\n")
    script.chmod(0o755)
    argv = ["sbatch", "--wait", "--time=2", "-o", str(output), *options, str(script)]
    res = slurm.run(argv, timeout=timeout, env=env)
    return res, output.read_text(errors="replace") if output.exists() else ""


def reports(res: HostResult, count: int, key: str, output: str | None = None,
            ) -> list[dict[str, object]]:
    """The workers' JSON reports in ``res.stdout`` (or in ``output``: a batch job's output
    file), one line each, sorted by ``key`` (a report key such as ``rank``); fails the test
    with the whole output unless the launcher exited 0 in time and exactly ``count``
    workers reported, each ok."""
    text = res.stdout if output is None else output
    assert res.ok, res.describe(tail=6000) + f"\n--- output:\n{text[-6000:]}"
    found = json_lines(text)
    shown = f"{res.describe(6000)}\n--- output:\n{text[-6000:]}"
    assert len(found) == count, f"{len(found)} reports, expected {count}\n{shown}"
    bad = [r for r in found if not r.get("ok")]
    assert not bad, f"workers failed: {bad}\n{shown}"
    return sorted(found, key=lambda r: r[key])  # type: ignore[arg-type,return-value]
