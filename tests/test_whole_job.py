"""Every node's view of the job (whole_job.py): each node's row is the frameworks' own
derivation with that node as "this node", for every source; conflicts are marked per node."""

from __future__ import annotations

import pytest

from derive_env.errors import TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.topology import Inputs
from derive_env.whole_job import ROWS, JobView, NodeRow, job_view
from support.recorded import FIXTURES, load_fixture

FW = PREFIX + "frameworks"
ALL = {FW: "pytorch,tensorflow,jax"}


def session(host: str, size: int = 3, **extra: str) -> dict[str, str]:
    """A Backend.AI container of a session main1, sub1, ..., ``extra`` set in it."""
    hosts = ["main1", *(f"sub{i}" for i in range(1, size))]
    role = "main" if host == "main1" else "sub"
    return {"BACKENDAI_CLUSTER_SIZE": str(size), "BACKENDAI_CLUSTER_HOSTS": ",".join(hosts),
            "BACKENDAI_CLUSTER_HOST": host, "BACKENDAI_CLUSTER_ROLE": role,
            "BACKENDAI_CLUSTER_IDX": host.removeprefix(role),
            "BACKENDAI_CLUSTER_LOCAL_RANK": str(hosts.index(host)),
            "BACKENDAI_CLUSTER_REPLICAS": f"main:1,sub:{size - 1}", "GPU_COUNT": "2", **extra}


def trainjob_node(job: str, nodes: int, index: int) -> dict[str, str]:
    """One node of a Kubeflow TrainJob, as EnforceMLPolicy sets it (tests/sources)."""
    return {"PET_NNODES": str(nodes), "PET_NPROC_PER_NODE": "auto",
            "PET_NODE_RANK": str(index), "PET_MASTER_ADDR": f"{job}-node-0-0.{job}",
            "PET_MASTER_PORT": "29500"}


def recorded(name: str) -> dict[str, str]:
    return load_fixture(FIXTURES / f"{name}.env")[1]


def test_backendai_rows_are_each_nodes_derivation() -> None:
    env = session("sub1")
    view = job_view(Inputs(env, ALL), own=derive(env, ALL))
    assert (view.source, view.num_nodes, view.own_rank, view.absent) == ("backendai", 3, 1, None)
    assert view.columns == ("NODE_RANK", "PET_NODE_RANK", "TF_CONFIG", "JAX_PROCESS_ID")
    assert [(r.rank, r.host, r.cells, r.conflicts) for r in view.rows] == [
        (rank, host, {"NODE_RANK": str(rank), "PET_NODE_RANK": str(rank),
                      "TF_CONFIG": f"worker {rank}", "JAX_PROCESS_ID": str(rank)}, {})
        for rank, host in enumerate(["main1", "sub1", "sub2"])]
    assert view.shared == (
        ("MASTER_ADDR", "main1", None), ("MASTER_PORT", "29500", None), ("PET_NNODES", "3", None),
        ("PET_MASTER_ADDR", "main1", None), ("PET_MASTER_PORT", "29500", None),
        ("JAX_COORDINATOR_ADDRESS", "main1:1234", None), ("JAX_NUM_PROCESSES", "3", None),
        ("DERIVE_ENV_RUN_ID", "f9c90836326ca878", None))  # one run id on every node
    # the GPU count and JAX's devices are this container's: not derived for the others
    assert view.node_decided == ("PET_NPROC_PER_NODE", "JAX_LOCAL_DEVICE_IDS")
    # the same table from every node of the session
    for host in ("main1", "sub2"):
        other = job_view(Inputs(session(host), ALL))
        assert (other.columns, other.shared) == (view.columns, view.shared)
        assert [r.cells for r in other.rows] == [r.cells for r in view.rows]


def test_a_session_wide_node_rank_is_marked_where_it_is_wrong() -> None:
    env = session("sub2", NODE_RANK="0", MASTER_PORT="1234")
    with pytest.raises(TopologyError, match="NODE_RANK='0'"):
        derive(env, {FW: "pytorch"})
    view = job_view(Inputs(env, {FW: "pytorch"}))
    assert [r.conflicts for r in view.rows] == [{}, {"NODE_RANK": "0"}, {"NODE_RANK": "0"}]
    assert [r.cells["NODE_RANK"] for r in view.rows] == ["0", "1", "2"]
    # a session-wide value that wins (the port) is shown as the value every node uses
    assert ("MASTER_PORT", "1234", None) in view.shared


def test_a_wrong_session_wide_size_is_marked_in_the_shared_values() -> None:
    view = job_view(Inputs(session("sub1", PET_NNODES="2"), {FW: "pytorch"}))
    assert ("PET_NNODES", "3", "2") in view.shared
    assert all(r.conflicts == {} for r in view.rows)


def test_processes_per_node_as_ranges() -> None:
    # srun -n5 over 3 nodes: 3 tasks on the first node, 1 on each other
    view = job_view(Inputs(recorded("srun-uneven/task4"), ALL))
    cells = [(r.host, r.cells["RANK"], r.cells["LOCAL_RANK"], r.cells["TF_CONFIG"])
             for r in view.rows]
    assert cells == [("gpu-a100-09", "0-2", "0-2", "worker 0-2"),
                     ("gpu-a100-10", "3", "0", "worker 3"),
                     ("gpu-a100-11", "4", "0", "worker 4")]
    assert view.own_rank == 2
    assert ("WORLD_SIZE", "5", None) in view.shared


def test_a_launcher_that_states_only_its_own_ranks() -> None:
    # mpirun inside an sbatch allocation: the nodes are known, not which ranks run where
    env = recorded("ompi-in-salloc/rank3")
    labels = {FW: "pytorch,jax"}
    view = job_view(Inputs(env, labels), own=derive(env, labels))
    assert [r.host for r in view.rows] == ["gpu-a100-09", "gpu-a100-10", "gpu-a100-11"]
    assert [bool(r.cells) for r in view.rows] == [r.rank == view.own_rank for r in view.rows]
    assert view.notes == (
        "the launcher states only this process's ranks (OMPI_COMM_WORLD_RANK + "
        "OMPI_COMM_WORLD_LOCAL_RANK + OMPI_COMM_WORLD_SIZE + OMPI_COMM_WORLD_LOCAL_SIZE), not "
        "which ranks run on the other nodes: their per-process variables are not derived here",)


def test_no_node_list_and_no_count_is_said_plainly() -> None:
    view = job_view(Inputs(recorded("ompi-ssh/rank3"), {FW: "pytorch"}))
    assert view == JobView(source="openmpi", num_nodes=None, own_rank=None, absent=(
        "openmpi states no node list and no node count: each process knows only its own ranks "
        "(OMPI_COMM_WORLD_RANK + OMPI_COMM_WORLD_LOCAL_RANK + OMPI_COMM_WORLD_SIZE + "
        "OMPI_COMM_WORLD_LOCAL_SIZE), so the other nodes' views cannot be derived here. Run "
        "--explain in each process, or run the launcher inside an allocation or a Backend.AI "
        "session that states the nodes"))


def test_a_count_without_hosts_and_a_launchers_own_variables() -> None:
    # a TrainJob node: PET_NODE_RANK is the operator's for this node, not session-wide
    view = job_view(Inputs(trainjob_node("bert", 3, 1), {FW: "pytorch"}))
    assert [(r.host, r.cells["NODE_RANK"], r.conflicts) for r in view.rows] == [
        ("bert-node-0-0.bert", "0", {}), (None, "1", {}), (None, "2", {})]


def test_a_node_the_frameworks_refuse_keeps_its_row() -> None:
    # TensorFlow needs every node's processes, which mpirun does not state
    view = job_view(Inputs(recorded("ompi-in-salloc/rank0"), {FW: "tensorflow"}))
    assert [r.rank for r in view.rows] == [0, 1, 2]
    assert view.rows[0] == NodeRow(rank=0, host="gpu-a100-09", name="", cells={},
                                   conflicts={}, error=None)


def test_a_large_session_shows_the_first_nodes_this_one_and_the_last() -> None:
    view = job_view(Inputs(session("sub99", size=200), {FW: "pytorch"}))
    ranks = [r.rank for r in view.rows]
    assert ranks == [*range(ROWS - 2), 99, 199]
    assert view.rows[-2].name == "sub99" and view.num_nodes == 200


def test_bad_labels_or_topology_raise() -> None:
    with pytest.raises(TopologyError):
        job_view(Inputs({**session("sub1"), "BACKENDAI_CLUSTER_SIZE": "4"}, {FW: "pytorch"}))


def test_a_cyclic_placement_derives_no_other_nodes_ranks() -> None:
    """srun -m cyclic: rank 1 is on node 1, so ranks are not numbered node by node; the
    table must not print node 0's ranks as 0-1 (they are 0 and 3). Found by the new-user
    trial of issue 14."""
    env = recorded("srun-cyclic/task1")
    view = job_view(Inputs(env, {FW: "pytorch"}), own=derive(env, {FW: "pytorch"}))
    assert [(r.rank, r.cells.get("RANK")) for r in view.rows] == [(0, None), (1, "1"), (2, None)]
    assert view.notes[0] == (
        "this process is rank 1, local rank 0 on node rank 1: the ranks are not numbered node "
        "by node (a cyclic placement), and which ranks run on the other nodes is not stated: "
        "their per-process variables are not derived here")
    block = job_view(Inputs(recorded("srun-block/task1"), {FW: "pytorch"}))
    assert [r.cells["RANK"] for r in block.rows] == ["0-1", "2-3", "4-5"]


def test_a_user_set_nproc_is_the_jobs_choice_not_this_nodes() -> None:
    """PET_NPROC_PER_NODE from the GPU count is this node's own; the user's value wins
    on every node alike, so it is not listed as this node's decision."""
    env = session("sub1", GPU_COUNT="2", PET_NPROC_PER_NODE="4")
    view = job_view(Inputs(env, {FW: "pytorch"}), own=derive(env, {FW: "pytorch"}))
    assert view.node_decided == ()
    env = session("sub1", GPU_COUNT="2")
    view = job_view(Inputs(env, {FW: "pytorch"}), own=derive(env, {FW: "pytorch"}))
    assert view.node_decided == ("PET_NPROC_PER_NODE",)
