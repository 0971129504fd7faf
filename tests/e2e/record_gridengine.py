"""Record the environments real Grid Engine jobs give their processes, as fixtures for the
gridengine source (sources/managers/gridengine.py).

Runs each scenario of SCENARIOS on a real :class:`gecluster.GridEngineCluster` (Son of Grid
Engine 8.1.9 from Debian, Open MPI 4.1 ``mpirun``); every process of a scenario writes ``env
-0`` to a file; the recorder keeps the variables a source may read (:func:`kept`) and writes
``tests/fixtures/gridengine/<scenario>/<n>.env`` (record_envs.dump_env's dotenv, first line
``# ran on: <host>``) plus the job's ``pe_hostfile`` and ``tests/fixtures/gridengine/README.md``.

Run it as root (network namespaces), from the repository root::

    PYTHONPATH=tests .venv/bin/python tests/e2e/record_gridengine.py

Stable across runs: job ids (a fresh qmaster numbers jobs from 1; the scenarios run in
order), host names. The scheduler picks the master host (the hosts' load), so the order
of PE_HOSTFILE may differ from run to run; the fixtures keep the recorded one. The
cluster's temporary folder is replaced by RUN_DIR; QRSH_PORT's port varies per run.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from gecluster import GridEngineCluster
from record_envs import RAN_ON, dump_env, load_env, load_fixture

__all__ = ["FIXTURES", "RUN_DIR", "SCENARIOS", "kept", "load_env", "load_fixture"]

#: Where the fixtures live (one folder per scenario).
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gridengine"
#: Stands for the cluster's temporary folder in recorded values.
RUN_DIR = "/tmp/derive-sge-run"
#: Variables a source may read: what sge_execd sets (exec_job.c), qrsh's, Open MPI's.
KEPT_NAMES = frozenset({
    "JOB_ID", "JOB_NAME", "JOB_SCRIPT", "PE", "PE_HOSTFILE", "NHOSTS", "NSLOTS", "NQUEUES",
    "HOSTNAME", "QUEUE", "ENVIRONMENT", "RESTARTED", "REQNAME", "REQUEST", "ARC",
    "QRSH_PORT", "TMPDIR"})
KEPT_PREFIXES = ("SGE_", "OMPI_COMM_WORLD_", "OMPI_UNIVERSE_SIZE")
#: Per-run values of a scenario's client side (the submit host's), left out.
_DROPPED = frozenset({"SGE_O_PATH", "SGE_O_HOME", "SGE_O_SHELL", "SGE_O_LOGNAME"})

#: A process's capture: its whole environment, NUL-separated, into the scenario's folder.
CAP = 'env -0 > "{out}/$(hostname).$$.env0"'
#: name -> (qsub options, job script after ``cd``, what it shows).
SCENARIOS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "master-task": (("-pe", "rr", "6"), CAP,
                    "the job script (master task) of a PE job of 6 slots on 3 hosts"),
    "qrsh-inherit-V": (("-pe", "rr", "6"),
                       'for h in $(awk \'{print $1}\' "$PE_HOSTFILE"); do qrsh -inherit -V '
                       '"$h" sh -c \'' + CAP + '\' & done; wait',
                       "one qrsh -inherit -V task per host (PE_HOSTFILE passed on)"),
    "qrsh-inherit": (("-pe", "rr", "6"),
                     'for h in $(awk \'{print $1}\' "$PE_HOSTFILE"); do qrsh -inherit '
                     '"$h" sh -c \'' + CAP + '\' & done; wait',
                     "one qrsh -inherit task per host, without -V (no PE_HOSTFILE)"),
    "mpirun": (("-pe", "rr", "6"),
               "mpirun.openmpi --allow-run-as-root -n 6 sh -c '" + CAP + "'",
               "mpirun -n 6 in the job script: Open MPI's ranks (qrsh -inherit -V daemons)"),
    "two-queues": (("-pe", "rr", "9"), CAP,
                   "the job script of a PE job of 9 slots: every host in all.q and extra.q, "
                   "so listed twice in PE_HOSTFILE"),
    "one-host": (("-pe", "one", "1"), CAP, "the job script of a PE job of one slot"),
    "array": (("-pe", "one", "2", "-t", "1-2"), CAP,
              "the job scripts of an array PE job (SGE_TASK_ID 1 and 2)"),
}


def kept(env: Mapping[str, str], run_dir: str) -> dict[str, str]:
    """The variables of ``env`` a source may read, the run's folder replaced by RUN_DIR."""
    return {k: env[k].replace(run_dir, RUN_DIR) for k in sorted(env)
            if (k in KEPT_NAMES or k.startswith(KEPT_PREFIXES)) and k not in _DROPPED}


def record(ge: GridEngineCluster, name: str) -> None:
    """Run scenario ``name`` and write its fixtures (replacing the folder)."""
    options, body, _ = SCENARIOS[name]
    raw = ge.tmp / "shared" / f"rec-{name}"
    raw.mkdir()
    script = raw / "job.sh"
    script.write_text(f'#!/bin/sh\ncp "$PE_HOSTFILE" "{raw}/pe_hostfile.$SGE_TASK_ID"\n'
                      + body.replace("{out}", str(raw)) + "\n")
    res = ge.run(["qsub", "-V", "-sync", "y", "-cwd", "-o", str(raw / "out"), "-j", "y",
                  *options, str(script)], timeout=120)
    if not res.ok:
        raise RuntimeError(f"{name}: {res.describe()}")
    target = FIXTURES / name
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for hostfile in sorted(raw.glob("pe_hostfile.*")):
        suffix = hostfile.suffix.lstrip(".")
        (target / ("pe_hostfile" if suffix == "undefined" else f"pe_hostfile.{suffix}")
         ).write_text(hostfile.read_text())
    envs = []
    for path in raw.glob("*.env0"):
        text = path.read_text(errors="replace")
        # qrsh -inherit without -V runs the command so that env -0 writes newlines
        # (recorded): split on what the file has.
        env = dict(item.split("=", 1) for item in text.split("\0" if "\0" in text else "\n")
                   if "=" in item)
        envs.append((path.name.split(".")[0], kept(env, str(ge.tmp))))
    envs.sort(key=lambda e: (e[1].get("SGE_TASK_ID", ""),
                             int(e[1].get("OMPI_COMM_WORLD_RANK", "0")), e[0]))
    for n, (host, env) in enumerate(envs):
        (target / f"{n}.env").write_text(f"{RAN_ON}{host}\n{dump_env(env)}")


def main() -> int:
    """Record every scenario on one fresh cluster; write the README."""
    with GridEngineCluster() as ge:
        for name in SCENARIOS:
            record(ge, name)
        versions = subprocess.run(["dpkg-query", "-W", "gridengine-exec", "openmpi-bin"],
                                  capture_output=True, text=True, check=False).stdout
    lines = ["# Recorded Grid Engine environments", "",
             "Written by `tests/e2e/record_gridengine.py` (do not edit): a real cluster of",
             "tests/e2e/gecluster.py (hosts sge-c3, sge-a1, sge-b2; queue all.q of 2 slots",
             "per host, extra.q of 1 slot per host; PE `rr` = $round_robin, PE `one` = 1",
             "slot per host).",
             f"The cluster's temporary folder reads `{RUN_DIR}`.", "", "Versions:", "",
             *[f"    {line}" for line in versions.splitlines()], "",
             "| scenario | qsub options | what |", "|---|---|---|"]
    lines += [f"| {name} | `{' '.join(o)}` | {about} |"
              for name, (o, _, about) in SCENARIOS.items()]
    (FIXTURES / "README.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
