"""The fix a refusal prints carries the opt-in the user needs (#27): the batch script of a
3-node Slurm job (recorded, ``sbatch-3node/batch.env``) refused, opted in each way."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from derive_env.cli import run
from derive_env.cli.envfile import parse_env_file
from helpers import console_script

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
BATCH = FIXTURES / "sbatch-3node" / "batch.env"
OPT_IN = "ai.backend.distributed.frameworks"


def refusal(opt_in: str) -> str:
    """The batch-script refusal with ``opt_in`` after each recipe's derive-env."""
    return (
        "derive-env: error: run derive-env inside srun, after it: srun --ntasks-per-node=1 "
        f"derive-env {opt_in}-- torchrun ..., or one task per GPU: srun "
        f"--ntasks-per-node=<GPUs per node> derive-env {opt_in}-- python train.py. Here it "
        "runs in a batch script or salloc shell (no srun step; derive-env -- srun ... runs it "
        "there too), one process on one node of the job's SLURM_JOB_NUM_NODES='3': only srun "
        "starts processes on the others")


@pytest.mark.parametrize(("options", "opt_in"), [
    ({"frameworks": "pytorch"}, "--frameworks pytorch "),
    ({"label_items": (f"{OPT_IN}=pytorch,jax",)}, "--frameworks pytorch,jax "),
    # as the policy reads it: stripped, lower case, each once (a line break split the line)
    ({"frameworks": "pytorch\n"}, "--frameworks pytorch "),
    ({"frameworks": " PyTorch,pytorch, JAX"}, "--frameworks pytorch,jax "),
])
def test_an_option_is_echoed(clean_environ: Path, capsys: pytest.CaptureFixture[str],
                             options: dict, opt_in: str) -> None:
    assert run([], dry_run=True, env_file=str(BATCH), **options) == 3
    assert capsys.readouterr().err == refusal(opt_in) + "\n"


@pytest.mark.parametrize(("image", "given", "opt_in"), [
    ("{}", "jax", "--frameworks jax "),  # the image's file read, without the label
    ("pytorch", "jax", "--frameworks jax "),  # the image's value changed
    ("pytorch", "pytorch", ""),  # the image's value: every node has it
])
def test_a_labels_file_option_is_echoed_unless_the_image_gave_the_value(
        clean_environ: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        image: str, given: str, opt_in: str) -> None:
    if image != "{}":
        clean_environ.write_text(f'{{"{OPT_IN}": "{image}"}}', encoding="utf-8")
    labels = tmp_path / "job-labels.json"
    labels.write_text(f'{{"{OPT_IN}": "{given}"}}', encoding="utf-8")
    assert run([], dry_run=True, env_file=str(BATCH), labels_files=(str(labels),)) == 3
    assert capsys.readouterr().err == refusal(opt_in) + "\n"


def test_a_quoted_value_is_never_rewritten(clean_environ: Path,
                                           capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    env = tmp_path / "job.env"
    env.write_text(BATCH.read_text(encoding="utf-8").replace(
        "SLURM_JOB_NODELIST=gpu-a100-[09-11]", "SLURM_JOB_NODELIST=n[1-2]derive-env -- x"),
        encoding="utf-8")
    assert run([], dry_run=True, env_file=str(env), frameworks="pytorch") == 3
    assert capsys.readouterr().err == (
        "derive-env: error: SLURM_JOB_NODELIST='n[1-2]derive-env -- x': expected a host name "
        "(letters, digits, '-' and '.') or an IP address, not '--'\n")


def test_the_variable_is_named_only_beside_a_fix(clean_environ: Path,
                                                 capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    env = tmp_path / "job.env"
    env.write_text(BATCH.read_text(encoding="utf-8") + "DERIVE_ENV_FRAMEWORKS=pytorch\n",
                   encoding="utf-8")
    assert run([], dry_run=True, env_file=str(env),
               label_items=("ai.backend.distributed.on-error=derive-env -- x",)) == 4
    assert capsys.readouterr().err == ("derive-env: error: label ai.backend.distributed."
                                       "on-error='derive-env -- x': expected fail or warn\n")


def test_image_labels_add_nothing(clean_environ: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean_environ.write_text(f'{{"{OPT_IN}": "pytorch"}}', encoding="utf-8")
    assert run([], dry_run=True, env_file=str(BATCH)) == 3
    assert capsys.readouterr().err == refusal("") + "\n"


def test_the_variable_is_named(clean_environ: Path, capsys: pytest.CaptureFixture[str],
                               tmp_path: Path) -> None:
    env = tmp_path / "job.env"
    env.write_text(BATCH.read_text(encoding="utf-8") + "DERIVE_ENV_FRAMEWORKS=pytorch\n",
                   encoding="utf-8")
    assert run([], dry_run=True, env_file=str(env)) == 3
    assert capsys.readouterr().err == refusal("") + (
        " (DERIVE_ENV_FRAMEWORKS=pytorch opted this start in: the derive-env of the fix needs "
        "it too, in its environment or as --frameworks pytorch)\n")


def test_bare_metal_without_an_opt_in_gets_the_form_that_works(tmp_path: Path) -> None:
    """``derive-env check`` in the batch script, nothing opted in (a labels file without the
    label, as on bare metal none): checked as pytorch, and the fix says --frameworks pytorch
    (copied, it opts the job in)."""
    labels = tmp_path / "labels.json"
    labels.write_text("{}", encoding="utf-8")
    env = parse_env_file(BATCH.read_text(encoding="utf-8"), str(BATCH))
    env.update(PATH="/usr/bin:/bin", DERIVE_ENV_LABELS_FILE=str(labels))
    done = subprocess.run([console_script(), "check", "--timeout", "5"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 3
    assert done.stderr.splitlines()[-1] == refusal("--frameworks pytorch ")
