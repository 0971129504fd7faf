"""The release (docs/architecture.md, section 7): one version, everywhere.

``derive-env --version``, the heading ``towncrier build --draft`` would write, the newest entry
of docs/CHANGELOG.md once no fragment is left, and the wheel names the docs show all carry
``__version__``; ``make release`` writes the changelog entry from changes/ and stops a second
time. Nothing here writes to the repository: the draft writes nothing, and ``make release``
runs on a copy in tmp (it deletes the fragments it used).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from derive_env import __version__
from helpers import console_script

REPO = Path(__file__).resolve().parents[1]
CHANGELOG = REPO / "docs" / "CHANGELOG.md"
HEADING = re.compile(r"^## (\d+\.\d+\.\d+) \((\d{4}-\d{2}-\d{2})\)$", re.MULTILINE)
FRAGMENT = re.compile(r"^\d+\.(feature|fix|doc)(\.\d+)?\.md$")
START = "<!-- towncrier release notes start -->\n"
#: The version a copy releases when this one is released already: the next patch version.
NEXT = ".".join([*__version__.split(".")[:2], str(int(__version__.split(".")[2]) + 1)])


def towncrier(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "towncrier", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def fragments(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.name != ".gitignore")


def test_version_is_0_2_1_and_derive_env_says_so() -> None:
    out = subprocess.run([console_script(), "--version"], capture_output=True, text=True,
                         timeout=60, env={"PATH": os.environ["PATH"]})
    assert (__version__, out.returncode, out.stdout) == ("0.2.1", 0,
                                                         "derive-env, version 0.2.1\n")


def test_every_fragment_is_named_as_towncrier_reads_it() -> None:
    names = fragments(REPO / "changes")  # none right after a release
    assert [name for name in names if not FRAGMENT.match(name)] == []


def makefile_version() -> str:
    """The version ``make release`` passes to towncrier (its VERSION, read from __init__.py)."""
    out = subprocess.run(["make", "--no-print-directory", "-s", "--eval",
                          "print-version: ; @echo $(VERSION)", "print-version"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_release_passes_this_version_to_towncrier() -> None:
    """Explicitly: towncrier's own lookup takes the installed distribution's metadata first,
    which is the old version until the checkout is installed again."""
    assert makefile_version() == __version__


def test_towncrier_draft_heads_the_entry_with_the_version_and_lists_every_fragment() -> None:
    before = CHANGELOG.read_text()
    out = towncrier("build", "--draft", "--version", __version__, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert [version for version, _ in HEADING.findall(out.stdout)] == [__version__]
    entries = [line for line in out.stdout.splitlines() if line.startswith("- ")]
    assert len(entries) == len(fragments(REPO / "changes"))
    assert CHANGELOG.read_text() == before  # the draft wrote nothing


def test_changelog_newest_entry_is_the_version_once_released() -> None:
    """Released (no fragment left): the newest entry is __version__. Fragments pending: the
    version has no entry yet (make release would refuse to write a second one)."""
    text = CHANGELOG.read_text()
    assert text.count(START) == 1
    released = [version for version, _ in HEADING.findall(text.split(START, 1)[1])]
    if fragments(REPO / "changes"):
        assert __version__ not in released
    else:
        assert released[:1] == [__version__]


def test_docs_name_the_wheel_of_this_version() -> None:
    wheels = set()
    for doc in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        wheels |= set(re.findall(r"derive_env-(\d[^-\s]*)-py3-none-any\.whl", doc.read_text()))
    assert wheels == {__version__}


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """What ``make release`` reads, copied: its fragments may be deleted there."""
    for name in ("Makefile", "pyproject.toml", "changes", "docs/CHANGELOG.md",
                 "src/derive_env/__init__.py"):
        source, target = REPO / name, tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy(source, target)
    # the release's own venv, as `make` made it: this venv's towncrier
    (tmp_path / ".venv-dist" / "bin").mkdir(parents=True)
    (tmp_path / ".venv-dist" / ".installed").touch()
    towncrier_script = tmp_path / ".venv-dist" / "bin" / "towncrier"
    towncrier_script.write_text(f"#!/bin/sh\nexec {sys.executable} -m towncrier \"$@\"\n")
    towncrier_script.chmod(0o755)
    if not fragments(tmp_path / "changes"):  # just released: the next release's first changes
        (tmp_path / "changes" / "1.feature.1.md").write_text("A feature.\n")
        (tmp_path / "changes" / "1.fix.1.md").write_text("A fix.\n")
        # the released version's entry is there: the copy releases the next one
        init = tmp_path / "src" / "derive_env" / "__init__.py"
        init.write_text(init.read_text().replace(f'"{__version__}"', f'"{NEXT}"'))
    return tmp_path


def make_release(folder: Path) -> subprocess.CompletedProcess[str]:
    # MAKE=true: the `$(MAKE) dist` step (wheel and sdist) is tests/test_packaging.py's
    return subprocess.run(["make", "--no-print-directory", "-o", ".venv-dist/.installed",
                           "release", "MAKE=true"], cwd=folder, capture_output=True, text=True,
                          timeout=180)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_release_writes_the_entry_and_consumes_the_fragments(copy: Path) -> None:
    count = len(fragments(copy / "changes"))
    version = re.search(r'__version__ = "(.*)"',
                        (copy / "src" / "derive_env" / "__init__.py").read_text()).group(1)
    out = make_release(copy)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"towncrier build --yes --version {version}\n" in out.stdout
    text = (copy / "docs" / "CHANGELOG.md").read_text()
    before, after = text.split(START)
    assert before == CHANGELOG.read_text().split(START)[0]
    assert HEADING.findall(after)[0][0] == version
    assert after.startswith(f"\n## {version} (")
    newest = after.split("\n## ")[1]  # the entry just written, up to the one before it
    assert len([line for line in newest.splitlines() if line.startswith("- ")]) == count
    assert fragments(copy / "changes") == []
    # a second release of the same version stops before writing anything
    again = make_release(copy)
    assert (again.returncode, again.stderr.splitlines()[0]) == (2, (
        f"make: docs/CHANGELOG.md has an entry for {version} already: set the new "
        "version in src/derive_env/__init__.py first"))
    assert (copy / "docs" / "CHANGELOG.md").read_text() == text
