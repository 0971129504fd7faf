"""Fixtures of the command-line tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

LABELS_VAR = "DERIVE_ENV_LABELS_FILE"


@pytest.fixture
def clean_environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """This process's environment without cluster or framework variables; labels file empty."""
    for key in list(os.environ):
        if key.startswith(("BACKENDAI_", "DERIVE_ENV_", "PET_", "TF_", "JAX_")) or key in {
            "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "RANK", "WORLD_SIZE", "LOCAL_RANK",
            "LOCAL_WORLD_SIZE", "GPU_COUNT", "N_GPUS",
        }:
            monkeypatch.delenv(key)
    labels = tmp_path / "process-labels.json"
    labels.write_text("{}", encoding="utf-8")
    monkeypatch.setenv(LABELS_VAR, str(labels))
    return labels
