"""DeepSpeed's launcher (sources/managers/deepspeed.py): a process ``deepspeed`` started.

No DeepSpeed here: each process's variables are TYPED from deepspeedai/DeepSpeed
``deepspeed/launcher/launch.py`` ``main`` (``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``,
``CROSS_RANK``, ``CROSS_SIZE``, ``LOCAL_SIZE``, then per process ``RANK`` host-major and
``LOCAL_RANK = RANK % LOCAL_SIZE``), as tests/support/jobs.py ``deepspeed_process`` builds
them; accelerate's ``ACCELERATE_MIXED_PRECISION`` from huggingface/accelerate
``src/accelerate/utils/launch.py``.
"""

from __future__ import annotations

import pytest

from derive_env.errors import TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.sources import BY_NAME, seen_sources
from derive_env.sources.managers import deepspeed
from derive_env.sources.report import Processes
from support.jobs import deepspeed_process

LABELS = {PREFIX + "frameworks": "pytorch"}


def test_a_deepspeed_process_exactly() -> None:
    env = deepspeed_process(6, [4, 4], 1)
    assert [s.name for s in seen_sources(env)] == ["deepspeed"]
    report = deepspeed.read(env, BY_NAME["deepspeed"])
    assert (report.processes, report.num_nodes, report.node_rank, report.master,
            report.master_port) == (Processes(6, 2, 8, 4), 2, 1, "10.2.0.7", 29500)
    assert report.preset == frozenset(deepspeed.VARIABLES)


def test_deepspeeds_variables_are_kept_and_never_to_be_removed() -> None:
    """DeepSpeed's launcher inside a Slurm step of one task per node (``srun
    --ntasks-per-node=1 deepspeed ...``). Before: "WORLD_SIZE='8': expected '2', the number
    of processes of the job ... Remove WORLD_SIZE where it is set", which breaks DeepSpeed."""
    step = {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2",
            "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_NUM_NODES": "2",
            "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
            "SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
            "SLURMD_NODENAME": "n2"}
    derivation = derive({**step, **deepspeed_process(6, [4, 4], 1, master="n1")}, LABELS)
    kept = {v.name: v.value for v in derivation.variables}
    assert (kept["RANK"], kept["WORLD_SIZE"], kept["LOCAL_RANK"], kept["NODE_RANK"],
            kept["MASTER_ADDR"]) == ("6", "8", "2", "1", "n1")
    assert derivation.topology.layers[1] == "process layer: deepspeed"


def test_a_changed_variable_names_deepspeed() -> None:
    with pytest.raises(TopologyError) as info:
        derive(deepspeed_process(6, [4, 4], 1, CROSS_RANK="2"), LABELS)
    assert str(info.value) == (
        "CROSS_RANK='2': expected a node rank below CROSS_SIZE='2': DeepSpeed's launcher sets "
        "both for each process (deepspeed/launcher/launch.py), so one was changed after it")


def test_accelerate_launch_is_named() -> None:
    env = deepspeed_process(1, [2], 0, ACCELERATE_MIXED_PRECISION="bf16")
    report = deepspeed.read(env, BY_NAME["deepspeed"])
    assert report.title == "accelerate launch (DeepSpeed's launcher (deepspeed))"


def test_a_hand_set_node_rank_names_no_launcher() -> None:
    """Before: "(closest: an Azure ML PyTorch-distribution process; not set: ...)"."""
    with pytest.raises(TopologyError) as info:
        derive({"NODE_RANK": "1"}, LABELS)
    assert "(NODE_RANK: a name several launchers set, and no variable of one of them is " \
        "here: set by hand (the image's ENV, an env file, a wrapper) or by a launcher " \
        "derive-env has no source for)" in str(info.value)
    assert "closest" not in str(info.value)


def test_an_accelerate_launch_worker_is_torchruns_named_accelerate() -> None:
    """accelerate launch --multi_gpu runs torchrun's launch in-process and adds its
    ACCELERATE_* (utils/launch.py prepare_multi_gpu_env): read as torchrun's, named."""
    from support.recorded import FIXTURES, load_fixture

    _, worker = load_fixture(FIXTURES / "torchrun-static" / "rank1.env")
    env = {**worker, "MASTER_ADDR": "10.2.0.7", "ACCELERATE_MIXED_PRECISION": "bf16"}
    topology = derive(env, LABELS).topology
    assert topology.layers[0] == ("source seen: torchrun (accelerate launch (torchrun "
                                  "(torchelastic))), for the process layer and the node layer")
