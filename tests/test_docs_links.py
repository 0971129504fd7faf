"""Every relative link in README.md and docs/**/*.md leads somewhere.

A link ``[text](path)`` or ``[text](path#anchor)`` outside code must name a file or
folder that exists, relative to the page it is in; an ``#anchor`` into a Markdown page
(or the page itself) must be one of that page's headings, slugged as GitHub renders them
(lower case, punctuation other than ``-`` and ``_`` dropped, spaces to ``-``, a repeated
heading gets ``-1``, ``-2``, ...). Links with a scheme (``https:``, ``mailto:``) are not
followed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("**/*.md")])

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+).*?\1")
_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str) -> list[str]:
    """The lines of a Markdown page outside fenced code blocks, with code spans removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(_CODE_SPAN.sub("", line))
    return lines


def links(text: str) -> list[str]:
    """Link targets of a Markdown page, in order, leaving out those inside code."""
    return [m.group(1) for line in _prose_lines(text) for m in _LINK.finditer(line)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (without the leading ``#``s)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").replace("*", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a Markdown page, repeated headings numbered as GitHub does."""
    seen: dict[str, int] = {}
    result = set()
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """The relative links of ``page`` that lead nowhere, each with the reason (paths shown
    relative to ``root``)."""
    problems = []
    for target in links(page.read_text(encoding="utf-8")):
        if _SCHEME.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            problems.append(f"{target}: no such file {os.path.relpath(dest, root)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            problems.append(f"{target}: no heading #{anchor} in {os.path.relpath(dest, root)}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


def test_the_pages_are_found() -> None:
    names = {str(p.relative_to(REPO)) for p in PAGES}
    assert {"README.md", "docs/backendai.md", "docs/operator-guide.md",
            "docs/sources/slurm.md", "docs/sources/mpi.md"} <= names


def test_links_skip_code_and_keep_anchors() -> None:
    text = (
        "See [a](docs/a.md#one-two) and ![img](x.png).\n"
        "`[not](code.md)` inline\n"
        "```\n[fenced](nope.md)\n```\n"
        "[web](https://example.org) [self](#top)\n"
    )
    assert links(text) == ["docs/a.md#one-two", "x.png", "https://example.org", "#top"]


def test_slugs_follow_github() -> None:
    assert slug("7. Backend.AI sessions: main1, terminals, host network") == (
        "7-backendai-sessions-main1-terminals-host-network"
    )
    assert slug("JAX_NUM_PROCESSES, JAX_PROCESS_ID") == "jax_num_processes-jax_process_id"
    assert slug('"What would container sub2 get?"') == "what-would-container-sub2-get"
    assert slug("The `--explain` node list") == "the---explain-node-list"
    text = "# Top\n## Same\n```\n## Same\n```\n## Same\n"
    assert anchors(text) == {"top", "same", "same-1"}


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# Here\n")
    page.write_text("[ok](there.md#here) [gone](missing.md) [bad](there.md#nowhere)\n")
    assert broken_links(page, tmp_path) == [
        "missing.md: no such file missing.md",
        "there.md#nowhere: no heading #nowhere in there.md",
    ]
