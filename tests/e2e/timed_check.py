"""``derive-env check`` timed by the shell around it, for the e2e tests of the check:
tests/e2e/test_e2e_check.py (over SSH, Slurm and MPI) and test_e2e_k8s_check.py (as the pods'
init containers). Each node prints ``elapsed HOST MILLISECONDS`` after the check's output,
and every check must end within its bound plus a small slack for the interpreter's start.
"""

from __future__ import annotations

import random
import re


def timed_check(options: str = "", before: str = "") -> str:
    """A shell command: ``before``, then ``derive-env check OPTIONS`` timed; its status is
    the check's."""
    check = f"derive-env check {options}".rstrip()
    return (f"{before}s=$(date +%s%N); {check}; rc=$?; "
            'echo "elapsed $(hostname) $(( ($(date +%s%N) - s) / 1000000 ))"; exit $rc')


def elapsed(text: str) -> dict[str, float]:
    """Host -> seconds of each check in ``text`` (its ``elapsed HOST MS`` lines)."""
    return {h: int(ms) / 1000 for h, ms in re.findall(r"elapsed (\S+) (\d+)", text)}


def check_port() -> int:
    """A random master port for one job's check (20000-29999)."""
    return random.randrange(20000, 30000)
