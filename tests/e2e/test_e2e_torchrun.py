"""The real torchrun (torch 2.13 in the venv) still gives its workers the recorded
environments (tests/fixtures/recorded/torchrun-*), and the torchrun source reads every live
worker. Needs root (``unshare -u -m``) and torchrun: skipped without them, FAILS under CI=true
(helpers.require). Every run is bounded (record_torchrun.record: 120 s)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from derive_env.sources import BY_NAME
from derive_env.sources.managers.torchrun import read
from helpers import require
from record_envs import FIXTURES, load_fixture
from record_torchrun import SCENARIOS, record, stable

pytestmark = pytest.mark.e2e


def _require_torchrun() -> None:
    require(os.geteuid() == 0, "needs root (unshare -u -m)")
    require(shutil.which("unshare") is not None, "`unshare` not installed (util-linux)")
    require((Path(sys.executable).parent / "torchrun").exists(),
            f"no torchrun next to {sys.executable}")


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_fresh_recording_matches_the_fixtures(name: str) -> None:
    _require_torchrun()
    tasks = record(name)
    fixtures = {f.stem: load_fixture(f) for f in sorted((FIXTURES / name).glob("*.env"))}
    assert sorted(tasks) == sorted(fixtures)
    # Also under c10d: its ranks follow the sorted host names, never the arrival order.
    for task, (host, env) in tasks.items():
        want_host, want_env = fixtures[task]
        assert (task, host) == (task, want_host)
        assert stable(name, env) == stable(name, want_env), f"{name}/{task}"
        report = read(env, BY_NAME["torchrun"])
        assert report.master_port == int(env["MASTER_PORT"])
        assert report.processes.rank == int(task.removeprefix("rank"))
