"""``--dry-run -- CMD`` prints what that command would get and runs nothing, as
``--explain -- CMD`` does (#26: they disagreed). Task 3 of ``srun -N3
--ntasks-per-node=2`` (recorded): a script is a worker of its own, torchrun is refused."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from derive_env.cli.command import cli

TASK3 = Path(__file__).resolve().parents[1] / "fixtures" / "recorded" / "srun-block" / "task3.env"
NOTE = "derive-env: note: --dry-run prints the variables the command would get: it was not run\n"


def invoke(*args: str):
    return CliRunner().invoke(cli, ["--env-file", str(TASK3), "--frameworks", "pytorch", *args],
                              prog_name="derive-env")


def test_a_dry_run_with_a_script_prints_its_variables(clean_environ: Path,
                                                       fake_exec: None) -> None:
    result = invoke("--dry-run", "--format", "json", "--", "python", "train.py")
    assert result.exit_code == 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)  # not execed
    assert result.stderr == NOTE
    assert '"RANK": "3"' in result.stdout and '"PET_NNODES"' not in result.stdout


def test_a_dry_run_with_torchrun_is_refused_as_the_start_would_be(clean_environ: Path,
                                                                  fake_exec: None) -> None:
    result = invoke("--dry-run", "torchrun", "train.py")
    assert result.exit_code == 3
    assert result.stdout == ""
    assert result.stderr.startswith(NOTE + "derive-env: error: torchrun (the command) under a "
                                    "Slurm step (srun), which starts 2 tasks on a node")


def test_the_same_command_explained_gets_the_same_variables(clean_environ: Path,
                                                            fake_exec: None) -> None:
    dry = invoke("--dry-run", "--", "python", "train.py").stdout.splitlines()
    explained = invoke("--explain", "--", "python", "train.py").stdout
    assert dry and all(f"\n{name:<17} = {value}\n" in explained
                       for name, value in (line.split("=", 1) for line in dry))
