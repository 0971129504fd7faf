"""The one way an example worker reports: ONE JSON line on stdout, then its exit status.

Imported by the workers beside it (run as ``python examples/training/<worker>.py``, so this
folder is on ``sys.path``). The line is written with a single write(2): several workers of
one container can share one stdout, and print() under PYTHONUNBUFFERED writes text and
newline separately, so their lines would interleave.
"""

from __future__ import annotations

import json
import os
import sys

#: The launcher's own identity variables of a task (which task a report came from), when set.
LAUNCHER_IDS = (
    "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEP_RESV_PORTS", "SLURM_PROCID", "SLURM_LOCALID",
    "SLURM_NODEID",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "MPI_LOCALRANKID",
)


def launcher_ids() -> dict[str, str]:
    """The variables of :data:`LAUNCHER_IDS` this process has (name -> value)."""
    return {k: os.environ[k] for k in LAUNCHER_IDS if k in os.environ}


def fail(report: dict[str, object], exc: BaseException) -> None:
    """Record ``exc`` in ``report`` (shortened to 3000 characters) and mark it not ok."""
    report["error"] = f"{type(exc).__name__}: {exc}"[:3000]
    report["ok"] = False


def emit(report: dict[str, object]) -> int:
    """Write ``report`` as one JSON line; return 0 when ``report["ok"]`` is true, else 1."""
    sys.stdout.flush()
    os.write(1, (json.dumps(report, sort_keys=True) + "\n").encode())
    return 0 if report.get("ok") else 1
