"""Real launchers around derive-env (issue 7, item 2; issue 9): the variables Open MPI's
mpirun and MPICH's mpiexec really set, recorded per rank with ``env -0`` and read back with
``--env-file`` (the NUL-separated format), and derive-env started by the launcher itself:
each rank gets its process layer (one node here: the master is loopback).

No network namespaces: both launchers start their ranks on this machine only (shared
memory), so nothing leaves it. Every run is bounded by a timeout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sessions import require, venv_bin

pytestmark = pytest.mark.e2e

OPT_IN = "ai.backend.distributed.frameworks=pytorch,jax"
LAUNCHERS = {
    "openmpi": ["mpirun.openmpi", "--oversubscribe", "-np"],
    "mpich": ["mpiexec.mpich", "-n"],
}
#: each launcher's own rank variable
RANK_VARIABLE = {"openmpi": "OMPI_COMM_WORLD_RANK", "mpich": "PMI_RANK"}


def launcher_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "SLURM_"))}
    # Open MPI refuses root without these (the tests run as root in their container).
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def launch(kind: str, n: int, argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    require(shutil.which(LAUNCHERS[kind][0]) is not None, f"{LAUNCHERS[kind][0]} not installed")
    return subprocess.run([*LAUNCHERS[kind], str(n), *argv], env=launcher_env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("kind", sorted(LAUNCHERS))
def test_recorded_launcher_variables_give_each_rank_its_process_layer(kind, tmp_path) -> None:
    """2 ranks on this machine (issue 9): one node, one worker per process, from --env-file."""
    record = launch(kind, 2, ["sh", "-c", f"env -0 > {tmp_path}/rank.$$"], tmp_path)
    assert record.returncode == 0, record.stderr
    files = sorted(tmp_path.glob("rank.*"))
    assert len(files) == 2
    exe = str(venv_bin() / "derive-env")
    got = []
    for recorded in files:
        result = subprocess.run(
            [exe, "--env-file", str(recorded), "--label", OPT_IN, "--dry-run", "--format",
             "json"], capture_output=True, text=True, timeout=60, check=False,
        )
        assert result.returncode == 0, result.stderr
        values = json.loads(result.stdout)
        own = dict(item.split("=", 1) for item in recorded.read_text().split("\0") if "=" in item)
        assert values["RANK"] == own[RANK_VARIABLE[kind]]
        got.append(values)
    assert sorted(v["RANK"] for v in got) == ["0", "1"]
    for values in got:
        assert {k: values[k] for k in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                                        "JAX_NUM_PROCESSES")} == {
            "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
            "JAX_NUM_PROCESSES": "2"}
        assert values["MASTER_PORT"] == got[0]["MASTER_PORT"]
        assert not any(name.startswith("PET_") for name in values)


@pytest.mark.parametrize("kind", sorted(LAUNCHERS))
def test_derive_env_under_a_launcher_gives_every_rank_its_rank(kind, tmp_path) -> None:
    exe = str(venv_bin() / "derive-env")
    # Each rank writes its own file: the launchers forward the ranks' stdout in chunks that
    # may interleave, so one shared stdout is no reliable record.
    show = ("import os, pathlib; e = os.environ; pathlib.Path('out.' + e['RANK']).write_text("
            "' '.join(e[k] for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'MASTER_ADDR')))")
    result = launch(kind, 2, [exe, "--label", OPT_IN, "--", sys.executable, "-c", show],
                    tmp_path)
    assert result.returncode == 0, result.stderr
    written = {p.name: p.read_text() for p in tmp_path.glob("out.*")}
    assert written == {"out.0": "0 0 2 127.0.0.1", "out.1": "1 1 2 127.0.0.1"}
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("kind", sorted(LAUNCHERS))
def test_a_launcher_job_of_one_process_runs(kind, tmp_path) -> None:
    # Open MPI sets PMIx's variables too; its own say the job has one process.
    exe = str(venv_bin() / "derive-env")
    result = launch(kind, 1, [exe, "--label", OPT_IN, "--", sys.executable, "-c",
                              "import os; print(os.environ['JAX_NUM_PROCESSES'])"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "1"
