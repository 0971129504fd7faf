"""The Ray Train source (sources/managers/ray_train.py): a worker Ray Train set up, passed through.

Fixtures:

- RECORDED: tests/fixtures/ray-train/worker-<RANK>.env, the environment of the two workers of
  a real ``TorchTrainer`` (ray 2.60.0, one machine; that folder's README.md and record.py).
- TYPED, for workers on several nodes (no Ray cluster here), from ray 2.60.0
  ``python/ray/train/torch/config.py`` (``_TorchBackend.on_start``: ``MASTER_ADDR`` and
  ``MASTER_PORT`` = worker 0's ``get_address_and_port``; ``_set_torch_distributed_env_vars``:
  ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``NODE_RANK``, ``RANK``, ``WORLD_SIZE``,
  ``ACCELERATE_TORCH_DEVICE``) and ``python/ray/train/v2/_internal/execution/worker_group/
  worker_group.py`` (``_assign_worker_ranks``: workers grouped by node in order, node rank =
  the node's place among them, local rank = the place among its node's workers), with the
  raylet's ``RAY_RAYLET_PID`` and ``RAY_JOB_ID`` as recorded.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.cli.envfile import parse_env_file
from derive_env.digest import digest_of, facts_of
from derive_env.errors import TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.sources import BY_NAME, seen_sources
from derive_env.sources.managers import ray_train
from derive_env.sources.report import Processes, Report
from helpers import framework_changes

RECORDED = Path(__file__).parents[1] / "fixtures/ray-train"
FIX = ray_train.FIX
BOTH = {PREFIX + "frameworks": "pytorch,jax"}


def recorded(rank: int) -> dict[str, str]:
    path = RECORDED / f"worker-{rank}.env"
    return parse_env_file(path.read_text(encoding="utf-8"), str(path))


def workers(per_node: list[int], gpu: bool = True, port: int = 41637) -> list[dict[str, str]]:
    """Every worker of a job with ``per_node[k]`` workers on node k (``_assign_worker_ranks``:
    grouped by node in order; worker 0's node IP and a free port there as the master)."""
    out, rank = [], 0
    for node, count in enumerate(per_node):
        for local in range(count):
            out.append({
                "RAY_RAYLET_PID": str(3100 + node), "RAY_JOB_ID": "02000000",
                "ACCELERATE_TORCH_DEVICE": f"cuda:{local}" if gpu else "cpu",
                "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(count),
                "NODE_RANK": str(node), "RANK": str(rank), "WORLD_SIZE": str(sum(per_node)),
                "MASTER_ADDR": "10.0.4.11", "MASTER_PORT": str(port),
                "OMP_NUM_THREADS": "1"})
            rank += 1
    return out


def read(environ: dict[str, str]) -> Report:
    return ray_train.read(environ, BY_NAME["ray-train"])


def test_a_recorded_worker_exactly() -> None:
    env = recorded(1)
    assert [line.name for line in seen_sources(env)] == ["ray-train"]
    port = int(env["MASTER_PORT"])
    assert read(env) == Report(
        source="ray-train", title="a Ray Train worker", node_rank=0, num_nodes=1,
        processes=Processes(1, 1, 2, 2), master="192.0.2.2", master_port=port,
        job=("ray-train", "01000000", str(port)), session_id="01000000",
        preset=frozenset(ray_train.WORKER_VARIABLES), renumbers=True,
        inputs={"node_rank": ("NODE_RANK",), "num_nodes": ("WORLD_SIZE", "LOCAL_WORLD_SIZE"),
                "processes": ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"),
                "rank": ("RANK",), "local_rank": ("LOCAL_RANK",),
                "world_size": ("WORLD_SIZE",), "local_world_size": ("LOCAL_WORLD_SIZE",),
                "master": ("MASTER_ADDR",), "master_port": ("MASTER_PORT",),
                "ports": ("RAY_JOB_ID", "MASTER_PORT")},
        order="Ray Train's worker order (NODE_RANK: nodes as its workers are sorted)",
        notes=("Ray Train set RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, "
               "MASTER_ADDR and MASTER_PORT in this worker (ray/train/torch/config.py): kept "
               "as they are; worker 1 on node 0, 2 worker(s), all on this node: one node",))


@pytest.mark.parametrize("rank", [0, 1])
def test_the_recorded_workers_values_are_passed_through_untouched(rank: int) -> None:
    """Nothing Ray set is exported again or changed; JAX follows Ray's ranks."""
    env = recorded(rank)
    derivation = derive(env, BOTH)
    assert derivation is not None
    changes = framework_changes(derivation)
    assert not set(ray_train.WORKER_VARIABLES) & set(changes)
    assert changes == {"JAX_COORDINATOR_ADDRESS": changes["JAX_COORDINATOR_ADDRESS"],
                       "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": str(rank)}
    assert changes["JAX_COORDINATOR_ADDRESS"].startswith("192.0.2.2:")
    kept = {v.name: v for v in derivation.variables if v.name in env}
    assert {name: v.value for name, v in kept.items()} == {
        name: env[name] for name in kept}


def test_workers_on_three_nodes() -> None:
    """Node count not stated by Ray: a job of more than one node, of unknown size; JAX and
    PyTorch derive from Ray's values, TF_CONFIG is refused (no host list)."""
    env = workers([2, 2, 1])[3]
    report = read(env)
    assert (report.node_rank, report.num_nodes, report.processes) == (
        1, None, Processes(3, 1, 5, 2))
    assert report.notes[0].endswith("worker 3 on node 1, 5 workers, 2 on this node: the node "
                                    "count is not stated")
    derivation = derive(env, BOTH)
    assert derivation is not None
    assert derivation.topology.multi_node
    assert framework_changes(derivation) == {"JAX_COORDINATOR_ADDRESS": "10.0.4.11:64607",
                                    "JAX_NUM_PROCESSES": "5", "JAX_PROCESS_ID": "3"}
    with pytest.raises(TopologyError) as caught:
        derive(env, {PREFIX + "frameworks": "tensorflow"})
    assert str(caught.value).startswith("TF_CONFIG cannot be built")


def test_without_the_raylets_marker_it_is_refused_as_a_partial_set() -> None:
    env = dict(workers([2, 2])[3])
    del env["RAY_RAYLET_PID"]
    assert seen_sources(env) == []
    with pytest.raises(TopologyError) as caught:
        derive(env, BOTH)
    assert str(caught.value).startswith(
        "WORLD_SIZE='4': expected 1 or unset: a Ray Train worker states a job of more than one "
        "process, but only part of its variables are set (not set: RAY_RAYLET_PID)")


@pytest.mark.parametrize(("change", "message"), [
    ({"MASTER_ADDR": ""},
     "MASTER_ADDR='': expected the master Ray Train sets with TorchConfig(init_method=\"env\"), "
     "the default (_TorchBackend.on_start); with init_method=\"tcp\" Ray sets none: use "
     "init_method=\"env\" for the workers that run derive-env"),
    ({"MASTER_PORT": "70000"},
     f"MASTER_PORT='70000': expected a port number 1-65535; {FIX}"),
    ({"LOCAL_WORLD_SIZE": ""}, f"LOCAL_WORLD_SIZE='': expected set: {FIX}"),
    ({"RANK": "4"},
     f"RANK='4': expected a global rank below WORLD_SIZE='4': {FIX}"),
    ({"LOCAL_RANK": "2"},
     f"LOCAL_RANK='2': expected a local rank below LOCAL_WORLD_SIZE='2': {FIX}"),
    ({"LOCAL_WORLD_SIZE": "5"},
     f"LOCAL_WORLD_SIZE='5': expected a local world size at most WORLD_SIZE='4': {FIX}"),
    ({"NODE_RANK": "3"},
     "NODE_RANK='3': expected at most RANK - LOCAL_RANK = 2 (Ray groups each node's workers "
     f"after the earlier nodes', each of at least one worker: _assign_worker_ranks); {FIX}"),
    ({"LOCAL_WORLD_SIZE": "4", "LOCAL_RANK": "1"},
     "NODE_RANK='1': expected at most RANK - LOCAL_RANK = 1 (Ray groups each node's workers "
     "after the earlier nodes', each of at least one worker: _assign_worker_ranks), and 0 "
     f"when every worker is on this node; {FIX}"),
    ({"RANK": "x"}, "RANK='x': expected an integer >= 0 (the global rank)"),
])
def test_bad_values_are_refused_naming_them(change: dict[str, str], message: str) -> None:
    env = {**workers([2, 2])[2], **change}  # rank 2: node 1, local rank 0
    with pytest.raises(TopologyError) as caught:
        read(env)
    assert str(caught.value) == message


# -- properties ---------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(per_node=st.lists(st.integers(1, 4), min_size=1, max_size=6), gpu=st.booleans(),
       port=st.integers(1024, 65535))
def test_every_worker_of_a_job_derives_one_job(per_node: list[int], gpu: bool,
                                               port: int) -> None:
    """Same master and ports, node ranks as Ray gave them, one digest for every worker; a
    job on more than one node never derives one node."""
    derivations = [derive(env, BOTH) for env in workers(per_node, gpu, port)]
    assert all(d is not None for d in derivations)
    changes = [d.changes() for d in derivations]
    values = [{v.name: v.value for v in d.variables} for d in derivations]
    assert {(v["MASTER_ADDR"], v["MASTER_PORT"]) for v in values} == {("10.0.4.11", str(port))}
    assert len({c["JAX_COORDINATOR_ADDRESS"] for c in changes}) == 1
    assert [int(c["JAX_PROCESS_ID"]) for c in changes] == list(range(sum(per_node)))
    expected = [node for node, count in enumerate(per_node) for _ in range(count)]
    assert [d.topology.node_rank for d in derivations] == expected
    assert {d.topology.multi_node for d in derivations} == {len(per_node) > 1}
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1


TEXT = st.text(st.characters(codec="utf-8"), max_size=10) | st.sampled_from(
    ["0", "1", "2", "3", "-1", "01", "10.0.0.1", "cuda:0", "65536", ""])
NAMES = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
         "MASTER_PORT"]


@settings(max_examples=300, deadline=None)
@given(values=st.fixed_dictionaries({n: TEXT for n in NAMES}))
def test_arbitrary_text_gives_a_report_or_a_topology_error(values: dict[str, str]) -> None:
    env = {**workers([1])[0], **values}
    try:
        report = read(env)
    except TopologyError as exc:
        assert str(exc).split("=", 1)[0] in NAMES
        return
    assert report.processes is not None
    assert 0 <= report.processes.rank < report.processes.world_size
