"""Fixtures shared by tests of more than one source module (tests/conftest.py has the rest;
builders are in tests/support).

* ``sub2``: container sub2 of a 3-node Backend.AI session (test_backendai.py and
  test_backendai_order.py).
"""

from __future__ import annotations

import pytest


@pytest.fixture
def sub2(backendai_env) -> dict[str, str]:
    """Container sub2 of a 3-node session whose HOSTS came out as sub1,main1,sub2."""
    return backendai_env(["sub1", "main1", "sub2"], "sub2")


