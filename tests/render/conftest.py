"""Fixtures of the renderer tests."""

from __future__ import annotations

import pytest

from derive_env.labels import PREFIX
from derive_env.pipeline import Derivation, derive


@pytest.fixture
def derivation(backendai_env) -> Derivation:
    """sub1 of a 2-node session, PyTorch + TensorFlow, the user set MASTER_PORT=1111."""
    env = {**backendai_env(["sub1", "main1"], "sub1", session_id="s1"), "MASTER_PORT": "1111"}
    result = derive(env, {PREFIX + "frameworks": "pytorch,tensorflow"})
    assert result is not None
    return result
