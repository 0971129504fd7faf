"""Rewrite the output of every checked ``console`` example in README.md and docs/ with what
derive-env prints now (the examples tests/test_docs_snippets.py checks).

Run after a change of derive-env's output: ``.venv/bin/python tests/regen_docs_examples.py``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers import console_script
from support.docs import PAGES, REPO, blocks, console_examples


def run(command: str) -> str:
    """The example's output as the test runs it (same environment)."""
    env = {"PATH": f"{Path(console_script()).parent}:/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
    result = subprocess.run(["sh", "-c", command], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=60, check=False)
    return result.stderr + result.stdout


def main() -> int:
    changed = 0
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        checked = {line: (command, output) for line, command, output in console_examples(text)}
        # blocks() gives each block's first code line (1-based); rewrite bottom-up.
        for _lang, line, code in reversed(blocks(text)):
            if line not in checked:
                continue
            command, output = checked[line]
            new = run(command)
            if new == output:
                continue
            start = line - 1 + command.count("\n") + 1  # first output line (0-based)
            end = line - 1 + len(code.splitlines())      # the closing fence
            lines[start:end] = [new]
            changed += 1
        page.write_text("".join(lines), encoding="utf-8")
    print(f"{changed} example(s) rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
