"""Every text derive-env prints, read from the source (issue 15, item 6).

The walk collects every string literal of ``src/derive_env`` that is not a docstring (the
message templates of errors and warnings, ``--explain`` lines, ``--help`` texts; an
f-string's fixed parts with ``{}`` for each value) and holds the wording rules that can be
checked on a template:

* no text outside the Backend.AI source names a ``session`` unless it says
  ``Backend.AI session``: a value may come from enroot's hook, a Kubernetes pod spec or a
  Slurm job, and the advice must fit wherever it came from;
* the on-error label is advised through one constant (``errors.ON_ERROR_WARN``), so that the
  warning ``on-error=warn`` prints never advises setting it;
* the rank-0 placement fix is a command that works (``derive-env --dry-run --format
  openmpi-hostfile``), not "place rank 0 on the first node".
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "derive_env"
#: Modules whose texts speak of Backend.AI's own sessions.
BACKENDAI = ("sources/managers/backendai.py", "sources/managers/backendai_order.py")
#: Literals that hold the word on purpose: (module, text) -> why.
ALLOWED = {
    ("render/explain.py", "session"): "BACKENDAI_WORD, used only when the source is backendai",
    ("digest.py", "session"): "a digest fact's name (the manager's job or session id), no message",
}
_WORD = re.compile(r"(?<![A-Za-z_])sessions?(?![A-Za-z_])")


def texts(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of every non-docstring string literal in the module at ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    inside: set[int] = set()  # the constant parts of f-strings, read with their f-string
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            inside.update(id(v) for v in node.values)
            found.append((node.lineno, "".join(
                v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docstrings and id(node) not in inside):
            found.append((node.lineno, node.value))
    return found


@functools.cache
def every_text() -> list[tuple[str, int, str]]:
    """``(module, line, text)`` of every text of the package."""
    return [(path.relative_to(SRC).as_posix(), line, text)
            for path in sorted(SRC.rglob("*.py")) for line, text in texts(path)]


def test_the_walk_sees_the_messages() -> None:
    """The walk finds known templates (so an empty walk cannot pass the rules)."""
    found = {(module, text) for module, _line, text in every_text()}
    assert ("sources/managers/slurm_hostlist.py", "at most {} hosts in a host list") in found
    assert any(module == "merge.py" and "Remove {} where it is set" in text
               for module, text in found)
    assert len(found) > 500


def test_no_text_outside_the_backendai_source_names_a_session() -> None:
    wrong = [f"{module}:{line}: {text!r}" for module, line, text in every_text()
             if module not in BACKENDAI and (module, text) not in ALLOWED
             and any(text[max(0, m.start() - 11):m.start()] != "Backend.AI "
                     for m in _WORD.finditer(text))]
    assert wrong == []


def test_the_on_error_label_is_advised_through_one_constant() -> None:
    """A message that advises on-error=warn ends in errors.ON_ERROR_WARN after ", ", so the
    warning printed under on-error=warn leaves it out (errors.without_waiver)."""
    from derive_env.errors import ON_ERROR_WARN, without_waiver

    wrong = [f"{module}:{line}: {text!r}" for module, line, text in every_text()
             if "on-error=warn to" in text and text != ON_ERROR_WARN]
    assert wrong == []
    assert without_waiver(f"MASTER_ADDR='x': expected y. Remove it, {ON_ERROR_WARN}") == (
        "MASTER_ADDR='x': expected y. Remove it")


def test_no_text_places_rank_0_by_hand() -> None:
    joined = "\n".join(text for _module, _line, text in every_text())
    assert "Place rank 0 on the first node" not in joined
    assert "derive-env --dry-run --format openmpi-hostfile > hosts" in joined


@pytest.mark.parametrize(("module", "text"), sorted(ALLOWED))
def test_each_allowed_text_still_exists(module: str, text: str) -> None:
    assert any((m, t) == (module, text) for m, _line, t in every_text())
