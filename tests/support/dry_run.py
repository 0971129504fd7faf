"""The installed command as a user runs it: ``printf '%s\\n' VAR=value ... | derive-env
--dry-run --env-file - --frameworks ...``, its exit status and what it printed."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from helpers import console_script


def dry_run(lines: Sequence[str], frameworks: str = "pytorch") -> tuple[int, str, str]:
    """``(exit status, stdout, stderr)`` of a dry run over the env file ``lines``; nothing of
    this process's environment reaches it but ``PATH``."""
    done = subprocess.run(
        [console_script(), "--dry-run", "--env-file", "-", "--frameworks", frameworks],
        input="".join(f"{line}\n" for line in lines), capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}, timeout=60, check=False)
    return done.returncode, done.stdout, done.stderr
