"""The composer (sources/compose.py): reports of several sources -> one topology.

Reports are built by hand here (each source's own tests check its reports against the
recorded environments); tests/properties/test_recorded_envs.py and tests/sources/ check whole jobs.
"""

from __future__ import annotations

import json

import pytest

from derive_env.errors import LabelError, TopologyError
from derive_env.frameworks import jax as jax_framework
from derive_env.frameworks import pytorch, tensorflow
from derive_env.frameworks.context import Context
from derive_env.policy import ImagePolicy
from derive_env.sources.compose import compose, topology_of
from derive_env.sources.report import Processes, Report
from derive_env.topology import Inputs, Node, ProcessLayout

HOSTS = ("gpu-a100-09", "gpu-a100-10", "gpu-a100-11")
NODES = tuple(Node(host=h) for h in HOSTS)


def mpi(rank: int, local_rank: int, world: int = 6, local: int = 2) -> Report:
    return Report(source="openmpi", title="Open MPI (mpirun)",
                  processes=Processes(rank, local_rank, world, local),
                  inputs={"processes": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")})


def step(node_rank: int, rank: int, world: int, tasks: tuple[int, ...], **kw) -> Report:
    fields = dict(
        source="slurm-step", title="a Slurm step (srun)", nodes=NODES[:len(tasks)],
        node_rank=node_rank,
        processes=Processes(rank, kw.pop("local", 0), world, tasks[node_rank], tasks),
        job=("slurm", "11", "0"),
        inputs={"nodes": ("SLURM_STEP_NODELIST",), "node_rank": ("SLURM_NODEID",),
                "processes": ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS")})
    fields.update(kw)
    return Report(**fields)


def allocation(node_rank: int | None = None, problem: str | None = None) -> Report:
    return Report(source="slurm-allocation", title="a Slurm allocation", nodes=NODES,
                  node_rank=node_rank, problem=problem,
                  inputs={"nodes": ("SLURM_JOB_NODELIST",), "node_rank": ("SLURMD_NODENAME",)})


def test_mpi_alone_is_a_partial_topology_without_a_master() -> None:
    topo = compose([mpi(3, 1)])
    assert (topo.nodes, topo.node_rank, topo.num_nodes, topo.multi_node) == ((), None, None, True)
    assert topo.master_addr is None
    assert topo.missing is not None and topo.missing.startswith(
        "Open MPI (mpirun) states no host list, so the host of rank 0 is unknown: set MASTER_ADDR")
    assert topo.per_process


def test_mpi_on_one_node_alone_is_a_single_node() -> None:
    topo = compose([mpi(1, 1, world=2, local=2)])
    assert (topo.multi_node, topo.master_addr, topo.num_nodes) == (False, "127.0.0.1", 1)


def test_mpi_in_an_allocation_takes_the_hosts_and_the_master_from_it() -> None:
    topo = compose([mpi(3, 1), allocation()])
    assert [n.host for n in topo.nodes] == list(HOSTS)
    assert (topo.node_rank, topo.master_addr) == (None, "gpu-a100-09")
    assert topo.inputs["nodes"] == ("SLURM_JOB_NODELIST",)
    assert topo.processes is not None and topo.processes.rank == 3


def test_a_daemon_step_is_shadowed_and_the_allocation_gives_the_hosts() -> None:
    """mpirun's orted step (one task per node, 2 of 3 nodes) beside Open MPI's 6 ranks."""
    daemons = step(0, 0, 2, (1, 1), nodes=NODES[1:])
    topo = compose([mpi(3, 1), daemons, allocation(node_rank=1)])
    assert [n.host for n in topo.nodes] == list(HOSTS)
    assert topo.node_rank == 1
    assert topo.processes is not None and topo.processes.world_size == 6
    assert ("shadowed: slurm-step (a Slurm step (srun)): one task on each of its nodes around "
            "openmpi's ranks: Open MPI (mpirun)'s daemon step, not the ranks") in topo.layers


@pytest.mark.parametrize("rank", [0, 1])
def test_a_daemon_step_is_recognised_by_what_it_is_not_by_its_sizes(rank: int) -> None:
    """mpirun -np 2, both ranks packed on the first node of a 2-node allocation: rank 0 is
    the orted step's task 0 of 2 as well, a coincidence that must neither stop it nor make
    the step its process layer (issue 15; Lightning-AI/pytorch-lightning#11406)."""
    daemons = step(0, 0, 2, (1, 1), nodes=NODES[:2])
    two = allocation(node_rank=0)._replace(nodes=NODES[:2])
    topo = compose([mpi(rank, rank, world=2, local=2), daemons, two])
    assert (topo.node_rank, topo.per_process, topo.inputs["nodes"]) == (
        0, True, ("SLURM_JOB_NODELIST",))
    assert topo.processes == ProcessLayout(rank=rank, local_rank=rank, world_size=2,
                                           local_world_size=2, workers=True)
    assert topo.layers[-1] == (
        "shadowed: slurm-step (a Slurm step (srun)): one task on each of its nodes around "
        "openmpi's ranks: Open MPI (mpirun)'s daemon step, not the ranks")


def test_torchruns_agents_step_keeps_its_node_layer() -> None:
    """srun --ntasks-per-node=1 torchrun: the step's tasks are torchrun's agents."""
    agents = step(1, 1, 3, (1, 1, 1))
    topo = compose([torchrun(1), agents])
    assert topo.layers[-1] == (
        "shadowed: slurm-step (a Slurm step (srun)): its world size or rank differs from "
        "torchrun's, so its tasks started torchrun (torchelastic)'s processes, not the ranks")
    assert (topo.num_nodes, topo.node_rank, topo.per_process) == (3, 1, True)


def test_an_equal_inner_layer_confirms_the_step() -> None:
    topo = compose([mpi(4, 0, world=6, local=2), step(2, 4, 6, (2, 2, 2)), allocation()])
    assert (topo.node_rank, topo.processes.tasks_per_node) == (2, (2, 2, 2))
    assert topo.inputs["nodes"] == ("SLURM_STEP_NODELIST",)


def test_the_processes_per_node_must_add_up() -> None:
    bad = step(0, 0, 5, (2, 2, 2))
    with pytest.raises(TopologyError, match=r"add up to 6, not to the world size 5"):
        compose([bad])


def test_this_nodes_processes_must_be_its_local_world_size() -> None:
    bad = step(1, 2, 6, (2, 2, 2))._replace(processes=Processes(2, 0, 6, 3, (2, 2, 2)))
    with pytest.raises(TopologyError, match=r"node rank 1 has 2 process"):
        compose([bad])


def test_rank_0_off_node_rank_0_is_an_error() -> None:
    with pytest.raises(TopologyError, match=r"rank 0 .* runs on gpu-a100-10, node rank 1"):
        compose([mpi(0, 0), Report(source="backendai", title="a Backend.AI session",
                                   nodes=NODES, node_rank=1,
                                   inputs={"nodes": ("BACKENDAI_CLUSTER_HOSTS",)})])


def test_the_node_of_rank_0_goes_first() -> None:
    """srun -m arbitrary: rank 0 on the last node of the step list."""
    arbitrary = step(2, 0, 6, (1, 2, 3), local=0, master="gpu-a100-11")
    arbitrary = arbitrary._replace(processes=Processes(0, 0, 6, 3, (1, 2, 3)),
                                   inputs={**arbitrary.inputs, "master": ("SLURM_HOSTFILE",)})
    topo = compose([arbitrary])
    assert [n.host for n in topo.nodes] == ["gpu-a100-11", "gpu-a100-09", "gpu-a100-10"]
    assert (topo.node_rank, topo.master, topo.master_addr) == (0, None, "gpu-a100-11")
    assert topo.processes.tasks_per_node == (3, 1, 2)
    other = compose([arbitrary._replace(node_rank=1, processes=Processes(4, 1, 6, 2, (1, 2, 3)))])
    assert other.node_rank == 2 and other.nodes == topo.nodes


def torchrun(group_rank: int, groups: int = 3) -> Report:
    return Report(source="torchrun", title="torchrun (torchelastic)", num_nodes=groups,
                  node_rank=group_rank, processes=Processes(2 * group_rank, 0, 2 * groups, 2),
                  master="gpu-a100-09", master_port=29400, renumbers=True,
                  preset=frozenset({"RANK", "MASTER_PORT"}),
                  inputs={"num_nodes": ("GROUP_WORLD_SIZE",), "node_rank": ("GROUP_RANK",),
                          "master": ("MASTER_ADDR",), "master_port": ("MASTER_PORT",),
                          "processes": ("RANK",)})


@pytest.mark.parametrize("group_rank", [0, 1, 2])
def test_torchrun_never_takes_another_sources_host_list(group_rank) -> None:
    """Its rendezvous numbers the nodes: every node, whatever its ranks, drops the list."""
    for outer in (step(1, 1, 3, (1, 1, 1)),
                  Report(source="backendai", title="a Backend.AI session", nodes=NODES,
                         node_rank=1, inputs={"nodes": ("BACKENDAI_CLUSTER_HOSTS",)})):
        topo = compose([torchrun(group_rank), outer])
        assert (topo.nodes, topo.num_nodes, topo.node_rank, topo.master_addr) == (
            (), 3, group_rank, "gpu-a100-09")
        assert (topo.master_port, topo.preset) == (29400, {"RANK", "MASTER_PORT"})
        assert (f"torchrun (torchelastic) numbers the nodes itself (its rendezvous), in an "
                f"order {outer.title} does not state: its host list is not used for them"
                ) in topo.notes


def test_a_master_that_is_not_the_first_host_is_an_error() -> None:
    inner = Report(source="pals", title="Cray PALS (mpiexec)", num_nodes=3, node_rank=0,
                   master="gpu-a100-10", processes=Processes(0, 0, 3, 1),
                   inputs={"master": ("X",), "node_rank": ("PALS_NODEID",)})
    session = Report(source="backendai", title="a Backend.AI session", nodes=NODES,
                     node_rank=0, inputs={"nodes": ("BACKENDAI_CLUSTER_HOSTS",)})
    with pytest.raises(TopologyError, match=r"disagree on the host of rank 0 \(the first node"):
        compose([inner, session])


def test_disagreeing_layers_are_an_error_naming_both() -> None:
    inner = Report(source="pals", title="Cray PALS (mpiexec)", node_rank=0,
                   processes=Processes(0, 0, 6, 2), inputs={"node_rank": ("PALS_NODEID",)})
    with pytest.raises(TopologyError) as caught:
        compose([inner, Report(source="backendai", title="a Backend.AI session", nodes=NODES,
                               node_rank=2, inputs={"node_rank": ("BACKENDAI_CLUSTER_HOST",)})])
    assert str(caught.value).startswith(
        "Cray PALS (mpiexec) and a Backend.AI session disagree on the node rank of this "
        "process: PALS_NODEID say 0, BACKENDAI_CLUSTER_HOST say 2.")


def test_a_problem_is_raised_only_for_the_innermost_source() -> None:
    with pytest.raises(TopologyError, match=r"^batch$"):
        compose([allocation(problem="batch")])
    assert compose([mpi(1, 1), allocation(problem="batch")]).nodes == NODES


def test_a_named_source_needs_its_variables() -> None:
    with pytest.raises(TopologyError) as caught:
        topology_of(Inputs({"OMPI_COMM_WORLD_SIZE": "2"}, {}, choice="openmpi"))
    assert str(caught.value) == (
        "--source (or DERIVE_ENV_SOURCE)='openmpi': expected a source whose variables are set: "
        "Open MPI (mpirun) needs all of OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_RANK, "
        "OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE; not set: OMPI_COMM_WORLD_RANK, "
        "OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE")
    topo = topology_of(Inputs({"OMPI_COMM_WORLD_SIZE": "2"}, {}, choice="none"))
    assert (topo.num_nodes, topo.source, topo.layers) == (1, "standalone", ())


# --- what the frameworks get from a process layer --------------------------------------------

POLICY = ImagePolicy.from_labels({"ai.backend.distributed.frameworks": "pytorch,jax,tensorflow"})


def values(part) -> dict[str, str]:
    return {v.name: v.value for v in part.variables}


def test_several_processes_per_node_get_the_process_layer_and_no_pet() -> None:
    topo = compose([step(1, 3, 6, (2, 2, 2), local=1, reserved_ports=(12001, 12002, 12003),
                         inputs={"nodes": ("SLURM_STEP_NODELIST",), "ports": ("RESV",),
                                 "node_rank": ("SLURM_NODEID",), "processes": ("SLURM_PROCID",)})])
    ctx = Context(topo, POLICY, Inputs({}, {}))
    assert values(pytorch.derive(ctx)) == {
        "MASTER_ADDR": "gpu-a100-09", "MASTER_PORT": "12001", "RANK": "3", "LOCAL_RANK": "1",
        "WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "1"}
    assert values(jax_framework.derive(ctx)) == {
        "JAX_COORDINATOR_ADDRESS": "gpu-a100-09:12003", "JAX_NUM_PROCESSES": "6",
        "JAX_PROCESS_ID": "3"}
    config = json.loads(values(tensorflow.derive(ctx))["TF_CONFIG"])
    # TensorFlow's 2 ports per host would hold JAX's 12003: its block moves above it.
    assert config == {"cluster": {"worker": [
        "gpu-a100-09:12004", "gpu-a100-09:12005", "gpu-a100-10:12004", "gpu-a100-10:12005",
        "gpu-a100-11:12004", "gpu-a100-11:12005"]}, "task": {"type": "worker", "index": 3}}
    tf_only = ImagePolicy.from_labels({"ai.backend.distributed.frameworks": "tensorflow"})
    ctx = Context(topo, tf_only, Inputs({}, {}))
    alone = json.loads(values(tensorflow.derive(ctx))["TF_CONFIG"])
    assert alone["cluster"]["worker"][:2] == ["gpu-a100-09:12002", "gpu-a100-09:12003"]
    labelled = ImagePolicy.from_labels({
        "ai.backend.distributed.frameworks": "jax,tensorflow",
        "ai.backend.distributed.tensorflow-port": "3000",
        "ai.backend.distributed.jax-port": "3001"})
    with pytest.raises(LabelError) as caught:
        tensorflow.derive(Context(topo, labelled, Inputs({}, {})))
    assert str(caught.value) == (
        "the JAX coordinator's port 3001 (label ai.backend.distributed.jax-port) and "
        "TensorFlow's ports 3000-3001 (label ai.backend.distributed.tensorflow-port) both hold "
        "port 3001 on rank 0's host, where only one server can listen: set label "
        "ai.backend.distributed.jax-port or label ai.backend.distributed.tensorflow-port to "
        "another port")


def test_one_process_per_node_is_the_node_layer() -> None:
    topo = compose([step(2, 2, 3, (1, 1, 1))])
    ctx = Context(topo, POLICY, Inputs({}, {}))
    got = values(pytorch.derive(ctx))
    assert (got["PET_NNODES"], got["PET_NODE_RANK"], got["NODE_RANK"]) == ("3", "2", "2")
    assert "RANK" not in got
    port = int(got["MASTER_PORT"])
    assert 61000 <= port <= 65535  # derived from the job, above the ephemeral range


def test_tf_needs_every_nodes_processes() -> None:
    ctx = Context(compose([mpi(3, 1), allocation()]), POLICY, Inputs({}, {}))
    with pytest.raises(TopologyError, match=r"^TF_CONFIG cannot be built: it lists every task"):
        tensorflow.derive(ctx)


def test_a_jax_port_on_the_launchers_store_is_an_error() -> None:
    policy = ImagePolicy.from_labels({"ai.backend.distributed.frameworks": "jax",
                                      "ai.backend.distributed.jax-port": "29400"})
    with pytest.raises(TopologyError) as caught:
        jax_framework.derive(Context(compose([torchrun(0)]), policy, Inputs({}, {})))
    assert str(caught.value) == (
        "the JAX coordinator's port 29400 (label ai.backend.distributed.jax-port) and the "
        "master port 29400 (MASTER_PORT) both hold port 29400 on rank 0's host, where only one "
        "server can listen: set label ai.backend.distributed.jax-port to another port")


@pytest.mark.parametrize(("environ", "gpus", "local_rank", "expected"), [
    ({}, 4, 1, "2,3"),                                   # 4 GPUs, 2 tasks: the second half
    ({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, 4, 1, "2,3"),  # ordinals in the list, not its ids
    ({"CUDA_VISIBLE_DEVICES": "6,7"}, 4, 1, "0,1"),      # narrowed per task: all it sees
    ({}, 3, 1, None),                                    # 3 GPUs do not divide among 2
    ({"CUDA_VISIBLE_DEVICES": "GPU-1a,GPU-2b"}, 2, 0, "0"),  # UUIDs count as devices
    ({}, None, 0, None),                                 # no GPU known
])
def test_jax_local_device_ids(environ, gpus, local_rank, expected) -> None:
    rank = 2 + local_rank
    report = step(1, rank, 6, (2, 2, 2), local=local_rank, gpus=gpus,
                  inputs={"nodes": ("SLURM_STEP_NODELIST",), "gpus": ("SLURM_GPUS_ON_NODE",),
                          "processes": ("SLURM_PROCID",)})
    policy = ImagePolicy.from_labels({"ai.backend.distributed.frameworks": "jax"})
    got = values(jax_framework.derive(Context(compose([report]), policy, Inputs(environ, {}))))
    assert got.get("JAX_LOCAL_DEVICE_IDS") == expected
    assert got["JAX_PROCESS_ID"] == str(rank)


def test_a_forced_source_names_the_sources_it_ignores() -> None:
    environ = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1",
               "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    topo = topology_of(Inputs(environ, {}, choice="none"))
    assert (topo.num_nodes, topo.source, topo.layers) == (1, "standalone", ())
    assert topo.warnings == (
        "source none chosen (--source or DERIVE_ENV_SOURCE): the variables of openmpi are set "
        "and ignored; if they describe this job, every process may derive another job than "
        "its launcher started",)
    assert topology_of(Inputs(environ, {}, choice="openmpi")).warnings == ()


def test_two_mpi_launchers_that_disagree_are_an_error() -> None:
    hydra = Report(source="hydra", title="MPICH Hydra or Intel MPI (mpiexec)",
                   processes=Processes(1, 0, 4, 1), inputs={"processes": ("PMI_RANK",)})
    with pytest.raises(TopologyError) as caught:
        compose([mpi(3, 1), hydra])
    assert str(caught.value).startswith(
        "Open MPI (mpirun) and MPICH Hydra or Intel MPI (mpiexec) both state this process's "
        "rank, and differently: rank 3 of 6 (OMPI_COMM_WORLD_RANK + OMPI_COMM_WORLD_SIZE) "
        "against rank 1 of 4 (PMI_RANK); one set is left over from another job.")


def test_tensorflow_ports_beyond_the_reservation_warn() -> None:
    topo = compose([step(1, 3, 6, (2, 2, 2), local=1, reserved_ports=(12000, 12001),
                         inputs={"nodes": ("SLURM_STEP_NODELIST",),
                                 "ports": ("SLURM_STEP_RESV_PORTS",),
                                 "node_rank": ("SLURM_NODEID",), "processes": ("SLURM_PROCID",)})])
    policy = ImagePolicy.from_labels({"ai.backend.distributed.frameworks": "pytorch,tensorflow"})
    out = tensorflow.derive(Context(topo, policy, Inputs({}, {})))
    assert out.warnings == [
        "TensorFlow's port(s) 12002 (one per process of a node, from 12001) are not among the "
        "step's reserved ports (SLURM_STEP_RESV_PORTS: 12000, 12001): another step on the "
        "node may hold them; reserve more (srun --resv-ports) or set label "
        "ai.backend.distributed.tensorflow-port"]
