"""Helpers shared by the command-line and exec-path tests (imported as ``helpers``)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest


class Execed(Exception):
    """Raised by the fake exec (fixture ``fake_exec``): carries what would have been exec'd."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        super().__init__(repr(argv)[:300])  # a huge argv must not flood a failure report
        self.argv = argv
        self.env = env


def console_script() -> str:
    """The installed ``derive-env`` next to this Python (skip when there is none)."""
    candidate = Path(sys.executable).with_name("derive-env")
    found = str(candidate) if candidate.exists() else shutil.which("derive-env")
    if not found:
        pytest.skip("the derive-env console script is not installed next to this Python")
    return found


def require(ok: bool, reason: str) -> None:
    """Skip when ``ok`` is false; under ``CI=true`` FAIL instead (a silent skip in CI would
    report a framework or tool as proven when it was never run)."""
    if ok:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but this test cannot run: {reason}")
    pytest.skip(reason)
