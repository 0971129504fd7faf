"""The mode from the real processes per node (issue 15 item 1; sources/compose.py, "Mode").

Every rank of ``mpirun -np k`` over n nodes, its ranks placed by block, cyclic or packed
(all on the first node), inside a Slurm allocation (the four recorded ways mpirun and
mpiexec run there: tests/sources/test_slurm.py ``mpi_in_allocation``, itself checked
against the recordings) and inside a Backend.AI session (mpirun over SSH between its
containers, each rank seeing its container's ``BACKENDAI_CLUSTER_*``), goes through the
whole pipeline. Each rank must get exactly its launcher's RANK / LOCAL_RANK / WORLD_SIZE /
LOCAL_WORLD_SIZE, never a ``PET_*``, the node it runs on when a NODE_RANK is given, and
every rank the same MASTER_ADDR (rank 0's host) and port. World size equal to the node
count (packed ranks, ``-np n`` cyclic) must change nothing: the old rule decided by it.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from derive_env.pipeline import derive
from support.slurm import mpi_in_allocation

LABELS = {"ai.backend.distributed.frameworks": "pytorch,jax"}
SLURM_KINDS = ["ompi-in-salloc", "ompi-in-sbatch", "mpich-in-salloc", "mpich-in-sbatch"]


def mpi_vars(kind: str, rank: int, local: int, world: int, local_world: int) -> dict[str, str]:
    """The launcher's own variables of one rank (Open MPI's or Hydra's)."""
    if kind.startswith("ompi"):
        return {"OMPI_COMM_WORLD_SIZE": str(world), "OMPI_COMM_WORLD_RANK": str(rank),
                "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
                "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_world)}
    return {"PMI_SIZE": str(world), "PMI_RANK": str(rank), "MPI_LOCALRANKID": str(local),
            "MPI_LOCALNRANKS": str(local_world)}


def placed(nodes: list[int]) -> list[tuple[int, int, int]]:
    """``(node, local rank, local world size)`` of every rank, from each rank's node."""
    return [(node, nodes[:rank].count(node), nodes.count(node))
            for rank, node in enumerate(nodes)]


def slurm_ranks(hosts: list[str], nodes: list[int], kind: str) -> list[dict[str, str]]:
    """Every rank's environment: its node's Slurm variables (the recordings' model) plus
    the launcher's."""
    per_host = [env for _, env in mpi_in_allocation(hosts, [1] * len(hosts), kind)]
    return [{**per_host[node], **mpi_vars(kind, rank, local, len(nodes), count)}
            for rank, (node, local, count) in enumerate(placed(nodes))]


def backendai_ranks(backendai_env, hosts: list[str], order: list[str], nodes: list[int],
                    kind: str) -> list[dict[str, str]]:
    """Every rank's environment in a Backend.AI session whose HOSTS lists ``order``
    (``backendai_env``: the fixture's builder)."""
    return [{**backendai_env(order, hosts[node]),
             **mpi_vars(kind, rank, local, len(nodes), count)}
            for rank, (node, local, count) in enumerate(placed(nodes))]


def check_ranks(envs: list[dict[str, str]], hosts: list[str], nodes: list[int]) -> None:
    """The exact values of every rank (module docstring)."""
    world = len(nodes)
    masters, ports = set(), set()
    for rank, (env, (node, local, count)) in enumerate(zip(envs, placed(nodes), strict=True)):
        derivation = derive(env, LABELS, None)
        assert derivation is not None
        got = {v.name: v.value for v in derivation.variables}
        assert [n for n in got if n.startswith("PET_")] == [], rank
        assert (got["RANK"], got["LOCAL_RANK"], got["WORLD_SIZE"], got["LOCAL_WORLD_SIZE"]) == (
            str(rank), str(local), str(world), str(count)), rank
        assert (got["JAX_PROCESS_ID"], got["JAX_NUM_PROCESSES"]) == (str(rank), str(world))
        if "NODE_RANK" in got:
            assert got["NODE_RANK"] == str(node)
        masters.add(got["MASTER_ADDR"])
        ports.add(got["MASTER_PORT"])
    assert masters == {hosts[nodes[0]] if len(hosts) > 1 else "127.0.0.1"}
    assert len(ports) == 1


@st.composite
def packings(draw) -> tuple[int, list[int]]:
    """``(node count, each rank's node)``: block (s slots per node), cyclic (--map-by
    node), packed (all on the first node) or any counts per node in block order (a
    hostfile's; some nodes left empty); rank 0 always on the first node."""
    n = draw(st.integers(1, 5))
    k = draw(st.integers(1, 12))
    how = draw(st.sampled_from(["block", "cyclic", "packed", "counts"]))
    if how == "block":
        slots = draw(st.integers(-(-k // n), k))
        return n, [r // slots for r in range(k)]
    if how == "cyclic":
        return n, [r % n for r in range(k)]
    if how == "packed":
        return n, [0] * k
    counts = [draw(st.integers(1, 4)),
              *draw(st.lists(st.integers(0, 4), min_size=n - 1, max_size=n - 1))]
    return n, [node for node, c in enumerate(counts) for _ in range(c)]


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(packings(), st.integers(1, 9), st.sampled_from(SLURM_KINDS))
def test_every_rank_of_mpirun_in_a_slurm_allocation_gets_its_own_ranks(
        packing, first, kind) -> None:
    n, nodes = packing
    hosts = [f"node-{first + i:03d}" for i in range(n)]
    check_ranks(slurm_ranks(hosts, nodes, kind), hosts, nodes)


@SETTINGS
@given(packings(), st.randoms(use_true_random=False), st.sampled_from(["ompi", "mpich"]))
def test_every_rank_of_mpirun_in_a_backendai_session_gets_its_own_ranks(
        backendai_env, packing, random, kind) -> None:
    n, nodes = packing
    hosts = ["main1", *(f"sub{i}" for i in range(1, n))]  # canonical order
    order = random.sample(hosts, n)  # HOSTS in any order
    check_ranks(backendai_ranks(backendai_env, hosts, order, nodes, kind), hosts, nodes)


# --- the cases of the issue, with their exact values ------------------------------------------


def pytorch_of(env: dict[str, str]) -> dict[str, str]:
    derivation = derive(env, {"ai.backend.distributed.frameworks": "pytorch"}, None)
    assert derivation is not None
    return {v.name: v.value for v in derivation.variables if v.framework != "derive-env"}


@pytest.mark.parametrize("kind", SLURM_KINDS)
def test_mpirun_np_2_packed_on_the_first_of_2_slurm_nodes(kind: str) -> None:
    """glotzerlab/hoomd-blue#1647: rank 1 got PET_* and no RANK; rank 0 matched the orted
    step's task 0 of 2 and was stopped (Lightning-AI/pytorch-lightning#11406)."""
    envs = slurm_ranks(["gpu-a100-09", "gpu-a100-10"], [0, 0], kind)
    for rank, env in enumerate(envs):
        assert pytorch_of(env) == {
            "MASTER_ADDR": "gpu-a100-09", "MASTER_PORT": "61337", "RANK": str(rank),
            "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
            "NODE_RANK": "0"}


@pytest.mark.parametrize("kind", ["ompi", "mpich"])
def test_mpirun_on_main1_of_a_2_container_backendai_session(backendai_env, kind: str) -> None:
    """``mpirun -H main1:2`` (horovod/horovod#3949): rank 1 got PET_*."""
    envs = backendai_ranks(backendai_env, ["main1", "sub1"], ["sub1", "main1"], [0, 0], kind)
    for rank, env in enumerate(envs):
        assert pytorch_of(env) == {
            "MASTER_ADDR": "main1", "MASTER_PORT": "29500", "RANK": str(rank),
            "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
            "NODE_RANK": "0"}


@pytest.mark.parametrize("kind", ["ompi", "mpich"])
def test_one_rank_per_node_is_still_one_worker_per_process(backendai_env, kind: str) -> None:
    """``mpirun -np 2 --map-by node`` over 2 containers: world size = node count, yet each
    rank is a worker (no PET_*: a torchrun inside would read them as its own job)."""
    envs = backendai_ranks(backendai_env, ["main1", "sub1"], ["main1", "sub1"], [0, 1], kind)
    assert pytorch_of(envs[1]) == {
        "MASTER_ADDR": "main1", "MASTER_PORT": "29500", "RANK": "1", "LOCAL_RANK": "0",
        "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "NODE_RANK": "1"}
