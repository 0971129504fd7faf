"""The code blocks users copy from README.md and docs/*.md are at least well formed.

Every ```` ```sh ```` block must pass ``sh -n`` (POSIX syntax, checked by dash when it is
installed, else by ``sh``), every ```` ```python ```` block must compile, and every
```` ```json ```` block must parse. This does not run them: it catches the typo, the
unbalanced quote or the stray ``fi`` that makes a copied command fail before it starts.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
_OPEN = re.compile(r"^```([A-Za-z0-9_+-]*)\s*$")
SHELL = shutil.which("dash") or "sh"


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


def _cases(language: str) -> list[tuple[str, str]]:
    return [
        (f"{page.relative_to(REPO)}:{line}", code)
        for page in PAGES
        for lang, line, code in blocks(page.read_text(encoding="utf-8"))
        if lang == language
    ]


SH = _cases("sh")
PYTHON = _cases("python")
JSON = _cases("json")


@pytest.mark.parametrize(("where", "code"), SH, ids=[w for w, _ in SH])
def test_shell_blocks_parse(where: str, code: str) -> None:
    result = subprocess.run(
        [SHELL, "-n"], input=code, capture_output=True, text=True, timeout=30, check=False
    )
    assert (result.returncode, result.stderr) == (0, ""), where


@pytest.mark.parametrize(("where", "code"), PYTHON, ids=[w for w, _ in PYTHON])
def test_python_blocks_compile(where: str, code: str) -> None:
    compile(code, where, "exec")


@pytest.mark.parametrize(("where", "code"), JSON, ids=[w for w, _ in JSON])
def test_json_blocks_parse(where: str, code: str) -> None:
    json.loads(code)


def test_the_backendai_page_has_its_commands() -> None:
    """The page's shell blocks are found (a changed fence style would silently skip them)."""
    assert len([w for w, _ in SH if w.startswith("docs/backendai.md:")]) >= 8
    assert len([w for w, _ in PYTHON if w.startswith("docs/backendai.md:")]) == 2


def test_a_broken_block_is_caught() -> None:
    (lang, line, code), = blocks("text\n```sh\nif true; then\n  echo x\n```\n")
    assert (lang, line, code) == ("sh", 3, "if true; then\n  echo x\n")
    result = subprocess.run(
        [SHELL, "-n"], input=code, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode != 0
