"""Every relative link in README.md and docs/**/*.md leads somewhere.

A link ``[text](path)`` or ``[text](path#anchor)`` outside code must name a file or
folder that exists, relative to the page it is in; an ``#anchor`` into a Markdown page
(or the page itself) must be one of that page's headings, slugged as GitHub renders them
(lower case, punctuation other than ``-`` and ``_`` dropped, spaces to ``-``, a repeated
heading gets ``-1``, ``-2``, ...). Links with a scheme (``https:``, ``mailto:``) are not
followed.

And no page or source file names a document the user does not have: every ``*.md`` named in
README.md, docs/ or src/ (in prose, code spans, code blocks or docstrings) is a file of the
repository, and no design note's section is cited ("contract section 8"); docs/behaviour.md
has the thirteen numbered sections the code cites as "docs/behaviour.md section N".
"""

from __future__ import annotations

import functools
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
    """Link targets of a Markdown page, in order, leaving out those inside code; a link whose
    text runs over a line break is found too (the lines of a paragraph are joined)."""
    paragraphs = re.split(r"\n\s*\n", "\n".join(_prose_lines(text)))
    return [m.group(1) for paragraph in paragraphs
            for m in _LINK.finditer(paragraph.replace("\n", " "))]


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
        "a [link over\ntwo lines](two.md#lines)\n"
    )
    assert links(text) == ["docs/a.md#one-two", "x.png", "https://example.org", "#top",
                           "two.md#lines"]


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


# ----------------------------------------------- Markdown files named in prose or code

#: A Markdown file's name as a page or a docstring writes it: ``docs/ports.md``,
#: ``../operator-guide.md``, ``README.md`` (a URL is recognised by its ``://`` and skipped).
_MD_NAME = re.compile(r"[A-Za-z0-9_.:/~-]*[A-Za-z0-9_-]\.md\b")
#: A design note's section cited instead of a file: "contract section 8", "contract, section 9",
#: "contract 7".
_NOTE_SECTION = re.compile(r"\bcontract(?:,? sections?)? \d", re.IGNORECASE)
SOURCES = sorted(p for p in (REPO / "src").rglob("*.py"))
NAMED_IN = PAGES + SOURCES


@functools.cache
def _repo_basenames(root: Path) -> frozenset[str]:
    """The names of the repository's ``*.md`` files (hidden folders such as .venv and .git,
    and build output, left out)."""
    names = set()
    for _folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in {"build", "dist"}]
        names |= {name for name in files if name.endswith(".md")}
    return frozenset(names)


def missing_md_names(path: Path, root: Path = REPO) -> list[str]:
    """The ``*.md`` names in ``path`` (prose, code spans, code blocks, docstrings) that name
    no file of the repository, and every design-note section cited, each as ``line: name``.

    A name is found when it is a path from the file's own folder, from the repository's
    root, from its docs/ folder, or from the repository's copy named ``derive-env/`` (the
    build context of docs/backendai.md's image); a bare name (no ``/``) is also found when
    any file of the repository has that name. ``https://...`` addresses are not followed.
    """
    basenames = _repo_basenames(root)
    problems = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for match in _MD_NAME.finditer(line):
            name = match.group(0)
            if "://" in name or line[max(0, match.start() - 3):match.start()] == "://":
                continue
            bare = name.split("#", 1)[0]
            inside = bare.removeprefix("derive-env/")
            places = [path.parent / bare, root / inside, root / "docs" / bare]
            if any(p.exists() for p in places) or ("/" not in bare and bare in basenames):
                continue
            problems.append(f"{number}: {name}")
        problems += [f"{number}: {m.group(0)}" for m in _NOTE_SECTION.finditer(line)]
    return problems


@pytest.mark.parametrize("path", NAMED_IN, ids=[str(p.relative_to(REPO)) for p in NAMED_IN])
def test_every_md_file_named_exists(path: Path) -> None:
    assert missing_md_names(path) == []


def test_a_missing_md_name_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "ports.md").write_text("# Ports\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "See [ports](ports.md), `docs/ports.md` and ports.md#1-window.\n"
        "The rules are in contract.md (contract section 8), and `sources-cloud.md`.\n"
        "Named, not kept: the node (contract 7).\n"
        "https://github.com/o/r/blob/main/README.md is not ours; nor docs/gone.md.\n"
        "COPY derive-env/docs/ports.md /x\n")
    assert missing_md_names(page, tmp_path) == [
        "2: contract.md", "2: sources-cloud.md", "2: contract section 8", "3: contract 7",
        "4: docs/gone.md"]


# --------------------------------------------------- the sections of docs/behaviour.md

BEHAVIOUR = REPO / "docs" / "behaviour.md"
_BEHAVIOUR_SECTION = re.compile(r"docs/behaviour\.md,? sections? (\d+)")


def behaviour_citations(text: str) -> list[int]:
    """The section numbers ``text`` cites as ``docs/behaviour.md section N`` (a citation
    broken over lines of comments or a docstring included)."""
    joined = re.sub(r"\n\s*(?:#:?\s*)?", " ", text)
    return [int(n) for n in _BEHAVIOUR_SECTION.findall(joined)]


def test_behaviour_has_its_thirteen_sections() -> None:
    numbered = re.findall(r"^## (\d+)\. (.+)$", BEHAVIOUR.read_text(encoding="utf-8"), re.M)
    assert numbered == [
        ("1", "What it is"), ("2", "Command line"), ("3", "Exec"), ("4", "Image labels"),
        ("5", "Backend.AI"), ("6", "Derived variables"), ("7", "Errors"),
        ("8", "The whole job (digest, preflight)"), ("9", "Labels for one session"),
        ("10", "Derived ports"), ("11", "Not opted in inside a larger job"),
        ("12", "Compositions"), ("13", "Platforms")]


def test_every_cited_behaviour_section_exists() -> None:
    cited = {str(path.relative_to(REPO)): behaviour_citations(path.read_text(encoding="utf-8"))
             for path in SOURCES}
    assert sum(len(numbers) for numbers in cited.values()) >= 30  # the code does cite it
    beyond = [f"{name}: section {n}" for name, numbers in cited.items() for n in numbers
              if not 1 <= n <= 13]
    assert beyond == []
    text = "(docs/behaviour.md section\n    #: 14) and docs/behaviour.md section 8"
    assert behaviour_citations(text) == [14, 8]


def test_the_readme_and_the_docs_stay_short() -> None:
    """The README fits on a few screens (150 lines) and README + docs/ stay readable in an
    afternoon (45,000 words, the changelog aside: it grows with every release)."""
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 150
    words = sum(len(page.read_text(encoding="utf-8").split()) for page in PAGES
                if page.name != "CHANGELOG.md")
    assert words <= 45_000
