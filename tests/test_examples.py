"""examples/: what a user copies is what the docs show and what the tests run.

- examples/training/: the PyTorch all-reduce, TensorFlow, JAX and Lightning workers the
  e2e tests run and the example images copy; each parses, imports its report helper from
  its own folder, and none is left behind in tests/e2e;
- examples/slurm/train.sbatch: POSIX sh, one task per node, the docs' template character for
  character, and its derive-env options give each task of a recorded 3-node step
  (tests/fixtures/recorded/sbatch-3node) its node rank;
- examples/kubernetes/*.yaml and examples/backendai/: each file is, character for
  character, a block the docs embed (the manifests' fields are checked against their
  APIs by tests/sources/test_manifests.py).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from helpers import console_script

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
TRAINING = ("torch_allreduce.py", "tf_worker.py", "jax_worker.py", "lightning_worker.py")
SBATCH = EXAMPLES / "slurm" / "train.sbatch"


def doc_blocks(language: str) -> list[str]:
    """Every fenced block of that language in README.md and docs/, as its text."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [block for page in pages for block in
            re.findall(rf"```{language}\n(.*?)```", page.read_text(encoding="utf-8"), re.S)]


@pytest.mark.parametrize("name", [*TRAINING, "worker_report.py"])
def test_training_program_parses_and_left_tests_e2e(name: str) -> None:
    tree = ast.parse((EXAMPLES / "training" / name).read_text(), filename=name)
    assert not (REPO / "tests" / "e2e" / name).exists()
    if name in TRAINING:  # the report helper beside it: `python examples/training/X.py`
        assert any(isinstance(node, ast.ImportFrom) and node.module == "worker_report"
                   for node in tree.body)


def test_example_images_copy_the_training_programs_from_examples() -> None:
    copies = {
        line.split()[1]
        for dockerfile in sorted((REPO / "docker").glob("*.Dockerfile"))
        for line in dockerfile.read_text().splitlines() if line.startswith("COPY examples/")}
    assert copies == {"examples/training/torch_allreduce.py", "examples/training/jax_worker.py",
                      "examples/training/worker_report.py"}
    assert all((REPO / path).is_file() for path in copies)


# ------------------------------------------------------------------------------- Slurm


def sbatch_lines() -> tuple[list[str], list[str]]:
    """(the #SBATCH options, the script's command lines)."""
    lines = SBATCH.read_text().splitlines()
    options = [line.split("#SBATCH", 1)[1].split("#")[0].strip()
               for line in lines if line.startswith("#SBATCH")]
    commands = [line for line in lines if line.strip() and not line.startswith("#")]
    return options, commands


def test_sbatch_script_is_posix_sh_one_task_per_node() -> None:
    assert os.access(SBATCH, os.X_OK)
    check = subprocess.run(["sh", "-n", str(SBATCH)], capture_output=True, timeout=30)
    assert (check.returncode, check.stderr) == (0, b"")
    options, commands = sbatch_lines()
    assert "--ntasks-per-node=1" in options and "--nodes=4" in options
    assert commands == ['srun derive-env --frameworks pytorch -- torchrun '
                        '"${1:-examples/training/torch_allreduce.py}"']
    assert (REPO / "examples" / "training" / "torch_allreduce.py").is_file()


def test_sbatch_script_is_the_docs_template() -> None:
    """docs/sources/slurm.md, "An sbatch template", shows the file character for character."""
    assert SBATCH.read_text() in doc_blocks("sh")


@pytest.mark.parametrize("task", [0, 1, 2])
def test_sbatch_derive_env_options_give_each_task_its_node(task: int, tmp_path: Path) -> None:
    """The script's derive-env options, as a dry run of task N of a recorded srun step of
    3 nodes inside a batch script: torchrun's PET_* defaults, the first node the master."""
    _, (command,) = sbatch_lines()
    words = shlex.split(command)
    options = words[words.index("derive-env") + 1:words.index("--")]
    empty = tmp_path / "labels.json"
    empty.write_text("{}")
    env_file = REPO / "tests" / "fixtures" / "recorded" / "sbatch-3node" / f"step-task{task}.env"
    out = subprocess.run(
        [console_script(), "--dry-run", "--format", "json", *options, "--env-file", str(env_file)],
        capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "DERIVE_ENV_LABELS_FILE": str(empty)})
    assert (out.returncode, out.stderr) == (0, "")
    derived = json.loads(out.stdout)
    assert {k: derived[k] for k in ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR")} == {
        "PET_NNODES": "3", "PET_NODE_RANK": str(task), "PET_MASTER_ADDR": "gpu-a100-09"}


# ----------------------------------------------------- copies of what the docs embed


@pytest.mark.parametrize("name", ["indexed-job.yaml", "jobset.yaml", "leaderworkerset.yaml",
                                  "pytorchjob.yaml"])
def test_kubernetes_example_is_the_docs_manifest(name: str) -> None:
    assert (EXAMPLES / "kubernetes" / name).read_text() in doc_blocks("yaml")


def test_kubernetes_examples_are_exactly_these() -> None:
    assert sorted(p.name for p in (EXAMPLES / "kubernetes").iterdir()) == [
        "indexed-job.yaml", "jobset.yaml", "leaderworkerset.yaml", "pytorchjob.yaml"]


def test_backendai_example_is_the_docs_image_and_script() -> None:
    folder = EXAMPLES / "backendai"
    assert sorted(p.name for p in folder.iterdir()) == ["Dockerfile", "train.py"]
    assert (folder / "Dockerfile").read_text() in doc_blocks("dockerfile")
    script = (folder / "train.py").read_text()
    assert script in doc_blocks("python")
    ast.parse(script)
    # the build context the Dockerfile names: this script beside a copy of the repository
    copies = [line.split()[1] for line in (folder / "Dockerfile").read_text().splitlines()
              if line.startswith("COPY ")]
    assert "train.py" in copies
    assert all(path == "train.py" or path.startswith("derive-env/") for path in copies)
