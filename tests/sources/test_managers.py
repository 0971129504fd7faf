"""sources/managers/: a manager module imports the kit and the base modules, never another
manager's module (its own split modules aside), and every one is named by a table line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from derive_env.sources import SOURCES

MANAGERS = Path(__file__).resolve().parents[2] / "src" / "derive_env" / "sources" / "managers"
PREFIX = "derive_env.sources.managers."
#: A manager split in modules for its own grammar or order: the modules it may import.
OWN = {"slurm": {"slurm_hostlist"}, "backendai": {"backendai_order"}}


def _imported(path: Path) -> set[str]:
    """The managers' modules ``path`` imports, lazily or not."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith(PREFIX):
                found.add(node.module.removeprefix(PREFIX))
            elif node.module == PREFIX[:-1]:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix(PREFIX) for a in node.names
                         if a.name.startswith(PREFIX))
    return found


@pytest.mark.parametrize("path", sorted(MANAGERS.glob("[!_]*.py")), ids=lambda p: p.stem)
def test_a_manager_imports_no_other_manager(path: Path) -> None:
    assert _imported(path) <= OWN.get(path.stem, set())


def test_every_manager_module_is_read_by_a_line_or_is_a_split_of_one() -> None:
    named = {line.module.removeprefix("managers.") for line in SOURCES
             if line.module and line.module.startswith("managers.")}
    split = set().union(*OWN.values())
    assert {path.stem for path in MANAGERS.glob("[!_]*.py")} == named | split
    assert {line.module for line in SOURCES if line.module and "." not in line.module} == {
        "roles"}
