"""--explain kept short (#26): the digest as one line, none for a single container; the
first line names every source the layer lines name; where 1 process per node comes from."""

from __future__ import annotations

from pathlib import Path

from derive_env.cli.envfile import parse_env_file
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.render.explain import explain

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
PYTORCH = {PREFIX + "frameworks": "pytorch"}


def explained(name: str) -> list[str]:
    path = RECORDED / name
    derivation = derive(parse_env_file(path.read_text(encoding="utf-8"), str(path)), PYTORCH)
    return explain(derivation).splitlines()


def test_a_single_container_has_no_digest_line() -> None:
    lines = explain(derive({}, PYTORCH)).splitlines()
    assert not [line for line in lines if "digest" in line]
    assert len(lines) == 20  # 2 of topology and frameworks, 14 of 7 variables, 2 notes, 2 blank


def test_a_job_of_nodes_has_one_digest_line_saying_how_to_list_its_facts() -> None:
    lines = explained("sbatch-3node/step-task1.env")
    digest = [line for line in lines if "digest" in line]
    assert len(digest) == 1
    assert digest[0].startswith("job digest ")
    assert digest[0].endswith(" (every node must show the same; its facts: --dry-run "
                              "--format digest-facts in place of --explain)")
    assert not [line for line in lines if line.startswith("  node.")]


def test_the_first_line_names_the_launcher_that_gave_the_ranks() -> None:
    lines = explained("mpich-in-salloc/rank2.env")
    assert lines[0] == ("source: slurm-allocation job 12 (process ranks from hydra), 3 nodes; "
                        "this process runs on gpu-a100-10, node rank 1")
    assert "process layer: hydra" in lines


def test_one_source_for_every_layer_names_none_beside_it() -> None:
    assert explained("srun-block/task3.env")[0] == (
        "source: slurm-step job 1, 3 nodes; this process runs on gpu-a100-10, node rank 1")


def test_a_slurm_step_without_gpus_says_where_1_process_per_node_comes_from() -> None:
    assert explained("sbatch-3node/step-task1.env")[-1] == (
        "PET_NPROC_PER_NODE not set, so torchrun starts 1 process per node: no nproc-per-node "
        "label and no GPU count (SLURM_GPUS_ON_NODE unset); to change: "
        "DERIVE_ENV_NPROC_PER_NODE=N (or --label ai.backend.distributed.nproc-per-node=N), or "
        "torchrun --nproc-per-node=N")
