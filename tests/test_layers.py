"""The pipeline's layering, on the import statements of every module (docs/architecture.md
section 2): environment -> sources -> topology -> frameworks -> merge -> render or exec.

Imports under ``if TYPE_CHECKING:`` serve annotations only and are not counted.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "derive_env"

#: What each group of modules may NOT import (prefixes of module names).
FORBIDDEN: dict[str, tuple[str, ...]] = {
    # the shared types and rules: no stage at all
    "derive_env.errors": ("derive_env.",),
    "derive_env.hosts": ("derive_env.",),
    "derive_env.validation": ("derive_env.sources", "derive_env.frameworks", "derive_env.merge",
                              "derive_env.pipeline", "derive_env.render", "derive_env.cli",
                              "derive_env.policy"),
    "derive_env.topology": ("derive_env.sources", "derive_env.frameworks", "derive_env.merge",
                            "derive_env.pipeline", "derive_env.render", "derive_env.cli",
                            "derive_env.policy"),
    "derive_env.labels": ("derive_env.sources", "derive_env.frameworks.", "derive_env.merge",
                          "derive_env.pipeline", "derive_env.render", "derive_env.cli",
                          "derive_env.policy", "derive_env.topology"),
    "derive_env.ports": ("derive_env.sources", "derive_env.frameworks.", "derive_env.merge",
                         "derive_env.pipeline", "derive_env.render", "derive_env.cli",
                         "derive_env.policy"),
    "derive_env.policy": ("derive_env.sources", "derive_env.frameworks.", "derive_env.merge",
                          "derive_env.pipeline", "derive_env.render", "derive_env.cli"),
    "derive_env.tf_config": ("derive_env.sources", "derive_env.frameworks", "derive_env.merge",
                             "derive_env.pipeline", "derive_env.render", "derive_env.cli",
                             "derive_env.policy"),
    # the stages
    "derive_env.sources": ("derive_env.frameworks", "derive_env.merge", "derive_env.policy",
                           "derive_env.pipeline", "derive_env.render", "derive_env.cli",
                           "derive_env.launch", "derive_env.labels"),
    "derive_env.frameworks": ("derive_env.sources", "derive_env.merge", "derive_env.pipeline",
                              "derive_env.render", "derive_env.cli", "derive_env.launch"),
    "derive_env.merge": ("derive_env.sources", "derive_env.pipeline", "derive_env.render",
                         "derive_env.cli", "derive_env.launch", "derive_env.policy"),
    "derive_env.pipeline": ("derive_env.render", "derive_env.cli", "derive_env.launch"),
    "derive_env.render": ("derive_env.sources", "derive_env.frameworks", "derive_env.merge",
                          "derive_env.pipeline", "derive_env.policy", "derive_env.cli",
                          "derive_env.launch"),
    # the job digest reads a derivation (scopes, the FRAMEWORKS table), derives nothing
    "derive_env.digest": ("derive_env.sources", "derive_env.merge", "derive_env.pipeline",
                          "derive_env.render", "derive_env.cli", "derive_env.launch",
                          "derive_env.policy"),
    "derive_env.launch": ("derive_env.sources", "derive_env.frameworks", "derive_env.merge",
                          "derive_env.pipeline", "derive_env.render", "derive_env.cli"),
}


def _module_name(path: Path) -> str:
    parts = ("derive_env", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = sorted(SRC.rglob("*.py"))
KNOWN = {_module_name(path) for path in MODULES}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, package: str) -> set[str]:
    """Every module an import statement names (relative ones resolved), TYPE_CHECKING
    blocks left out."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            # ``from derive_env.sources import slurm`` imports a module; ``import FRAMEWORKS``
            # a name of one
            found.update(f"{base}.{alias.name}" for alias in node.names
                         if f"{base}.{alias.name}" in KNOWN)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found




def _group(name: str) -> str | None:
    for group in sorted(FORBIDDEN, key=len, reverse=True):
        if name == group or name.startswith(group + "."):
            return group
    return None


def _matches(module: str, prefix: str) -> bool:
    """``prefix`` names the module or a package above it; ending in ``.``: a submodule only
    (``derive_env.frameworks.``: not the table in ``frameworks/__init__``)."""
    if prefix.endswith("."):
        return module.startswith(prefix)
    return module == prefix or module.startswith(prefix + ".")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_import_goes_up_the_pipeline(path: Path) -> None:
    name = _module_name(path)
    group = _group(name)
    if group is None:
        return  # __init__, __main__ and cli/: the edge may import every stage
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    imported = _imports(ast.parse(path.read_text(encoding="utf-8")), package)
    wrong = sorted(module for module in imported for prefix in FORBIDDEN[group]
                   if _matches(module, prefix) and not _matches(module, group))
    assert wrong == [], f"{name} imports {wrong}"


def test_policy_reads_only_the_framework_table() -> None:
    imported = _imports(ast.parse((SRC / "policy.py").read_text()), "derive_env")
    assert {m for m in imported if m.startswith("derive_env.frameworks")} == {
        "derive_env.frameworks"}


def test_only_launch_execs() -> None:
    calls = {str(path.relative_to(SRC)) for path in MODULES
             if re.search(r"\bos\.exec[lv]", path.read_text(encoding="utf-8"))}
    assert calls == {"launch.py"}


def test_only_cli_and_main_import_cli() -> None:
    importers = set()
    for path in MODULES:
        name = _module_name(path)
        if name.startswith("derive_env.cli") or name == "derive_env.__main__":
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        if any(m.startswith("derive_env.cli") for m in _imports(ast.parse(path.read_text()),
                                                                  package)):
            importers.add(name)
    assert importers == set()


def test_the_checker_sees_a_wrong_import() -> None:
    """The rule can fail: a source importing the merge is caught, a TYPE_CHECKING one is not."""
    tree = ast.parse("from derive_env.merge import merge\nif TYPE_CHECKING:\n"
                     "    from derive_env.policy import ImagePolicy\n")
    assert _imports(tree, "derive_env.sources") == {"derive_env.merge"}
