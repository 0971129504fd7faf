"""Real launchers around derive-env (issue 7, item 2): the variables Open MPI's mpirun and
MPICH's mpiexec really set, recorded per rank with ``env -0`` and read back with
``--env-file`` (the NUL-separated format), and derive-env started by the launcher itself.

No network namespaces: both launchers start their ranks on this machine only (shared
memory), so nothing leaves it. Every run is bounded by a timeout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sessions import require, venv_bin

pytestmark = pytest.mark.e2e

OPT_IN = "ai.backend.distributed.frameworks=pytorch,jax"
LAUNCHERS = {
    "openmpi": ["mpirun.openmpi", "--oversubscribe", "-np"],
    "mpich": ["mpiexec.mpich", "-n"],
}
#: what each launcher's message starts with, for a job of 2 processes
REFUSED = {
    "openmpi": "OMPI_COMM_WORLD_SIZE='2': expected 1 or unset: Open MPI (mpirun) states a job "
               "of more than one process, and derive-env has no source for it yet (planned); "
               "derive-env would describe a job of one process. ",
    "mpich": "PMI_SIZE='2': expected 1 or unset: a PMI launcher (MPICH Hydra, Intel MPI, srun "
             "--mpi=pmi2, Flux) states a job of more than one process, and derive-env has no "
             "source for it yet (planned); derive-env would describe a job of one process. ",
}


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
def test_recorded_launcher_variables_are_refused_from_an_env_file(kind, tmp_path) -> None:
    record = launch(kind, 2, ["sh", "-c", f"env -0 > {tmp_path}/rank.$$"], tmp_path)
    assert record.returncode == 0, record.stderr
    files = sorted(tmp_path.glob("rank.*"))
    assert len(files) == 2
    exe = str(venv_bin() / "derive-env")
    for recorded in files:
        result = subprocess.run(
            [exe, "--env-file", str(recorded), "--label", OPT_IN, "--dry-run"],
            capture_output=True, text=True, timeout=60, check=False,
        )
        assert result.returncode == 3, result.stderr
        assert result.stderr.startswith("derive-env: error: " + REFUSED[kind]), result.stderr
        assert result.stdout == ""


@pytest.mark.parametrize("kind", sorted(LAUNCHERS))
def test_derive_env_under_a_launcher_stops_every_rank(kind, tmp_path) -> None:
    exe = str(venv_bin() / "derive-env")
    result = launch(kind, 2, [exe, "--label", OPT_IN, "--", sys.executable, "-c",
                              "print('ran')"], tmp_path)
    assert result.returncode != 0
    assert "ran" not in result.stdout
    assert result.stderr.count("derive-env: error: " + REFUSED[kind]) == 2, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("kind", sorted(LAUNCHERS))
def test_a_launcher_job_of_one_process_runs(kind, tmp_path) -> None:
    # Open MPI sets PMIx's variables too; its own say the job has one process.
    exe = str(venv_bin() / "derive-env")
    result = launch(kind, 1, [exe, "--label", OPT_IN, "--", sys.executable, "-c",
                              "import os; print(os.environ['JAX_NUM_PROCESSES'])"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "1"
