"""The one way an e2e worker script reports: ONE JSON line on stdout, then its exit status.

Imported by the worker scripts (run as ``python tests/e2e/<worker>.py``, so this folder is on
``sys.path``). The line is written with a single write(2): several workers of one container
can share one stdout, and print() under PYTHONUNBUFFERED writes text and newline separately,
so their lines would interleave.
"""

from __future__ import annotations

import json
import os
import sys


def fail(report: dict[str, object], exc: BaseException) -> None:
    """Record ``exc`` in ``report`` (shortened to 3000 characters) and mark it not ok."""
    report["error"] = f"{type(exc).__name__}: {exc}"[:3000]
    report["ok"] = False


def emit(report: dict[str, object]) -> int:
    """Write ``report`` as one JSON line; return 0 when ``report["ok"]`` is true, else 1."""
    sys.stdout.flush()
    os.write(1, (json.dumps(report, sort_keys=True) + "\n").encode())
    return 0 if report.get("ok") else 1
