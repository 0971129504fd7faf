"""The code blocks users copy from README.md and docs/**/*.md are well formed, and the
``derive-env`` examples print what the page shows.

Every ```` ```sh ```` block must pass ``sh -n`` (POSIX syntax, checked by dash when it is
installed, else by ``sh``), every ```` ```python ```` block must compile, and every
```` ```json ```` block must parse. This does not run them: it catches the typo, the
unbalanced quote or the stray ``fi`` that makes a copied command fail before it starts.

Every ```` ```console ```` block that holds ONE command, ``$ derive-env ... --env-file
FILE ...`` (continued by a trailing backslash or pipe; a pipe into ``--env-file -`` too), followed
by its output, IS run: by ``sh``
in the repository's folder, with the installed ``derive-env`` first on ``PATH`` and an
empty labels file, and its standard error then standard output must be exactly the lines
shown. ``--env-file`` makes the output independent of this machine (no host facts, no
files such as ``SLURM_HOSTFILE`` are read), so the examples cannot drift from the code.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import console_script
from support.docs import PAGES, REPO, blocks, console_examples

SHELL = shutil.which("dash") or "sh"


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
    assert len([w for w, _ in PYTHON if w.startswith("docs/backendai.md:")]) == 3


def test_a_broken_block_is_caught() -> None:
    (lang, line, code), = blocks("text\n```sh\nif true; then\n  echo x\n```\n")
    assert (lang, line, code) == ("sh", 3, "if true; then\n  echo x\n")
    result = subprocess.run(
        [SHELL, "-n"], input=code, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode != 0


EXAMPLES = [
    (f"{page.relative_to(REPO)}:{line}", command, output)
    for page in PAGES
    for line, command, output in console_examples(page.read_text(encoding="utf-8"))
]


@pytest.mark.parametrize(("where", "command", "output"), EXAMPLES,
                         ids=[w for w, _, _ in EXAMPLES])
def test_console_examples_print_what_the_page_shows(
    where: str, command: str, output: str, tmp_path: Path
) -> None:
    # As on a user's machine: no labels file (none at the default path, none named), so the
    # page's --frameworks or --label opts in, and --explain words it as the user sees it.
    assert not Path("/etc/derive-env/labels.json").exists()
    bin_dir = str(Path(console_script()).parent)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
    result = subprocess.run(
        ["sh", "-c", command], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=60, check=False,
    )
    assert result.stderr + result.stdout == output, where


def test_the_examples_are_found() -> None:
    """Each page with examples keeps them checked (a changed fence would skip them)."""
    pages = {w.rsplit(":", 1)[0] for w, _, _ in EXAMPLES}
    assert {"README.md", "docs/sources/README.md", "docs/sources/slurm.md",
            "docs/sources/mpi.md", "docs/sources/torchrun.md", "docs/sources/kubeflow.md",
            "docs/sources/kubernetes.md", "docs/sources/schedulers.md",
            "docs/sources/gridengine.md"} <= pages
    text = "```console\n$ derive-env --dry-run --env-file a.env \\\n    --explain\nout\n```\n"
    assert console_examples(text) == [(2, "derive-env --dry-run --env-file a.env \\\n"
                                          "    --explain", "out\n")]
    piped = "```console\n$ printf x |\n  derive-env --env-file -\nout\n```\n"
    assert console_examples(piped) == [(2, "printf x |\n  derive-env --env-file -", "out\n")]
    two = "```console\n$ derive-env --env-file a.env\nout\n$ other\n```\n"
    assert console_examples(two) == []
