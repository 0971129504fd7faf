"""Helpers shared by the command-line and exec-path tests (imported as ``helpers``)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser from PyPI (test extra `tomli`), for the TOML output tests
    import tomli as tomllib

__all__ = ["Execed", "console_script", "tomllib"]


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
