"""Every nesting of launchers the source table allows, with the command derive-env execs
(issue 24, item 4): an outer manager (a Slurm allocation, a Backend.AI session) x an inner
launcher (srun's step, Open MPI's or Hydra's ranks, torchrun's workers inside srun) x the
command (none: the hook's path; ``torchrun``; ``python train.py``; a shell script), on jobs
of 1-5 nodes and 1-4 processes per node, laid out block, cyclic, by a hostfile (Slurm's
arbitrary) or packed by slot (MPI).

The property, for every process of a generated job, through the program's own door
(``pipeline.derive_from`` with the command as :class:`~derive_env.topology.Inputs` has it):
either every process is refused, each naming both layers (the command and its launcher),
or none is, and then the job is one job: one master, one digest, and

* the command is a node launcher (torchrun): one process per node, node ranks 0..n-1, and
  torchrun's ``PET_NNODES`` = n (never a torchrun of its own job: "trains alone");
* otherwise each process is a worker with a distinct rank 0..W-1 of one world size W, or
  (no command or a shell script, one process per node) a node with a distinct node rank.

Never exit 0 with two processes of one rank, or a job that trains alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from derive_env.digest import digest_of, facts_of
from derive_env.errors import TopologyError
from derive_env.pipeline import derive_from
from derive_env.sources import BY_NAME
from derive_env.sources.compose import topology_from
from derive_env.sources.report import NODE_LAUNCHER, command_kind
from derive_env.topology import Inputs
from support.backendai import make_backendai_env
from support.slurm import job_envs, mpi_in_allocation, with_mpi

LABELS = {"ai.backend.distributed.frameworks": "pytorch"}
SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
#: The commands: none (the hook's path), a node launcher, a training script, a shell script.
COMMANDS = st.sampled_from([None, ("torchrun", "--nproc-per-node=2", "train.py"),
                            ("python3", "-u", "train.py"), ("deepspeed", "train.py"),
                            ("accelerate", "launch", "train.py"),
                            ("python", "-m", "torch.distributed.run", "train.py"),
                            ("bash", "run.sh"),
                            ("apptainer", "exec", "--nv", "img.sif", "torchrun", "train.py"),
                            ("bash", "-c", "exec torchrun --nproc-per-node=2 train.py")])
#: A job: every process's (environment, files it may read).
Job = list[tuple[dict[str, str], dict[str, str]]]
PER_NODE = st.lists(st.integers(1, 4), min_size=1, max_size=5)


@st.composite
def srun_steps(draw) -> Job:
    """A Slurm step of 1-5 nodes, 1-4 tasks each, block, cyclic or arbitrary."""
    tpn = draw(PER_NODE)
    hosts = [f"n{i:02d}" for i in range(1, len(tpn) + 1)]
    dist = draw(st.sampled_from(["block", "cyclic", "arbitrary"]))
    order = None
    if dist == "arbitrary":
        order = draw(st.permutations([h for h, c in zip(hosts, tpn, strict=True)
                                      for _ in range(c)]))
    files = {"/h": "\n".join(order) + "\n"} if order else {}
    return [(env, files) for _host, env in job_envs(hosts, hosts, tpn, dist, order)]


@st.composite
def mpi_in_slurm(draw) -> Job:
    """Open MPI's or Hydra's ranks (packed by slot) in a Slurm allocation, its daemon step
    over the nodes (or, in a batch script, over the others: ``ompi-in-sbatch``); the ranks
    on all of the allocation's nodes or on some (``mpirun --host``: 0-2 nodes left idle,
    anywhere after the batch node). Not generated: ranks packed on a part of the allocation
    as many as its nodes (1 + 2 ranks on 2 of 3 nodes), where a rank alone on mpirun's
    node (no step variables) cannot tell them from one rank per node (known gap)."""
    per_node = draw(PER_NODE)
    kind = draw(st.sampled_from(["ompi-in-sbatch", "ompi-in-salloc", "mpich-in-salloc",
                                 "mpich-in-sbatch"]))
    hosts = [f"n{i:02d}" for i in range(1, len(per_node) + 1)]
    allocation = list(hosts)
    for spare in range(draw(st.integers(0, 2))):
        allocation.insert(draw(st.integers(1, len(allocation))), f"s{spare:02d}")
    assume(len(allocation) == len(hosts) or max(per_node) == 1
           or sum(per_node) != len(allocation))
    envs = with_mpi(mpi_in_allocation(hosts, per_node, kind, allocation=allocation),
                    per_node, kind)
    return [(env, {}) for _host, env in envs]


@st.composite
def mpi_in_backendai(draw) -> Job:
    """Open MPI's ranks (packed by slot over derive-env's own host order) in a Backend.AI
    session of main1 and 0-4 subs."""
    per_node = draw(PER_NODE)
    subs = len(per_node) - 1
    names = ["main1", *(f"sub{i}" for i in range(1, subs + 1))]
    replicas = {"main": 1, **({"sub": subs} if subs else {})}
    given = draw(st.permutations(names))
    envs = {name: make_backendai_env(list(given), name, replicas) for name in names}
    canonical = [n.host for n in topology_from(envs["main1"]).nodes]
    world, rank, job = sum(per_node), 0, []
    for host, count in zip(canonical, per_node, strict=True):
        for local in range(count):
            job.append(({**envs[host], "OMPI_COMM_WORLD_SIZE": str(world),
                         "OMPI_COMM_WORLD_RANK": str(rank),
                         "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
                         "OMPI_COMM_WORLD_LOCAL_SIZE": str(count)}, {}))
            rank += 1
    return job


@st.composite
def torchrun_in_srun(draw) -> Job:
    """torchrun's workers inside ``srun --ntasks-per-node=1 torchrun --nproc-per-node=K``:
    each worker has its agent's Slurm task variables and torchrun's own."""
    nodes, nproc = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    hosts = [f"n{i:02d}" for i in range(1, nodes + 1)]
    job = []
    for _host, env in job_envs(hosts, hosts, [1] * nodes, "block"):
        node = int(env["SLURM_NODEID"])
        for local in range(nproc):
            job.append(({**env, "TORCHELASTIC_RUN_ID": "none", "RANK": str(node * nproc + local),
                         "LOCAL_RANK": str(local), "WORLD_SIZE": str(nodes * nproc),
                         "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": str(node),
                         "GROUP_WORLD_SIZE": str(nodes), "ROLE_RANK": str(node * nproc + local),
                         "ROLE_WORLD_SIZE": str(nodes * nproc),
                         "MASTER_ADDR": hosts[0], "MASTER_PORT": "29500"}, {}))
    return job


def ray_job(per_node: list[int], order: Sequence[int]) -> Job:
    """Ray Train's workers on a Ray cluster started by ``srun --ntasks-per-node=1 ray start
    --block`` (the raylets: Ray's daemon step): each worker has its raylet's Slurm task
    variables and Ray's torch variables (ray/train/torch/config.py; Ray numbers the nodes in
    an order of its own: its node k is Slurm's ``order[k]``; master = worker 0's node IP)."""
    hosts = [f"n{i:02d}" for i in range(1, len(per_node) + 1)]
    steps = job_envs(hosts, hosts, [1] * len(hosts), "block")
    world, rank, job = sum(per_node), 0, []
    for node, count in enumerate(per_node):
        _host, env = steps[order[node]]
        for local in range(count):
            job.append(({**env, "RAY_RAYLET_PID": str(3100 + node), "RAY_JOB_ID": "02000000",
                         "ACCELERATE_TORCH_DEVICE": f"cuda:{local}", "LOCAL_RANK": str(local),
                         "LOCAL_WORLD_SIZE": str(count), "NODE_RANK": str(node),
                         "RANK": str(rank), "WORLD_SIZE": str(world),
                         "MASTER_ADDR": "10.0.4.11", "MASTER_PORT": "41637"}, {}))
            rank += 1
    return job


@st.composite
def ray_in_srun(draw) -> Job:
    """:func:`ray_job` of 1-5 nodes, 1-4 workers each, in any node order."""
    per_node = draw(PER_NODE)
    return ray_job(per_node, draw(st.permutations(range(len(per_node)))))


NESTINGS = st.one_of(srun_steps(), mpi_in_slurm(), mpi_in_backendai(), torchrun_in_srun(),
                     ray_in_srun())


def _value(derivation, env: dict[str, str], name: str) -> str | None:
    """What the process sees: derived, or the launcher's own value kept."""
    derived = {v.name: v.value for v in derivation.variables}
    return derived.get(name) or env.get(name)


def check_job(job: Job, command: Sequence[str] | None) -> None:
    """The property of the module docstring for one job and one command."""
    outcomes = []
    for env, files in job:
        try:
            outcomes.append((env, derive_from(Inputs(
                env, LABELS, lambda paths, f=files: {p: f.get(p) for p in paths},
                None, None, None, command))))
        except TopologyError as exc:
            outcomes.append((env, exc))
    refused = [o for _, o in outcomes if isinstance(o, TopologyError)]
    kind = command_kind(command)
    if refused:
        assert len(refused) == len(job), f"only {len(refused)} of {len(job)} refused: {refused[0]}"
        for exc in refused:  # both layers: the command and the launcher that started it
            assert kind is not None and kind[0] == NODE_LAUNCHER, exc
            assert str(exc).startswith(f"{kind[1]} (the command) under "), exc
            assert any(line.title in str(exc) for line in BY_NAME.values()), exc
        return
    masters, digests = set(), set()
    ranks, node_ranks, sizes, nnodes = [], [], set(), set()
    for env, derivation in outcomes:
        masters.add(_value(derivation, env, "MASTER_ADDR"))
        digests.add(digest_of(facts_of(derivation.topology, derivation)))
        ranks.append(_value(derivation, env, "RANK"))
        node_ranks.append(_value(derivation, env, "PET_NODE_RANK")
                          or _value(derivation, env, "NODE_RANK"))
        sizes.add(_value(derivation, env, "WORLD_SIZE"))
        nnodes.add(_value(derivation, env, "PET_NNODES"))
    assert len(masters) == 1 and None not in masters, masters
    assert len(digests) == 1, "more than one job digest"
    count = len(job)
    if kind is not None and kind[0] == NODE_LAUNCHER:
        # each process starts a node's workers: one per node, or some train alone
        assert sorted(map(int, node_ranks)) == list(range(count)), node_ranks
        assert nnodes == {str(count)}, nnodes
        return
    if None not in ranks:  # workers: distinct ranks of one world
        assert sorted(map(int, ranks)) == list(range(count)), ranks
        assert sizes == {str(count)}, sizes
        return
    # the node layer (the hook's path, a shell script that may start torchrun)
    assert kind is None or kind[0] != "script", "a training script got no RANK"
    assert sorted(map(int, node_ranks)) == list(range(count)), node_ranks


@SETTINGS
@given(job=NESTINGS, command=COMMANDS)
def test_every_nesting_is_one_job_or_refused_on_every_process(job: Job, command) -> None:
    check_job(job, command)


def test_srun_two_tasks_per_node_torchrun_is_refused_with_the_fix() -> None:
    """``srun -N2 --ntasks-per-node=2 derive-env -- torchrun train.py``: every task exits 3
    with this message (docs/sources/slurm.md, "Nested launches")."""
    job = [env for _h, env in job_envs(["n01", "n02"], ["n01", "n02"], [2, 2], "block")]
    messages = set()
    for env in job:
        try:
            derive_from(Inputs(env, LABELS, None, None, None, None, ("torchrun", "train.py")))
        except TopologyError as exc:
            assert exc.exit_code == 3
            messages.add(str(exc))
    assert messages == {
        "torchrun (the command) under a Slurm step (srun), which starts 2 tasks on a node "
        "(SLURM_STEP_TASKS_PER_NODE + SLURM_NODEID): each torchrun would start a job of its "
        "own, and every task would train alone. Start one task per node for torchrun (srun "
        "--ntasks-per-node=1 derive-env -- torchrun ...), or drop torchrun and let srun start "
        "one task per GPU (srun --ntasks-per-node=<GPUs per node> derive-env -- python "
        "train.py)"}


def test_a_script_as_one_task_per_node_gets_the_task_s_rank() -> None:
    """``srun -N3 --ntasks-per-node=1 derive-env -- python train.py``: RANK = SLURM_PROCID,
    WORLD_SIZE 3, one per node, no PET_* (torch's env:// joins); without a command (the
    hook) the same task is the node layer (PET_NNODES)."""
    hosts = ["n01", "n02", "n03"]
    _h, env = job_envs(hosts, hosts, [1, 1, 1], "cyclic")[2]
    derivation = derive_from(Inputs(env, LABELS, None, None, None, None, ("python", "t.py")))
    changes = derivation.changes()
    assert {k: changes.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                        "NODE_RANK", "MASTER_ADDR", "PET_NNODES")} == {
        "RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "1",
        "NODE_RANK": "2", "MASTER_ADDR": "n01", "PET_NNODES": None}
    hook = derive_from(Inputs(env, LABELS)).changes()
    assert (hook.get("RANK"), hook["PET_NNODES"], hook["PET_NODE_RANK"]) == (None, "3", "2")


def test_torchrun_under_mpi_one_rank_per_node_is_the_node_layer() -> None:
    """``mpirun --map-by ppr:1:node derive-env -- torchrun`` in a 3-node allocation: each rank
    is a node (PET_NODE_RANK = its rank, PET_NNODES 3); with 2 ranks on one node, every rank
    is refused, also those alone on their node (3 + 1 + 1 processes on 3 nodes)."""
    hosts = ["n01", "n02", "n03"]
    torchrun = ("torchrun", "train.py")
    one = with_mpi(mpi_in_allocation(hosts, [1, 1, 1], "ompi-in-salloc"), [1, 1, 1],
                   "ompi-in-salloc")
    got = [derive_from(Inputs(env, LABELS, None, None, None, None, torchrun)).changes()
           for _h, env in one]
    assert [(c["PET_NODE_RANK"], c["PET_NNODES"], c.get("RANK")) for c in got] == [
        ("0", "3", None), ("1", "3", None), ("2", "3", None)]
    many = with_mpi(mpi_in_allocation(hosts, [3, 1, 1], "ompi-in-salloc"), [3, 1, 1],
                    "ompi-in-salloc")
    _h, last = many[-1]
    try:
        derive_from(Inputs(last, LABELS, None, None, None, None, torchrun))
    except TopologyError as exc:
        assert str(exc).startswith(
            "torchrun (the command) under Open MPI (mpirun), which starts 5 processes on 3 "
            "nodes (OMPI_COMM_WORLD_LOCAL_SIZE): each torchrun would start a job of its own")
        assert "(mpirun --map-by ppr:1:node derive-env -- torchrun ...)" in str(exc)
    else:
        raise AssertionError("torchrun under 5 ranks on 3 nodes was not refused")


def test_the_raylets_step_is_ray_s_daemon_step() -> None:
    """One Ray worker per node, Ray's node order Slurm's: the raylets' srun step has the
    same world size and ranks as Ray's workers, yet it is Ray's daemon step (the line's
    ``daemons``), shadowed, not a layer that confirms Ray's (whose node count would then
    let a torchrun on one worker pass while another is refused)."""
    job = ray_job([1, 1, 1], [0, 1, 2])
    check_job(job, ("python", "train.py"))
    check_job(job, None)
    assert topology_from(job[1][0]).layers[-1] == (
        "shadowed: slurm-step (a Slurm step (srun)): one task on each of its nodes around "
        "ray-train's ranks: a Ray Train worker's daemon step, not the ranks")


def test_torchrun_where_the_launcher_does_not_count_nodes_is_refused_everywhere() -> None:
    """Ray's workers state this node's count, not every node's: a worker alone on its node
    cannot know that another node has two, so torchrun is refused on each of them."""
    check_job(ray_job([2, 1], [1, 0]), ("torchrun", "train.py"))
    check_job(ray_job([1, 1], [0, 1]), ("torchrun", "train.py"))


@pytest.mark.parametrize(("argv", "kind"), [
    (None, None), ((), None),
    (("torchrun", "--nproc-per-node=2", "t.py"), (NODE_LAUNCHER, "torchrun")),
    (("/opt/venv/bin/torchrun", "t.py"), (NODE_LAUNCHER, "torchrun")),
    (("python3.11", "-u", "-m", "torch.distributed.run", "t.py"), (NODE_LAUNCHER, "torchrun")),
    (("python", "-mtorch.distributed.launch", "t.py"), (NODE_LAUNCHER, "torchrun")),
    (("deepspeed", "--num_gpus=2", "t.py"), (NODE_LAUNCHER, "deepspeed")),
    (("accelerate", "launch", "t.py"), (NODE_LAUNCHER, "accelerate launch")),
    (("accelerate", "config"), ("other", "accelerate")),
    (("python", "-X", "dev", "train.py"), ("script", "python train.py")),
    (("python3", "-m", "lightning_app"), ("script", "python3 lightning_app")),
    (("python", "-c", "import x"), ("script", "python -c")),
    (("mpirun.openmpi", "-np", "2", "python"), ("launcher", "mpirun.openmpi")),
    (("srun", "python"), ("launcher", "srun")),
    (("bash", "run.sh"), ("other", "bash")),
    (("pythonista",), ("other", "pythonista")),
    (("env", "FOO=1", "python", "t.py"), ("script", "python t.py")),
    (("apptainer", "exec", "img.sif", "./run.sh"), ("other", "run.sh")),
    (("apptainer", "build", "img.sif", "def"), ("other", "apptainer")),
    (("uv", "pip", "install", "torch"), ("other", "uv")),
    (("env",), ("other", "env")),
    (("bash", "-x", "run.sh"), ("other", "bash")),
    (("bash", "-c", "cd /w; torchrun t.py"), ("other", "bash")),
    (("sh", "-c", "torchrun 't.py"), ("other", "sh")),
    (("singularity", "exec", "img.sif", "mpirun", "python"), ("launcher", "mpirun")),
])
def test_command_kind(argv, kind) -> None:
    assert command_kind(argv) == kind


#: Wrapped node launchers (issue 24): a wrapper starts its command once per start.
WRAPPED = [
    (("apptainer", "exec", "img.sif", "torchrun", "--nproc-per-node=8", "train.py"),
     "torchrun"),
    (("singularity", "exec", "--nv", "-B", "/data:/data", "img.sif", "torchrun", "t.py"),
     "torchrun"),
    (("apptainer", "run", "--env", "A=1", "img.sif", "deepspeed", "t.py"), "deepspeed"),
    (("env", "FOO=1", "-u", "BAR", "torchrun", "t.py"), "torchrun"),
    (("uv", "run", "--with", "x", "torchrun", "t.py"), "torchrun"),
    (("uv", "run", "--", "python", "-m", "torch.distributed.run", "t.py"), "torchrun"),
    (("conda", "run", "-n", "X", "torchrun", "t.py"), "torchrun"),
    (("conda", "run", "-p", "/opt/env", "--no-capture-output", "torchrun", "t.py"),
     "torchrun"),
    (("pixi", "run", "-e", "cuda", "torchrun", "t.py"), "torchrun"),
    (("poetry", "run", "accelerate", "launch", "t.py"), "accelerate launch"),
    (("bash", "-c", "torchrun train.py"), "torchrun"),
    (("sh", "-c", "exec torchrun --nproc-per-node=8 train.py"), "torchrun"),
    (("bash", "-lc", "NCCL_DEBUG=INFO exec torchrun t.py"), "torchrun"),
    (("nice", "-n", "5", "torchrun", "t.py"), "torchrun"),
    (("ionice", "-c", "2", "-n", "0", "torchrun", "t.py"), "torchrun"),
    (("numactl", "--cpunodebind=0", "-m", "0", "torchrun", "t.py"), "torchrun"),
    (("taskset", "-c", "0-15", "torchrun", "t.py"), "torchrun"),
    (("stdbuf", "-oL", "-e", "L", "torchrun", "t.py"), "torchrun"),
    (("/usr/bin/time", "-v", "torchrun", "t.py"), "torchrun"),
    (("chrt", "-f", "10", "torchrun", "t.py"), "torchrun"),
    (("nohup", "torchrun", "t.py"), "torchrun"),
    (("accelerate-launch", "t.py"), "accelerate launch"),
    (("deepspeed.pt", "t.py"), "deepspeed"),
]


@pytest.mark.parametrize(("argv", "name"), WRAPPED)
def test_a_wrapped_node_launcher_is_one_and_refused_under_two_tasks_per_node(
        argv, name) -> None:
    """The wrapper's command decides: ``srun --ntasks-per-node=2 derive-env -- apptainer
    exec img.sif torchrun ...`` (recorded task 3 of srun-block) exits 3 as plain torchrun
    does, instead of every task training alone."""
    from support.recorded import FIXTURES, load_fixture

    assert command_kind(argv) == (NODE_LAUNCHER, name)
    _ran_on, env = load_fixture(FIXTURES / "srun-block" / "task3.env")
    with pytest.raises(TopologyError) as caught:
        derive_from(Inputs(env, LABELS, None, None, None, None, argv))
    assert caught.value.exit_code == 3
    assert str(caught.value).startswith(
        f"{name} (the command) under a Slurm step (srun), which starts 2 tasks on a node "
        "(SLURM_STEP_TASKS_PER_NODE + SLURM_NODEID): each")


def test_the_exec_path_reads_the_command_from_argv(tmp_path) -> None:
    """The real program: ``derive-env -- torchrun ...`` in task 3 of ``srun -N3
    --ntasks-per-node=2`` (recorded) exits 3 without running torchrun; ``-- python3 -c``
    in the same task runs, with the task's RANK."""
    import subprocess

    from helpers import console_script
    from support.recorded import FIXTURES, load_fixture

    _ran_on, env = load_fixture(FIXTURES / "srun-block" / "task3.env")
    labels = tmp_path / "labels.json"
    labels.write_text('{"ai.backend.distributed.frameworks": "pytorch"}')
    env = {**env, "PATH": "/usr/bin:/bin", "DERIVE_ENV_LABELS_FILE": str(labels)}
    refused = subprocess.run([console_script(), "--", "torchrun", "train.py"], env=env,
                             capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 3
    assert refused.stderr.startswith(
        "derive-env: error: torchrun (the command) under a Slurm step (srun), which starts 2 "
        "tasks on a node")
    script = subprocess.run([console_script(), "--", "python3", "-c",
                             "import os; print(os.environ['RANK'], os.environ['WORLD_SIZE'])"],
                            env=env, capture_output=True, text=True, timeout=60, check=False)
    assert (script.returncode, script.stdout) == (0, "3 6\n"), script.stderr


def test_torchrun_under_mpi_on_a_part_of_the_allocation_is_refused_naming_both_counts() -> None:
    """``mpirun --host n1,n2 --map-by ppr:1:node derive-env -- torchrun`` in an allocation
    of n[1-3]: two torchrun agents start, so PET_NNODES=3 (the allocation's count, the
    daemon step being shadowed) would wait forever; every rank exits 3 naming both counts.
    ``-- python t.py`` in the same ranks runs, each a worker of 2."""
    envs = [{"SLURM_JOB_ID": "10", "SLURM_JOB_NODELIST": "n[1-3]", "SLURM_JOB_NUM_NODES": "3",
             "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_NUM_NODES": "2",
             "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
             "SLURM_PROCID": str(r), "SLURM_LOCALID": "0", "SLURM_NODEID": str(r),
             "OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": "2",
             "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"}
            for r in (0, 1)]
    for env in envs:
        with pytest.raises(TopologyError) as caught:
            derive_from(Inputs(env, LABELS, None, None, None, None, ("torchrun", "t.py")))
        assert str(caught.value) == (
            "torchrun (the command) under Open MPI (mpirun), which starts it on 2 process(es) "
            "(OMPI_COMM_WORLD_SIZE), one per node, in a job of 3 nodes (SLURM_JOB_NODELIST + "
            "SLURM_JOB_NUM_NODES): each torchrun would wait for every node of the job, and the "
            "others never start it. Start one task on every node of the job (mpirun --map-by "
            "ppr:1:node derive-env -- torchrun ..., with no host list narrower than the job), "
            "or run the job on as many nodes as start it")
        changes = derive_from(Inputs(env, LABELS, None, None, None, None,
                                     ("python", "t.py"))).changes()
        assert (changes["RANK"], changes["WORLD_SIZE"], changes.get("PET_NNODES")) == (
            env["OMPI_COMM_WORLD_RANK"], "2", None)
