"""The torchrun source (sources/managers/torchrun.py) on worker environments recorded from the real
torchrun of torch 2.13 (tests/fixtures/recorded/torchrun-*, tests/e2e/record_torchrun.py),
on malformed and misleading ones, and two properties: every worker of one job agrees, and
arbitrary text gives a Report or a TopologyError, nothing else."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.errors import TopologyError
from derive_env.sources import BY_NAME, seen_sources
from derive_env.sources.managers import torchrun
from derive_env.sources.report import Processes, Report
from support.recorded import FIXTURES, load_fixture


def read(environ: dict[str, str], name: str = "torchrun") -> Report:
    """:func:`torchrun.read` for the table line called ``name``."""
    return torchrun.read(environ, BY_NAME[name])


FIX = ("torchrun sets it for every worker (torch/distributed/elastic/agent/server/"
       "local_elastic_agent.py); something changed it after torchrun started this worker (a "
       "wrapper script, an env file, a value copied from another container): do not set "
       "torchrun's variables yourself")

#: What the recording shows, literally: scenario -> task -> (node it ran on, GROUP_RANK,
#: GROUP_WORLD_SIZE, RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, run id).
EXPECTED = {
    "torchrun-static": {
        "rank0": ("node-a", 0, 2, 0, 0, 4, 2, "127.0.0.1", "none"),
        "rank1": ("node-a", 0, 2, 1, 1, 4, 2, "127.0.0.1", "none"),
        "rank2": ("node-b", 1, 2, 2, 0, 4, 2, "127.0.0.1", "none"),
        "rank3": ("node-b", 1, 2, 3, 1, 4, 2, "127.0.0.1", "none"),
    },
    "torchrun-identical": {
        "rank0": ("node-a", 0, 2, 0, 0, 4, 2, "127.0.0.1", "none"),
        "rank1": ("node-a", 0, 2, 1, 1, 4, 2, "127.0.0.1", "none"),
        "rank2": ("node-b", 1, 2, 2, 0, 4, 2, "127.0.0.1", "none"),
        "rank3": ("node-b", 1, 2, 3, 1, 4, 2, "127.0.0.1", "none"),
    },
    "torchrun-virtual": {  # --virtual-local-rank: LOCAL_RANK=0 everywhere
        "rank0": ("node-a", 0, 2, 0, 0, 4, 2, "127.0.0.1", "none"),
        "rank1": ("node-a", 0, 2, 1, 0, 4, 2, "127.0.0.1", "none"),
        "rank2": ("node-b", 1, 2, 2, 0, 4, 2, "127.0.0.1", "none"),
        "rank3": ("node-b", 1, 2, 3, 0, 4, 2, "127.0.0.1", "none"),
    },
    "torchrun-c10d": {  # host names sorted: node-a before node-b
        "rank0": ("node-a", 0, 2, 0, 0, 4, 2, "node-a", "derive-c10d"),
        "rank1": ("node-a", 0, 2, 1, 1, 4, 2, "node-a", "derive-c10d"),
        "rank2": ("node-b", 1, 2, 2, 0, 4, 2, "node-a", "derive-c10d"),
        "rank3": ("node-b", 1, 2, 3, 1, 4, 2, "node-a", "derive-c10d"),
    },
    "torchrun-c10d-sorted": {  # node-10 sorts before node-9, the endpoint's host
        "rank0": ("node-10", 0, 2, 0, 0, 4, 2, "node-10", "derive-c10d"),
        "rank1": ("node-10", 0, 2, 1, 1, 4, 2, "node-10", "derive-c10d"),
        "rank2": ("node-9", 1, 2, 2, 0, 4, 2, "node-10", "derive-c10d"),
        "rank3": ("node-9", 1, 2, 3, 1, 4, 2, "node-10", "derive-c10d"),
    },
    "torchrun-standalone": {
        "rank0": ("node-a", 0, 1, 0, 0, 2, 2, "node-a", None),
        "rank1": ("node-a", 0, 1, 1, 1, 2, 2, "node-a", None),
    },
}

#: Every variable torchrun set for the recorded workers (the preset), literally.
PRESET = frozenset({
    "GROUP_RANK", "GROUP_WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
    "MASTER_PORT", "OMP_NUM_THREADS", "RANK", "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE",
    "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_SIGNALS_TO_HANDLE", "TORCHELASTIC_USE_AGENT_STORE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING", "WORLD_SIZE",
})


def fixture(scenario: str, task: str) -> tuple[str, dict[str, str]]:
    return load_fixture(FIXTURES / scenario / f"{task}.env")


def test_every_scenario_has_its_expected_tasks() -> None:
    recorded = {d.name: sorted(f.stem for f in d.glob("*.env"))
                for d in FIXTURES.glob("torchrun-*")}
    assert recorded == {name: sorted(tasks) for name, tasks in EXPECTED.items()}


CASES = [(s, t) for s, tasks in EXPECTED.items() for t in tasks]


@pytest.mark.parametrize(("scenario", "task"), CASES)
def test_recorded_worker(scenario: str, task: str) -> None:
    ran_on, env = fixture(scenario, task)
    host, group, groups, rank, local, world, local_world, master, run_id = \
        EXPECTED[scenario][task]
    assert ran_on == host
    # torchrun's own OMP_NUM_THREADS=1 (run.py, more than one worker per node); no PET_*.
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["TORCHELASTIC_USE_AGENT_STORE"] == "True"
    assert not [k for k in env if k.startswith("PET_")]
    assert [s.name for s in seen_sources(env)] == ["torchrun"]
    report = read(env, "torchrun")
    assert report.source == "torchrun"
    assert report.title == "torchrun (torchelastic)"
    assert (report.node_rank, report.num_nodes, report.count()) == (group, groups, groups)
    assert report.processes == Processes(rank, local, world, local_world)
    assert report.nodes == ()
    assert report.master == master
    # MASTER_PORT: --master-port (static) or a free port torchrun chose; the same in every
    # worker of the scenario.
    ports = {int(fixture(scenario, t)[1]["MASTER_PORT"]) for t in EXPECTED[scenario]}
    assert ports == {report.master_port}
    if run_id is not None:  # standalone: a fresh uuid per run
        assert report.session_id == run_id
    assert report.job == ("torchrun", env["TORCHELASTIC_RUN_ID"], str(report.master_port))
    virtual = scenario == "torchrun-virtual"  # torchrun chose each worker's device
    assert report.preset == PRESET | ({"CUDA_VISIBLE_DEVICES"} if virtual else set())
    if virtual:
        assert env["CUDA_VISIBLE_DEVICES"] == str(rank % 2)
    assert report.renumbers is True
    assert report.inputs == {
        "node_rank": ("GROUP_RANK",), "num_nodes": ("GROUP_WORLD_SIZE",),
        "processes": ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"),
        "rank": ("RANK",), "local_rank": ("LOCAL_RANK",), "world_size": ("WORLD_SIZE",),
        "local_world_size": ("LOCAL_WORLD_SIZE",),
        "master": ("MASTER_ADDR",), "master_port": ("MASTER_PORT",),
        "ports": ("TORCHELASTIC_RUN_ID", "MASTER_PORT"),
    }
    assert report.problem is None and report.warnings == ()
    assert f"MASTER_PORT={report.master_port} is torchrun's agent store " \
           "(TORCHELASTIC_USE_AGENT_STORE=True): other frameworks get other ports" \
           in report.notes


def test_recorded_static_group_rank_is_node_rank_flag() -> None:
    # --node-rank=0 on node-a, 1 on node-b: GROUP_RANK follows the flag.
    assert {fixture("torchrun-static", t)[0]: read(fixture("torchrun-static", t)[1]).node_rank
            for t in EXPECTED["torchrun-static"]} == {"node-a": 0, "node-b": 1}


def test_recorded_c10d_group_rank_is_the_sorted_host_names() -> None:
    # torch 2.13 dynamic_rendezvous.py numbers the agents by sorted (host, pid): node-10, the
    # agent started second and not the endpoint's host, is node rank 0 and the master.
    reports = {fixture("torchrun-c10d-sorted", t)[0]: read(fixture("torchrun-c10d-sorted", t)[1])
               for t in ("rank0", "rank2")}
    assert {h: (r.node_rank, r.master) for h, r in reports.items()} == {
        "node-10": (0, "node-10"), "node-9": (1, "node-10")}


def test_kubeflow_lines_not_seen_in_a_worker() -> None:
    # A worker of torchrun inside a PyTorchJob pod has the pod's PET_* too: TORCHELASTIC_RUN_ID
    # keeps the Kubeflow lines out.
    _, env = fixture("torchrun-static", "rank2")
    env.update(PET_NNODES="2", PET_NODE_RANK="1", PET_NPROC_PER_NODE="2")
    assert [s.name for s in seen_sources(env)] == ["torchrun"]


def _with(**changes: str) -> dict[str, str]:
    _, env = fixture("torchrun-static", "rank3")  # node 1 of 2, local 1 of 2, rank 3 of 4
    env.update(changes)
    return env


MALFORMED = [
    ({"RANK": "4"}, "RANK='4': expected a global rank below WORLD_SIZE='4': "),
    ({"RANK": "x"}, "RANK='x': expected an integer >= 0; "),
    ({"RANK": "-1"}, "RANK='-1': expected an integer >= 0; "),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0': expected an integer >= 1; "),
    ({"LOCAL_RANK": "2"}, "LOCAL_RANK='2': expected a local rank below LOCAL_WORLD_SIZE='2': "),
    ({"GROUP_RANK": "2"}, "GROUP_RANK='2': expected a node rank below GROUP_WORLD_SIZE='2': "),
    ({"LOCAL_WORLD_SIZE": "5"}, "LOCAL_WORLD_SIZE='5': expected a local world size at "
     "most WORLD_SIZE='4': "),
    ({"GROUP_WORLD_SIZE": "5", "GROUP_RANK": "1"}, "GROUP_WORLD_SIZE='5': expected at most "
     "WORLD_SIZE='4' (every node runs at least one worker); "),
    # Node 1's workers follow node 0's (at least one rank): rank 1 with local rank 1 is
    # impossible on node 1.
    ({"RANK": "1"}, "RANK='1': expected a rank from 2 to 3: with GROUP_RANK='1' of "
     "GROUP_WORLD_SIZE='2', LOCAL_RANK='1' of LOCAL_WORLD_SIZE='2' and WORLD_SIZE='4', every "
     "other node holding at least one rank (torch/distributed/elastic/agent/server/api.py, "
     "_assign_worker_ranks); "),
    ({"ROLE_RANK": "2"}, "ROLE_RANK='2': expected RANK='3': with one role (ROLE_WORLD_SIZE == "
     "WORLD_SIZE) torchrun numbers roles as it numbers ranks (api.py, _assign_worker_ranks); "),
    ({"ROLE_WORLD_SIZE": "1"}, "ROLE_RANK='3': expected an index below ROLE_WORLD_SIZE='1': "),
    ({"ROLE_WORLD_SIZE": "9"}, "ROLE_WORLD_SIZE='9': expected from LOCAL_WORLD_SIZE='2' to "
     "WORLD_SIZE='4' (this node's workers share one role); "),
    ({"ROLE_RANK": ""}, "ROLE_RANK='': expected set with ROLE_WORLD_SIZE='4' (torchrun sets "
     "both); "),
    ({"MASTER_ADDR": "node_a"}, "MASTER_ADDR='node_a': expected a host name (letters, digits, "
     "'-' and '.') or an IP address; "),
    ({"MASTER_PORT": "70000"}, "MASTER_PORT='70000': expected a port number 1-65535; "),
    ({"TORCHELASTIC_USE_AGENT_STORE": "1"}, "TORCHELASTIC_USE_AGENT_STORE='1': expected True "
     "or False (str() of a bool: local_elastic_agent.py); "),
    ({"TORCH_ELASTIC_WORKER_IDENTICAL": "1", "WORLD_SIZE": "5"}, "WORLD_SIZE='5': expected "
     "GROUP_WORLD_SIZE x LOCAL_WORLD_SIZE = 4 under TORCH_ELASTIC_WORKER_IDENTICAL=1 (api.py, "
     "_assign_worker_ranks); "),
]


@pytest.mark.parametrize(("changes", "message"), MALFORMED)
def test_malformed(changes: dict[str, str], message: str) -> None:
    with pytest.raises(TopologyError) as err:
        read(_with(**changes))
    assert str(err.value) == message + FIX
    assert err.value.exit_code == 3


def test_identical_rank_outside_its_node_block() -> None:
    # Uneven blocks are allowed without TORCH_ELASTIC_WORKER_IDENTICAL ...
    env = _with(RANK="2", LOCAL_RANK="0", ROLE_RANK="2", WORLD_SIZE="5", ROLE_WORLD_SIZE="5",
                GROUP_RANK="1")
    env["LOCAL_WORLD_SIZE"] = "2"
    assert read(env).processes == Processes(2, 0, 5, 2)
    # ... never with it (rank = GROUP_RANK x LOCAL_WORLD_SIZE + local rank): rank 1 is
    # node 0's. (Rank 3 with LOCAL_RANK=0 would be valid: --virtual-local-rank.)
    env.update(TORCH_ELASTIC_WORKER_IDENTICAL="1", WORLD_SIZE="4", ROLE_WORLD_SIZE="4",
               RANK="1", ROLE_RANK="1", LOCAL_RANK="0")
    with pytest.raises(TopologyError) as err:
        read(env)
    assert str(err.value) == ("RANK='1': expected GROUP_RANK x LOCAL_WORLD_SIZE + LOCAL_RANK "
                              "= 2 under TORCH_ELASTIC_WORKER_IDENTICAL=1 (api.py, "
                              "_assign_worker_ranks); " + FIX)


def test_misleading_virtual_local_rank() -> None:
    # --virtual-local-rank: LOCAL_RANK=0 for every worker (_set_local_rank_env); rank 3 on
    # node 1 is still valid.
    report = read(_with(LOCAL_RANK="0", CUDA_VISIBLE_DEVICES="1"))
    assert report.processes == Processes(3, 0, 4, 2)
    assert "CUDA_VISIBLE_DEVICES" in report.preset


def test_misleading_uneven_agents() -> None:
    # Agents may run different --nproc-per-node: node 0 with 3 workers, node 1 with 1.
    env = _with(RANK="3", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", ROLE_RANK="3")
    assert read(env).processes == Processes(3, 0, 4, 1)


def test_no_roles_is_accepted() -> None:
    env = _with()
    for name in ("ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME"):
        del env[name]
    assert read(env).preset == PRESET - {"ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME"}


# -- properties ---------------------------------------------------------------------------


def job_envs(sizes: list[int], order: list[int], identical: bool, virtual: bool,
             port: int) -> list[tuple[int, dict[str, str]]]:
    """(node, environment) of every worker of one job, numbered as _assign_worker_ranks does:
    agents in rendezvous order (``order``: node -> GROUP_RANK; --node-rank under static,
    the sorted host names under c10d), consecutive rank blocks."""
    groups = len(sizes)
    by_group = sorted(range(groups), key=lambda node: order[node])
    world = sum(sizes)
    base, envs = 0, []
    for group, node in enumerate(by_group):
        for local in range(sizes[node]):
            envs.append((node, {
                "TORCHELASTIC_RUN_ID": "job", "RANK": str(base + local),
                "LOCAL_RANK": "0" if virtual else str(local), "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(sizes[node]), "GROUP_RANK": str(group),
                "GROUP_WORLD_SIZE": str(groups), "ROLE_RANK": str(base + local),
                "ROLE_WORLD_SIZE": str(world), "ROLE_NAME": "default",
                "MASTER_ADDR": "node-0", "MASTER_PORT": str(port),
                "TORCHELASTIC_USE_AGENT_STORE": "True",
                **({"TORCH_ELASTIC_WORKER_IDENTICAL": "1"} if identical else {}),
            }))
        base += sizes[node]
    return envs


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=6), seed=st.integers(0, 2**32),
       virtual=st.booleans(), port=st.integers(1, 65535), data=st.data())
def test_every_worker_agrees(sizes: list[int], seed: int, virtual: bool, port: int,
                             data: st.DataObject) -> None:
    order = list(range(len(sizes)))
    random.Random(seed).shuffle(order)
    identical = len(set(sizes)) == 1 and data.draw(st.booleans())
    reports = [(node, read(env)) for node, env in job_envs(sizes, order, identical, virtual,
                                                             port)]
    assert {(r.num_nodes, r.master, r.master_port, r.processes.world_size, r.job)
            for _, r in reports} == {(len(sizes), "node-0", port, sum(sizes),
                                      ("torchrun", "job", str(port)))}
    assert sorted(r.processes.rank for _, r in reports) == list(range(sum(sizes)))
    for node, r in reports:
        assert r.node_rank == order[node]
        assert r.processes.local_world_size == sizes[node]


TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["0", "1", "2", "4", "-1", "01", " 1", "1.0", "True", "False", "99999999999999999999",
     "node-a", "::1", "fe80::1", "127.0.0.1"])
NAMES = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
         "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
         "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE",
         "TORCH_ELASTIC_WORKER_IDENTICAL"]


@settings(max_examples=400, deadline=None)
@given(values=st.fixed_dictionaries({n: TEXT for n in NAMES}))
def test_arbitrary_text_gives_a_report_or_a_topology_error(values: dict[str, str]) -> None:
    try:
        report = read(values)
    except TopologyError as exc:
        assert str(exc).split("=", 1)[0] in NAMES
        return
    assert 0 <= report.processes.rank < report.processes.world_size
    assert 0 <= report.node_rank < report.num_nodes


@pytest.mark.parametrize("master", ["node-a.", "node-a.cluster.local."])
def test_master_addr_with_a_trailing_dot_is_accepted(master: str) -> None:
    """Issue 15, item 7: a fully qualified MASTER_ADDR (torchrun --master-addr node-a.) was
    refused as not a host name."""
    _, env = fixture("torchrun-static", "rank0")
    assert read({**env, "MASTER_ADDR": master}).master == master
