"""Fixtures shared by tests of more than one source module (tests/conftest.py has the rest).

* ``sub2``: container sub2 of a 3-node Backend.AI session (test_backendai.py and
  test_backendai_order.py).
"""

from __future__ import annotations

import pytest


@pytest.fixture
def sub2(backendai_env) -> dict[str, str]:
    """Container sub2 of a 3-node session whose HOSTS came out as sub1,main1,sub2."""
    return backendai_env(["sub1", "main1", "sub2"], "sub2")


def manifest(kind: str, name: str | None = None, page: str = "kubernetes.md") -> dict:
    """The YAML manifest of ``kind`` (named ``name``, when the page has several of that kind)
    in docs/sources/``page`` (kubernetes.md, kubeflow.md), parsed (exactly one must match;
    every block of the page must parse, multi-document ones included)."""
    import re
    from pathlib import Path

    import yaml

    path = Path(__file__).resolve().parents[2] / "docs" / "sources" / page
    found = [doc for block in re.findall(r"```yaml\n(.*?)```",
                                         path.read_text(encoding="utf-8"), re.S)
             for doc in yaml.safe_load_all(block)]
    matches = [m for m in found if isinstance(m, dict) and m.get("kind") == kind
               and (name is None or (m.get("metadata") or {}).get("name") == name)]
    assert len(matches) == 1, (kind, name)
    return matches[0]
