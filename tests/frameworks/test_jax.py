"""JAX: JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID; JAX_LOCAL_DEVICE_IDS,
checked with JAX's own code."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from helpers import require

JAX = {PREFIX + "frameworks": "jax"}


def jax_vars(environ, labels=JAX) -> dict[str, str]:
    derivation = derive(environ, labels)
    assert derivation is not None
    return {v.name: v.value for v in derivation.variables if v.framework == "jax"}


@pytest.mark.parametrize(("host", "rank"), [("main1", "0"), ("sub1", "1"), ("sub2", "2")])
def test_cluster_values(backendai_env, host: str, rank: str) -> None:
    assert jax_vars(backendai_env(["sub2", "sub1", "main1"], host)) == {
        "JAX_COORDINATOR_ADDRESS": "main1:1234",
        "JAX_NUM_PROCESSES": "3",
        "JAX_PROCESS_ID": rank,
    }


def test_jax_only_sets_no_pytorch_or_tf_variables(backendai_env) -> None:
    derivation = derive(backendai_env(["main1", "sub1"], "sub1"), JAX)
    assert derivation is not None
    assert [v.name for v in derivation.variables] == [
        "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "DERIVE_ENV_RUN_ID"]


def test_jax_port_label(backendai_env) -> None:
    got = jax_vars(backendai_env(["main1", "sub1"], "sub1"), {**JAX, PREFIX + "jax-port": "7777"})
    assert got["JAX_COORDINATOR_ADDRESS"] == "main1:7777"


def test_master_port_does_not_move_the_coordinator(backendai_env) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "MASTER_PORT": "5555",
           "BACKENDAI_DIST_MASTER_PORT": "6666"}
    assert jax_vars(env)["JAX_COORDINATOR_ADDRESS"] == "main1:1234"


def test_single_container() -> None:
    assert jax_vars({}) == {
        "JAX_COORDINATOR_ADDRESS": "127.0.0.1:1234",
        "JAX_NUM_PROCESSES": "1",
        "JAX_PROCESS_ID": "0",
    }


def test_user_master_addr_feeds_coordinator(backendai_env) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "MASTER_ADDR": "2001:db8::7"}
    assert jax_vars(env)["JAX_COORDINATOR_ADDRESS"] == "[2001:db8::7]:1234"


def test_user_coordinator_kept(backendai_env) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "JAX_COORDINATOR_ADDRESS": "elsewhere:1"}
    derivation = derive(env, JAX)
    assert derivation is not None
    got = {v.name: v for v in derivation.variables}
    assert got["JAX_COORDINATOR_ADDRESS"].kept
    assert got["JAX_COORDINATOR_ADDRESS"].value == "elsewhere:1"
    assert got["JAX_COORDINATOR_ADDRESS"].derived == "main1:1234"
    assert "JAX_COORDINATOR_ADDRESS" not in derivation.changes()


def test_sources_and_note(backendai_env) -> None:
    derivation = derive(backendai_env(["main1", "sub1"], "sub1"), JAX)
    assert derivation is not None
    got = {v.name: v.provenance for v in derivation.variables}
    assert got["JAX_COORDINATOR_ADDRESS"] == (
        "master address (BACKENDAI_CLUSTER_HOSTS + BACKENDAI_CLUSTER_REPLICAS: node rank 0 in "
        "canonical order) + port from default (1234)"
    )
    assert got["JAX_PROCESS_ID"] == (
        "position of BACKENDAI_CLUSTER_HOST=sub1 in the canonical order"
    )
    assert any("jax.distributed.initialize(" in note for note in derivation.notes)


# --- JAX_LOCAL_DEVICE_IDS: ordinals within the visible devices (issue 15 item 2) --------

def srun_task(rank: int, per_node: int, nodes: int = 2, **extra: str) -> dict[str, str]:
    """An srun step's task variables (block distribution), as Slurm's env.c writes them."""
    total = nodes * per_node
    return {
        "SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242", "SLURM_STEP_ID": "0",
        "SLURM_STEPID": "0", "SLURM_STEP_NODELIST": f"node[1-{nodes}]",
        "SLURM_STEP_NUM_NODES": str(nodes), "SLURM_STEP_NUM_TASKS": str(total),
        "SLURM_STEP_TASKS_PER_NODE": f"{per_node}(x{nodes})", "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank % per_node), "SLURM_NODEID": str(rank // per_node),
        "SLURM_NTASKS": str(total), "SLURM_NNODES": str(nodes),
        "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_JOB_NODELIST": f"node[1-{nodes}]",
        "SLURMD_NODENAME": f"node{rank // per_node + 1}", **extra}


@pytest.mark.parametrize(("visible", "node_gpus", "local", "local_rank", "expected"), [
    (4, 4, 1, 0, [0, 1, 2, 3]),        # one process per node: all of them
    (4, None, 1, 0, [0, 1, 2, 3]),
    (4, 4, 2, 1, [2, 3]),              # two tasks share four: the second half
    (4, None, 2, 1, [2, 3]),
    (2, 4, 2, 1, [0, 1]),              # the launcher narrowed each task to two
    (1, 2, 2, 1, [0]),                 # --gpus-per-task=1
    (6, 6, 3, 2, [4, 5]),
    (3, 3, 2, 1, "3 GPU(s) do not divide among the 2 processes of this node"),
    (1, None, 2, 1, "1 GPU(s) do not divide among the 2 processes of this node"),
])
def test_device_ordinals(visible, node_gpus, local, local_rank, expected) -> None:
    from derive_env.frameworks.jax import device_ordinals

    got = device_ordinals(visible, node_gpus, local, local_rank)
    assert (got if isinstance(got, str) else got[0]) == expected


@pytest.mark.parametrize(("environ", "expected", "provenance"), [
    (srun_task(3, 2, CUDA_VISIBLE_DEVICES="4,5,6,7", SLURM_GPUS_ON_NODE="4"), "2,3",
     "CUDA_VISIBLE_DEVICES: 4 visible device(s), node's GPUs from SLURM_GPUS_ON_NODE; "
     "ordinals within them, 2 of 4 shared GPU(s) for local rank 1 of 2"),
    (srun_task(3, 2, CUDA_VISIBLE_DEVICES="2,3", SLURM_GPUS_ON_NODE="4"), "0,1",
     "CUDA_VISIBLE_DEVICES: 2 visible device(s), node's GPUs from SLURM_GPUS_ON_NODE; "
     "ordinals within them, this process sees 2 of the node's 4 GPU(s): narrowed per task "
     "by the launcher, all of them"),
    (srun_task(1, 1, CUDA_VISIBLE_DEVICES="4,5,6,7", SLURM_GPUS_ON_NODE="4"), "0,1,2,3",
     "CUDA_VISIBLE_DEVICES: 4 visible device(s), node's GPUs from SLURM_GPUS_ON_NODE; "
     "ordinals within them, the one process of this node: all of them"),
    (srun_task(3, 2, SLURM_GPUS_ON_NODE="4"), "2,3",
     "SLURM_GPUS_ON_NODE: 4 visible device(s), node's GPUs from SLURM_GPUS_ON_NODE; "
     "ordinals within them, 2 of 4 shared GPU(s) for local rank 1 of 2"),
    (srun_task(1, 1, CUDA_VISIBLE_DEVICES="GPU-1a,MIG-2b"), "0,1",
     "CUDA_VISIBLE_DEVICES: 2 visible device(s); ordinals within them, the one process of "
     "this node: all of them"),
    (srun_task(1, 1, HIP_VISIBLE_DEVICES="6,7"), "0,1",
     "HIP_VISIBLE_DEVICES: 2 visible device(s); ordinals within them, the one process of "
     "this node: all of them"),
])
def test_local_device_ids_are_ordinals(environ, expected: str, provenance: str) -> None:
    """Never the values of CUDA_VISIBLE_DEVICES (jax-ml/jax#23452): ordinals in its list."""
    result = derive(environ, JAX)
    assert result is not None
    got = {v.name: v for v in result.variables}["JAX_LOCAL_DEVICE_IDS"]
    assert (got.value, got.provenance) == (expected, provenance)


def test_one_process_per_node_of_a_backendai_session(backendai_env) -> None:
    env = {**backendai_env(["main1", "sub1"], "sub1"), "GPU_COUNT": "4"}
    result = derive(env, JAX)
    assert result is not None
    assert result.changes()["JAX_LOCAL_DEVICE_IDS"] == "0,1,2,3"


@pytest.mark.parametrize(("visible", "entry"), [
    ("\u00b2", "\u00b2"), ("0,\u00b9", "\u00b9"), ("\u0660,\u0661", "\u0660"), ("-1", "-1"),
    ("0,x", "x"), (",", ""),
])
def test_local_device_ids_take_device_numbers_or_uuids_only(visible: str, entry: str) -> None:
    """A superscript or Arabic-Indic digit is no device number CUDA reads: a note naming the
    variable and the entry, never a traceback (str.isdigit() takes them, int() refuses '²'
    and reads '٣' as 3)."""
    from helpers import SRUN_TASK_3

    result = derive({**SRUN_TASK_3, "CUDA_VISIBLE_DEVICES": visible}, JAX)
    assert result is not None
    assert "JAX_LOCAL_DEVICE_IDS" not in result.changes()
    assert (f"JAX_LOCAL_DEVICE_IDS not set: CUDA_VISIBLE_DEVICES={visible!r} holds {entry!r}, "
            "which is not a device number (ASCII digits) or UUID (GPU-..., MIG-...); CUDA "
            "stops reading the list there") in result.notes
    assert result.changes()["JAX_PROCESS_ID"] == "3"


def test_a_blank_visible_list_hides_every_device() -> None:
    result = derive(srun_task(3, 2, CUDA_VISIBLE_DEVICES=" ", SLURM_GPUS_ON_NODE="4"), JAX)
    assert result is not None
    assert "JAX_LOCAL_DEVICE_IDS" not in result.changes()
    assert ("JAX_LOCAL_DEVICE_IDS not set: CUDA_VISIBLE_DEVICES is set and blank: no device "
            "is visible") in result.notes


def test_no_gpu_known_sets_nothing() -> None:
    result = derive(srun_task(3, 2), JAX)
    assert result is not None
    assert "JAX_LOCAL_DEVICE_IDS" not in result.changes()


def test_uneven_share_is_a_warning() -> None:
    result = derive(srun_task(3, 2, CUDA_VISIBLE_DEVICES="0,1,2"), JAX)
    assert result is not None
    assert "JAX_LOCAL_DEVICE_IDS" not in result.changes()
    assert result.warnings == (
        "JAX_LOCAL_DEVICE_IDS not set: 3 GPU(s) do not divide among the 2 processes of this "
        "node (CUDA_VISIBLE_DEVICES): JAX's Slurm and Open MPI detection then binds device "
        "[local rank] (one GPU per process, 1 of them idle), and without it every process "
        "takes every visible GPU. Start a number of processes per node that divides the 3 "
        "GPU(s) (one per GPU: srun --ntasks-per-node=3, or --gpus-per-task=1), or pass "
        "local_device_ids to jax.distributed.initialize",)


@pytest.mark.parametrize("local_rank", [0, 5, 7])
def test_eight_tasks_sharing_four_gpus_are_warned_on_every_task(local_rank: int) -> None:
    """8 tasks of a node sharing its 4 GPUs: JAX's Slurm detection
    (jax/_src/clusters/slurm_cluster.py: SLURM_LOCALID; cluster.py binds [local rank])
    would bind ordinals 4..7 of 4 visible devices: every task is warned, with the fix."""
    env = srun_task(8 + local_rank, 8, CUDA_VISIBLE_DEVICES="0,1,2,3", SLURM_GPUS_ON_NODE="4")
    assert env["SLURM_LOCALID"] == str(local_rank)
    result = derive(env, JAX)
    assert result is not None
    assert "JAX_LOCAL_DEVICE_IDS" not in result.changes()
    assert result.warnings == (
        "JAX_LOCAL_DEVICE_IDS not set: 4 GPU(s) do not divide among the 8 processes of this "
        "node (CUDA_VISIBLE_DEVICES): JAX's Slurm and Open MPI detection then binds device "
        "[local rank] (an invalid device for local ranks 4-7), and without it every process "
        "takes every visible GPU. Start a number of processes per node that divides the 4 "
        "GPU(s) (one per GPU: srun --ntasks-per-node=4, or --gpus-per-task=1), or pass "
        "local_device_ids to jax.distributed.initialize",)


# --- JAX's own code reads derive-env's exports (no GPU needed) ----------------------------

#: Runs jax.distributed.initialize as the module docstring tells users to, in a process whose
#: environment is one case's, with JAX's runtime service and client stubbed out (nothing
#: listens or connects): what JAX would do is read back from its own state and config.
_PROBE = r"""
import json, os, sys, types
import jax
from jax._src import distributed, xla_bridge

class Stop(Exception):
    pass

def service(*args, **kwargs):
    return types.SimpleNamespace(shutdown=lambda: None)

def client(*args, **kwargs):
    raise Stop

distributed._jax.get_distributed_runtime_service = service
distributed._jax.get_distributed_runtime_client = client
out = []
for case in json.load(sys.stdin):
    os.environ.clear()
    os.environ.update(case)
    jax.config.update("jax_cuda_visible_devices", "all")
    jax.config.update("jax_rocm_visible_devices", "all")
    distributed.global_state = distributed.State()
    try:
        if "JAX_NUM_PROCESSES" in case:
            jax.distributed.initialize(num_processes=int(case["JAX_NUM_PROCESSES"]),
                                       process_id=int(case["JAX_PROCESS_ID"]))
        else:
            jax.distributed.initialize()
    except Stop:
        pass
    state = distributed.global_state
    out.append([xla_bridge.CUDA_VISIBLE_DEVICES.value,
                xla_bridge._ROCM_VISIBLE_DEVICES.value, state.process_id, state.num_processes])
distributed.global_state = distributed.State()
print(json.dumps(out))
"""


def _recorded(scenario: str, task: str) -> dict[str, str]:
    from support.recorded import FIXTURES, load_fixture

    return load_fixture(FIXTURES / scenario / f"{task}.env")[1]


def _narrowed(per_task: int, local: int) -> dict[str, str]:
    """Slurm's per-task binding (--gpus-per-task, --gpu-bind): the task's own GPUs."""
    own = range(local * per_task, (local + 1) * per_task)
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, own)),
            "SLURM_STEP_GPUS": ",".join(str(4 + i) for i in own)}


#: layout -> (recorded scenario, tasks, extra variables of each task by local rank,
#: the node's GPUs by their CUDA_VISIBLE_DEVICES name, CUDA devices each local rank owns).
LAYOUTS = {
    "one process per node, 4 GPUs (Slurm)": (
        "sbatch-3node", ["step-task0", "step-task1", "step-task2"],
        lambda local: {"CUDA_VISIBLE_DEVICES": "4,5,6,7", "SLURM_GPUS_ON_NODE": "4"},
        {0: ["4", "5", "6", "7"]}),
    "2 tasks per node sharing CUDA_VISIBLE_DEVICES=4,5,6,7 (Slurm)": (
        "srun-block", [f"task{r}" for r in range(6)],
        lambda local: {"CUDA_VISIBLE_DEVICES": "4,5,6,7", "SLURM_GPUS_ON_NODE": "4"},
        {0: ["4", "5"], 1: ["6", "7"]}),
    "2 tasks per node, each narrowed to its 2 GPUs (Slurm --gpus-per-task=2)": (
        "srun-block", [f"task{r}" for r in range(6)],
        lambda local: {**_narrowed(2, local), "SLURM_GPUS_ON_NODE": "4"},
        {0: ["0", "1"], 1: ["2", "3"]}),
    "2 tasks per node, each narrowed to 1 GPU (Slurm --gpus-per-task=1)": (
        "srun-block", [f"task{r}" for r in range(6)],
        lambda local: {**_narrowed(1, local), "SLURM_GPUS_ON_NODE": "2"},
        {0: ["0"], 1: ["1"]}),
    "2 ranks per node sharing CUDA_VISIBLE_DEVICES=4,5,6,7 (Open MPI 4 mpirun)": (
        "ompi-in-sbatch", [f"rank{r}" for r in range(6)],
        lambda local: {"CUDA_VISIBLE_DEVICES": "4,5,6,7"},
        {0: ["4", "5"], 1: ["6", "7"]}),
}


def _local_rank(environ: dict[str, str]) -> int:
    return int(environ.get("SLURM_LOCALID") if "OMPI_COMM_WORLD_LOCAL_RANK" not in environ
               else environ["OMPI_COMM_WORLD_LOCAL_RANK"])


def _run_jax(cases: list[dict[str, str]]) -> list[list]:
    run = subprocess.run([sys.executable, "-c", _PROBE], input=json.dumps(cases),
                         capture_output=True, text=True, timeout=180, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


@pytest.mark.frameworks
def test_jax_uses_the_devices_each_task_owns() -> None:
    """For each layout, JAX 0.10's own ``jax.distributed.initialize`` (its env reading, its
    Slurm / Open MPI detection) runs with derive-env's exports: every task gets exactly its
    devices, the node's GPUs each owned once. Without ``JAX_LOCAL_DEVICE_IDS`` JAX would bind
    ``[local process id]`` (one GPU per node, or an invalid ordinal), shown alongside."""
    require(importlib.util.find_spec("jax") is not None, "JAX is not installed")
    cases, expected = [], []
    for layout, (scenario, tasks, extra, owned) in LAYOUTS.items():
        for task in tasks:
            recorded = _recorded(scenario, task)
            local = _local_rank(recorded)
            environ = {**recorded, **extra(local), "JAX_PLATFORMS": "cpu"}
            result = derive(environ, JAX)
            assert result is not None
            exported = {**environ, **result.changes()}
            cases += [exported, {k: v for k, v in exported.items()
                                 if k != "JAX_LOCAL_DEVICE_IDS"}]
            expected.append((layout, task, local, owned[local], exported))
    got = iter(_run_jax(cases))
    for layout, task, local, owned, exported in expected:
        cuda, rocm, process_id, num_processes = next(got)
        visible = exported["CUDA_VISIBLE_DEVICES"].split(",")
        ordinals = [int(i) for i in cuda.split(",")]
        assert cuda == rocm == exported["JAX_LOCAL_DEVICE_IDS"], (layout, task)
        assert [visible[i] for i in ordinals] == owned, (layout, task)
        assert (process_id, num_processes) == (
            int(exported["JAX_PROCESS_ID"]), int(exported["JAX_NUM_PROCESSES"]))
        without = next(got)[0]
        assert without == str(local), (layout, task)  # JAX's own guess: [local process id]
    assert next(got, None) is None


@pytest.mark.frameworks
def test_jax_ordinals_for_the_issue_example() -> None:
    """CUDA_VISIBLE_DEVICES=4,5,6,7 and the task owning the last two: JAX gets 2,3."""
    require(importlib.util.find_spec("jax") is not None, "JAX is not installed")
    environ = {**_recorded("srun-block", "task1"), "CUDA_VISIBLE_DEVICES": "4,5,6,7",
               "SLURM_GPUS_ON_NODE": "4", "JAX_PLATFORMS": "cpu"}
    result = derive(environ, JAX)
    assert result is not None
    exported = {**environ, **result.changes()}
    exported.pop("JAX_NUM_PROCESSES")  # the bare call: JAX's Slurm detection gives the rest
    assert _run_jax([exported]) == [["2,3", "2,3", 1, 6]]
