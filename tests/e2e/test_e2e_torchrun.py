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

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # tests/, for helpers

from record_envs import FIXTURES, load_fixture
from record_torchrun import NODES, SCENARIOS, record, stable

from derive_env.sources.torchrun import read
from helpers import require

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
    # c10d numbers the agents in arrival order (pytorch#137402): name the nodes by group
    # rank before comparing (the node of rank 0 is node-a's in the fixture).
    first = tasks["rank0"][0]
    rename = {first: NODES[0], **{n: NODES[1] for n in NODES if n != first}} \
        if name == "torchrun-c10d" else {n: n for n in NODES}
    for task, (host, env) in tasks.items():
        want_host, want_env = fixtures[task]
        env = {k: rename.get(v, v) if k == "MASTER_ADDR" else v for k, v in env.items()}
        assert (task, rename[host]) == (task, want_host)
        assert stable(name, env) == stable(name, want_env), f"{name}/{task}"
        report = read(env)
        assert report.master_port == int(env["MASTER_PORT"])
        assert report.processes.rank == int(task.removeprefix("rank"))
