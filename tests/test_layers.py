"""The pipeline's layering, on the import statements of every module: the allow-list of
docs/architecture.md section 2, read from the doc, exact both ways (every import allowed,
every rule used); and no import cycle anywhere in src/.

Imports inside functions (lazy ones) count; those under ``if TYPE_CHECKING:`` serve
annotations only and do not.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "derive_env"
DOC = ROOT / "docs" / "architecture.md"

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




def _rules(text: str) -> dict[str, set[str]]:
    """Section 2's block: ``name -> target, target`` per line (a line starting with blanks
    continues the previous one), each name as written (``render/``, ``frameworks.context``)."""
    section = text.split("## 2. Who may import whom", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    rules: dict[str, set[str]] = {}
    last = None
    for line in block.splitlines():
        if not line.strip():
            continue
        if line[0].isspace() and last is not None:
            rules[last] |= {t.strip() for t in line.split(",") if t.strip()}
            continue
        name, arrow, targets = line.partition("->")
        assert arrow, f"docs/architecture.md section 2: not 'name -> targets': {line!r}"
        last = name.strip()
        rules[last] = {t.strip() for t in targets.split(",") if t.strip()}
    return rules


RULES = _rules(DOC.read_text(encoding="utf-8"))


def _full(name: str) -> str:
    """A doc name as a module name (``render/`` -> ``derive_env.render``)."""
    bare = name.rstrip("/")
    return "derive_env" if bare == "__init__" else f"derive_env.{bare}"


def _covers(name: str, module: str) -> bool:
    """The doc name ``name`` covers ``module``: the module itself, or any module of the
    package when it ends in ``/``."""
    full = _full(name)
    return module == full or (name.endswith("/") and module.startswith(full + "."))


def _rule_of(module: str) -> str | None:
    """The rule for ``module``: its own line, else its package's."""
    found = [name for name in RULES if _covers(name, module)]
    return max(found, key=len) if found else None


def _package_of(rule: str) -> str | None:
    return _full(rule) if rule.endswith("/") else None


def _edges() -> dict[str, set[str]]:
    """Module -> the ``derive_env`` modules it imports (TYPE_CHECKING blocks left out)."""
    edges = {}
    for path in MODULES:
        name = _module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported = _imports(ast.parse(path.read_text(encoding="utf-8")), package)
        edges[name] = {m for m in imported if m in KNOWN and m not in (name, "derive_env")}
    return edges


EDGES = _edges()


def _outside(module: str, rule: str, imported: set[str]) -> set[str]:
    """The imports of ``module`` that leave its package (all, for a module's own rule)."""
    package = _package_of(rule)
    return {m for m in imported
            if package is None or not (m == package or m.startswith(package + "."))}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_every_import_is_allowed_by_the_doc(path: Path) -> None:
    name = _module_name(path)
    rule = _rule_of(name)
    assert rule is not None, f"docs/architecture.md section 2 has no line for {name}"
    wrong = sorted(m for m in _outside(name, rule, EDGES[name])
                   if not any(_covers(target, m) for target in RULES[rule]))
    assert wrong == [], f"{name} imports {wrong}, which section 2 does not allow ({rule})"


def test_every_rule_of_the_doc_is_used() -> None:
    """The block says no more than the code does."""
    used: dict[str, set[str]] = {rule: set() for rule in RULES}
    for name, imported in EDGES.items():
        rule = _rule_of(name)
        if rule is None:
            continue
        for module in _outside(name, rule, imported):
            used[rule] |= {t for t in RULES[rule] if _covers(t, module)}
    unused = {rule: sorted(RULES[rule] - used[rule]) for rule in RULES if RULES[rule] - used[rule]}
    assert unused == {}, "section 2 allows imports no module makes: remove them"


def _cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_no_import_cycle() -> None:
    """No module reaches itself through imports, lazy ones included."""
    assert [sorted(c) for c in _cycles(EDGES)] == []


def test_the_cycle_finder_finds_a_lazy_cycle() -> None:
    """It can fail: a -> b at the top, b -> a inside a function."""
    tree = ast.parse("def f():\n    from derive_env.a import x\n")
    assert _imports(tree, "derive_env") == {"derive_env.a"}
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [frozenset({"a", "b"})]
    assert _cycles({"a": {"b"}, "b": set()}) == []


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


TESTS = ROOT / "tests"


def _test_reaches(path: Path) -> list[str]:
    """What a test file does that only tests/support may offer: import a test module
    (``test_*``, a sibling's ``conftest``) or change ``sys.path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        found += [f"imports {n}" for n in names
                  if n.rpartition(".")[2].startswith("test_") or n.endswith(".conftest")]
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and ast.unparse(node.func.value) == "sys.path"):
            found.append(f"sys.path.{node.func.attr}")
    return found


#: Every Python file of tests/ (tests, helpers, conftests, the e2e harness and its scripts).
TEST_FILES = sorted(TESTS.rglob("*.py"))


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: str(p.relative_to(TESTS)))
def test_no_test_reaches_into_another(path: Path) -> None:
    """Every file of tests/, the e2e harness and its scripts included: builders, strategies
    and loaders live in tests/support, the e2e harness in tests/e2e's helper modules; tests/
    and tests/e2e are on the path (pyproject.toml's pythonpath; the scripts run with
    ``PYTHONPATH=tests``, their own folder being on the path already)."""
    assert _test_reaches(path) == []


def test_every_file_of_tests_is_checked() -> None:
    """The rule's files include the e2e harness, its tests and its scripts."""
    names = {str(p.relative_to(TESTS)) for p in TEST_FILES}
    assert {"e2e/conftest.py", "e2e/engine.py", "e2e/demo.py", "e2e/record_envs.py",
            "e2e/test_e2e_sagemaker.py", "conftest.py", "support/recorded.py"} <= names


def test_the_test_checker_sees_a_reach(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text("import sys\nsys.path.insert(0, 'e2e')\nfrom test_slurm import step\n"
                     "def f():\n    from sources.conftest import manifest\n")
    assert sorted(_test_reaches(probe)) == [
        "imports sources.conftest", "imports test_slurm", "sys.path.insert"]
