"""Issue #9 item 8a: real Slurm jobs whose every task runs ``derive-env -- ...`` as a user would.

One real Slurm 22.05 cluster for the module (tests/e2e/slurmcluster.py: slurmctld and munged
on a login node, one slurmd per node ``gpu-a100-[09-11]`` at 198.18.0.10-12, each node a
network namespace, so a wrong master address fails as in production). The image's labels
reach every task through DERIVE_ENV_LABELS_FILE, gloo uses eth0. Each test asserts the exact
variables every rank saw (rank, local rank, world size, node, master = the host of rank 0,
port) and the result of a real collective across the 6 ranks:

- ``srun -N3 --ntasks-per-node=2 derive-env -- python torch_allreduce.py``: the process layer
  (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_*; no PET_*), the master
  port derived from the job and step ids (src/derive_env/ports.py) without a port label;
- ``srun -N3 --ntasks-per-node=1 derive-env -- torchrun --nproc-per-node=2 ...``: the node
  layer (PET_*), torchrun started with no other flag;
- ``srun -m cyclic`` (ranks round-robin over the nodes), ``srun -m arbitrary`` with
  SLURM_HOSTFILE putting rank 0 on the LAST node, ports Slurm reserved;
- a JAX job and a TensorFlow (MultiWorkerMirroredStrategy) job, one process per task;
- ``derive-env -- torchrun`` in a batch script (item 3): of a 1-node job it is a single-node
  job; of a 3-node job an error that prints the fix, the command not run.

E2E_HPC_STANDIN=1 runs the same jobs with a hand-written stand-in for derive-env (hpc_jobs).
Needs root, ``ip netns``, slurm-wlm, munge, torch (and jax, tensorflow): skipped without
them, FAILS under CI=true.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from derive_env.ports import job_ports
from hpc_jobs import (
    EXAMPLES,
    NODES,
    RESV_PORTS,
    STANDIN,
    cluster,
    job_env,
    launch,
    reports,
    require_hpc,
    sbatch,
)
from hpc_jobs import write_labels as labels_file
from simcluster import HostResult
from slurmcluster import SlurmCluster

pytestmark = pytest.mark.e2e

#: Seconds a whole job may take (srun kills the step at --time; the harness kills srun later).
JOB_TIMEOUT_S = 150.0
#: srun's own limit on a step (minutes), below JOB_TIMEOUT_S so Slurm cleans up first.
STEP_TIME = "--time=2"
TORCH = str(EXAMPLES / "torch_allreduce.py")
#: Block distribution, 2 tasks per node: the node of every rank.
BLOCK_HOSTS = [n for n in NODES for _ in range(2)]
#: Variables torchrun reads as defaults: never set for a per-process job.
PET = ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
       "PET_NPROC_PER_NODE")


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    """One cluster for every job of this module (removed afterwards, also on failure)."""
    require_hpc("srun", modules=("torch",))
    with cluster() as slurm:
        yield slurm


def _port() -> int:
    """A random master port (TCP) for a job, so no two runs share one."""
    return random.randrange(20000, 30000)


def _srun(slurm: SlurmCluster, options: list[str], command: list[str], env: dict[str, str],
          ) -> HostResult:
    """Run ``srun OPTIONS COMMAND`` on the login node with ``env``; the HostResult."""
    return slurm.run(["srun", STEP_TIME, *options, *command], timeout=JOB_TIMEOUT_S, env=env)


def _derived_port(slurm: SlurmCluster, job_id: str, step_id: str) -> int:
    """The master port every task must compute without a label: ports.py's rule for
    (slurm, job, step), in 61000-65535 whatever the nodes' sysctls (contract section 10)."""
    return job_ports("slurm", job_id, step_id)[0]


def _process_env(rank: int, local: int, node: int, master: str, port: int) -> dict[str, str]:
    """The torch variables (torch_allreduce.ENV_PREFIXES) a task of a per-process job must
    see, exactly (issue #9 item 4: no PET_*)."""
    return {
        "RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": "6",
        "LOCAL_WORLD_SIZE": "2", "NODE_RANK": str(node),
        "MASTER_ADDR": master, "MASTER_PORT": str(port),
    }


def test_srun_two_tasks_per_node_every_process_joins_by_env(slurm: SlurmCluster) -> None:
    """srun -N3 --ntasks-per-node=2, no port label: each of the 6 tasks gets its own rank,
    master gpu-a100-09 (node 0 holds rank 0), the port of (slurm, job, step); no PET_*."""
    labels = labels_file(slurm, {"frameworks": "pytorch"})
    res = _srun(slurm, ["-N3", "--ntasks-per-node=2"],
                [*launch("process", NODES[0], 0), "python", TORCH], job_env(labels))
    got = reports(res, 6, "rank")
    ids = got[0]["launcher"]
    assert "SLURM_STEP_RESV_PORTS" not in ids
    port = _derived_port(slurm, ids["SLURM_JOB_ID"], ids["SLURM_STEP_ID"])
    assert [(r["hostname"], r["launcher"]["SLURM_PROCID"]) for r in got] == [
        (h, str(i)) for i, h in enumerate(BLOCK_HOSTS)]
    for rank, r in enumerate(got):  # exactly these (so no PET_*, no GROUP_RANK)
        assert r["env"] == _process_env(rank, rank % 2, rank // 2, NODES[0], port), r
    assert {r["result"] for r in got} == {21.0}


def test_srun_cyclic_ranks_round_robin_over_the_nodes(slurm: SlurmCluster) -> None:
    """srun -N3 --ntasks-per-node=2 -m cyclic: rank r on node r mod 3 with local rank
    r // 3 (not contiguous per node); the master is still gpu-a100-09 (rank 0's node)."""
    port = _port()
    labels = labels_file(slurm, {"frameworks": "pytorch", "master-port": str(port)})
    res = _srun(slurm, ["-N3", "--ntasks-per-node=2", "-m", "cyclic"],
                [*launch("process", NODES[0], port), "python", TORCH], job_env(labels))
    got = reports(res, 6, "rank")
    assert [r["hostname"] for r in got] == [NODES[r % 3] for r in range(6)]
    for rank, r in enumerate(got):
        assert r["env"] == _process_env(rank, rank // 3, rank % 3, NODES[0], port), r
    assert {r["result"] for r in got} == {21.0}


def test_srun_reserved_ports_first_one_is_the_master_port() -> None:
    """A cluster whose slurm.conf has MpiParams=ports=12000-12999 (its own: there Slurm
    reserves ports for every step, so the module's cluster could not show the other rule):
    a plain srun -N3 --ntasks-per-node=2, no port label; every task sees the same
    SLURM_STEP_RESV_PORTS, and MASTER_PORT is its first port."""
    require_hpc("srun", modules=("torch",))
    with cluster(resv_ports=RESV_PORTS) as slurm:
        labels = labels_file(slurm, {"frameworks": "pytorch"})
        res = _srun(slurm, ["-N3", "--ntasks-per-node=2"],
                    [*launch("process", NODES[0], 0), "python", TORCH], job_env(labels))
        got = reports(res, 6, "rank")
    reserved = {r["launcher"].get("SLURM_STEP_RESV_PORTS") for r in got}
    assert len(reserved) == 1, reserved
    value = reserved.pop()
    assert value is not None
    first = int(value.split(",")[0].split("-")[0])
    low, high = (int(p) for p in RESV_PORTS.split("-"))
    assert low <= first <= high, value
    for rank, r in enumerate(got):
        assert r["env"] == _process_env(rank, rank % 2, rank // 2, NODES[0], first), r
    assert {r["result"] for r in got} == {21.0}


def test_srun_one_task_per_node_torchrun_needs_no_flags(slurm: SlurmCluster) -> None:
    """srun -N3 --ntasks-per-node=1 derive-env -- torchrun --nproc-per-node=2: the node layer
    (PET_NNODES=3, PET_NODE_RANK = the node's index, PET_MASTER_* = gpu-a100-09 and the
    label's port) makes torchrun give ranks 2*node + local; 6 ranks sum to 21."""
    port = _port()
    labels = labels_file(slurm, {"frameworks": "pytorch", "master-port": str(port)})
    torchrun = ["torchrun", "--nproc-per-node=2", TORCH]  # found on PATH, as a user has it
    res = _srun(slurm, ["-N3", "--ntasks-per-node=1"],
                [*launch("node", NODES[0], port), *torchrun], job_env(labels))
    got = reports(res, 6, "rank")
    assert [(r["hostname"], r["local_rank"], r["group_rank"]) for r in got] == [
        (h, i % 2, i // 2) for i, h in enumerate(BLOCK_HOSTS)]
    for rank, r in enumerate(got):
        node = str(rank // 2)
        node_layer = {k: r["env"].get(k) for k in (*PET, "NODE_RANK")}
        assert node_layer == {
            "PET_NNODES": "3", "PET_NODE_RANK": node, "PET_MASTER_ADDR": NODES[0],
            "PET_MASTER_PORT": str(port), "PET_NPROC_PER_NODE": None, "NODE_RANK": node,
        }, r["env"]
        # torchrun's own per-worker values, from derive-env's node layer.
        assert (r["env"]["MASTER_ADDR"], r["env"]["MASTER_PORT"], r["env"]["WORLD_SIZE"]) == (
            NODES[0], str(port), "6")
    assert {r["result"] for r in got} == {21.0}


def test_srun_arbitrary_rank0_on_the_last_node(slurm: SlurmCluster) -> None:
    """-m arbitrary, SLURM_HOSTFILE gpu-a100-11 x2, -09 x2, -10 x2: rank 0 runs on the LAST
    node of the (sorted) step node list (SLURM_NODEID 2), so the master is gpu-a100-11 and
    it is node rank 0: derive-env's node order is rank 0's node first, then the step list's
    order (--explain), so NODE_RANK is 0, 1, 2 for -11, -09, -10 (not SLURM_NODEID); the
    all-reduce joins there."""
    port = _port()
    order = [NODES[2], NODES[2], NODES[0], NODES[0], NODES[1], NODES[1]]
    hostfile = slurm.tmp / "shared" / "hostfile-arbitrary"
    hostfile.write_text("\n".join(order) + "\n")
    labels = labels_file(slurm, {"frameworks": "pytorch", "master-port": str(port)})
    env = job_env(labels, SLURM_HOSTFILE=str(hostfile),
                  E2E_STANDIN_NODES=",".join([NODES[2], NODES[0], NODES[1]]))
    res = _srun(slurm, ["-m", "arbitrary", "-n6"],
                [*launch("process", NODES[2], port), "python", TORCH], env)
    got = reports(res, 6, "rank")
    assert [(r["hostname"], r["launcher"]["SLURM_NODEID"]) for r in got] == [
        (NODES[2], "2"), (NODES[2], "2"), (NODES[0], "0"), (NODES[0], "0"),
        (NODES[1], "1"), (NODES[1], "1")]
    for rank, r in enumerate(got):
        assert r["env"] == _process_env(rank, rank % 2, rank // 2, NODES[2], port), r
    assert {r["result"] for r in got} == {21.0}


def test_srun_jax_one_process_per_task(slurm: SlurmCluster) -> None:
    """JAX under srun -N3 --ntasks-per-node=2: JAX_COORDINATOR_ADDRESS = rank 0's host and
    the jax-port label, JAX_NUM_PROCESSES=6, JAX_PROCESS_ID = SLURM_PROCID; the processes
    gather 10..60 and an XLA sum of squares gives 91."""
    require_hpc(modules=("jax",))
    port = _port()
    labels = labels_file(slurm, {"frameworks": "jax", "jax-port": str(port)})
    # The stand-in's JAX port is its master port + 3 (standin.py).
    res = _srun(slurm, ["-N3", "--ntasks-per-node=2"],
                [*launch("process", NODES[0], port - 3 if STANDIN else port), "python",
                 str(EXAMPLES / "jax_worker.py")], job_env(labels))
    got = reports(res, 6, "process_index")
    for rank, r in enumerate(got):
        assert (r["hostname"], r["launcher"]["SLURM_PROCID"]) == (BLOCK_HOSTS[rank], str(rank))
        assert r["env"] == {
            "JAX_COORDINATOR_ADDRESS": f"{NODES[0]}:{port}", "JAX_NUM_PROCESSES": "6",
            "JAX_PROCESS_ID": str(rank),
        }, r
        assert (r["process_count"], r["gathered"], r["psum_of_squares"]) == (
            6, [10, 20, 30, 40, 50, 60], 91)


def test_srun_tensorflow_one_task_per_process(slurm: SlurmCluster) -> None:
    """TensorFlow under srun -N3 --ntasks-per-node=2: TF_CONFIG lists 6 workers in node
    order then local rank, the two tasks of a node on tensorflow-port + local rank; each
    task's index is its SLURM_PROCID; MultiWorkerMirroredStrategy all-reduces 1..6 to 21."""
    require_hpc(modules=("tensorflow",))
    port = _port()
    labels = labels_file(slurm, {"frameworks": "tensorflow", "tensorflow-port": str(port)})
    env = job_env(labels, E2E_STANDIN_HOSTS=",".join(BLOCK_HOSTS))
    res = _srun(slurm, ["-N3", "--ntasks-per-node=2"],
                [*launch("process", NODES[0], port - 1 if STANDIN else port), "python",
                 str(EXAMPLES / "tf_worker.py")], env)
    got = reports(res, 6, "task_id")
    workers = [f"{h}:{port + i % 2}" for i, h in enumerate(BLOCK_HOSTS)]
    for rank, r in enumerate(got):
        assert (r["hostname"], r["launcher"]["SLURM_PROCID"]) == (BLOCK_HOSTS[rank], str(rank))
        assert r["tf_config"] == {
            "cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}, r
        assert (r["all_reduce"], r["reduce"], r["all_gather"]) == (
            21.0, 21.0, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), r
    assert [r["is_chief"] for r in got] == [True] + [False] * 5


def test_sbatch_one_node_script_is_a_single_node_job(slurm: SlurmCluster) -> None:
    """sbatch -N1 of ``derive-env -- torchrun --nproc-per-node=2``: a single-node job (the
    batch script is the only task), so torchrun's 2 workers join on this node and sum to 3;
    no Slurm step variables are taken for a node layer (PET_NNODES is not 3 or more)."""
    port = _port()
    labels = labels_file(slurm, {"frameworks": "pytorch", "master-port": str(port)})
    res, output = sbatch(slurm, ["-N1"], [*launch("node", "127.0.0.1", port), "torchrun",
                                          "--nproc-per-node=2", TORCH], job_env(labels),
                         JOB_TIMEOUT_S)
    got = reports(res, 2, "rank", output)
    assert [(r["hostname"], r["rank"], r["world_size"]) for r in got] == [
        (NODES[0], 0, 2), (NODES[0], 1, 2)]
    assert {r["result"] for r in got} == {3.0}


def test_sbatch_three_node_script_stops_with_the_fix(slurm: SlurmCluster) -> None:
    """sbatch -N3 of ``derive-env -- torchrun ...``: the batch script runs once, on the first
    node, and nothing but srun can start the others (sources.md 3.2), so derive-env exits 3
    naming SLURM_JOB_NUM_NODES and its value and printing the fix; torchrun never runs."""
    if STANDIN:
        pytest.skip("derive-env's own refusal: nothing for the stand-in to show")
    labels = labels_file(slurm, {"frameworks": "pytorch", "master-port": str(_port())})
    res, output = sbatch(slurm, ["-N3"], [*launch("node", "", 0), "torchrun",
                                          "--nproc-per-node=2", TORCH], job_env(labels),
                         JOB_TIMEOUT_S)
    assert (res.returncode, res.timed_out) == (3, False), res.describe() + output
    # What to do first, then the variable and its value: the text docs/operator-guide.md and
    # docs/sources/slurm.md section 2 document.
    assert output.splitlines() == [
        "derive-env: error: run derive-env inside srun, after it: srun --ntasks-per-node=1 "
        "derive-env -- torchrun ..., or one task per GPU: srun --ntasks-per-node=<GPUs per "
        "node> derive-env -- python train.py. Here it runs in a batch script or salloc shell "
        "(no srun step; derive-env -- srun ... runs it there too), one process on one node of "
        "the job's SLURM_JOB_NUM_NODES='3': only srun starts processes on the others",
        "derive-env: note: the command was not run (exit 3)",
    ]


# -- nested launches (issue 24): the command decides where Slurm's variables cannot ----------

#: The start of the refusal every task of ``srun --ntasks-per-node=2 derive-env -- torchrun``
#: prints (docs/sources/slurm.md, "Nested launches").
TORCHRUN_REFUSED = (
    "derive-env: error: torchrun (the command) under a Slurm step (srun), which starts 2 tasks "
    "on a node (SLURM_STEP_TASKS_PER_NODE + SLURM_NODEID): each torchrun would start a job of "
    "its own, and every task would train alone. Start one task per node for torchrun (srun "
    "--ntasks-per-node=1 derive-env -- torchrun ...), or drop torchrun and let srun start one "
    "task per GPU (srun --ntasks-per-node=<GPUs per node> derive-env -- python train.py)")


def test_srun_two_tasks_per_node_torchrun_is_refused_on_every_task(slurm: SlurmCluster) -> None:
    """srun -N2 --ntasks-per-node=2 derive-env -- torchrun: each of the 4 torchruns would be
    rank 0 of a job of its own (exit 0, every task training alone); instead every task
    exits 3 with the message naming both layers and the fix, torchrun never runs."""
    if STANDIN:
        pytest.skip("derive-env's own refusal: nothing for the stand-in to show")
    labels = labels_file(slurm, {"frameworks": "pytorch", "master-port": str(_port())})
    res = _srun(slurm, ["-N2", "--ntasks-per-node=2"],
                [*launch("node", "", 0), "torchrun", "--nproc-per-node=1", TORCH],
                job_env(labels))
    assert (res.returncode, res.timed_out) == (3, False), res.describe(tail=4000)
    errors = [line for line in res.stderr.splitlines() if "derive-env: error:" in line]
    assert errors == [TORCHRUN_REFUSED] * 4, res.describe(tail=4000)
    assert res.stderr.count("derive-env: note: the command was not run (exit 3)") == 4
    assert '"ok"' not in res.stdout  # no worker started


def test_srun_one_task_per_node_python_script_gets_its_rank(slurm: SlurmCluster) -> None:
    """srun -N2 --ntasks-per-node=1 derive-env -- python torch_allreduce.py: the script is
    the launcher's task, so each task gets RANK = SLURM_PROCID, WORLD_SIZE 2, LOCAL_RANK 0,
    LOCAL_WORLD_SIZE 1 (no PET_*): torch's env:// joins and the all-reduce sums to 3."""
    port = _port()
    labels = labels_file(slurm, {"frameworks": "pytorch", "master-port": str(port)})
    res = _srun(slurm, ["-N2", "--ntasks-per-node=1"],
                [*launch("process", NODES[0], port), "python", TORCH], job_env(labels))
    got = reports(res, 2, "rank")
    assert [(r["hostname"], r["launcher"]["SLURM_PROCID"]) for r in got] == [
        (NODES[0], "0"), (NODES[1], "1")]
    for rank, r in enumerate(got):  # exactly these (so no PET_*)
        assert r["env"] == {"RANK": str(rank), "LOCAL_RANK": "0", "WORLD_SIZE": "2",
                            "LOCAL_WORLD_SIZE": "1", "NODE_RANK": str(rank),
                            "MASTER_ADDR": NODES[0], "MASTER_PORT": str(port)}, r
    assert {r["result"] for r in got} == {3.0}
