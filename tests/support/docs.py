"""The code blocks of README.md and docs/: every page, its fenced blocks, and the checked
``console`` examples (a command and the output the page shows), for
tests/test_docs_snippets.py and tests/regen_docs_examples.py.
"""

from __future__ import annotations

import re

from support import REPO

PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("**/*.md")])


_OPEN = re.compile(r"^```([A-Za-z0-9_+-]*)\s*$")


def blocks(text: str) -> list[tuple[str, int, str]]:
    """The fenced code blocks of a Markdown page: (language, first line number, code)."""
    found, lang, start, lines = [], None, 0, []
    for number, line in enumerate(text.splitlines(), 1):
        if lang is None:
            match = _OPEN.match(line)
            if match:
                lang, start, lines = match.group(1), number + 1, []
        elif line.strip() == "```":
            found.append((lang, start, "\n".join(lines) + "\n"))
            lang = None
        else:
            lines.append(line)
    return found


def console_examples(text: str) -> list[tuple[int, str, str]]:
    """The checked ``console`` blocks of a page: (line of the command, command, output).

    A block is checked when its first line starts a command (``$ ``) that runs
    ``derive-env`` with ``--env-file`` (a pipe into ``--env-file -`` included) and no later
    line starts another command: a block of several commands shows a session, not one
    output.
    """
    found = []
    for lang, line, code in blocks(text):
        lines = code.splitlines()
        if lang != "console" or not lines or not lines[0].startswith("$ "):
            continue
        end = 0
        while lines[end].endswith(("\\", "|")) and end + 1 < len(lines):
            end += 1
        command = "\n".join(lines[: end + 1])[2:]
        output = lines[end + 1:]
        runs = "derive-env " in command and "--env-file" in command
        if runs and not any(o.startswith("$ ") for o in output):
            found.append((line, command, "".join(o + "\n" for o in output)))
    return found

