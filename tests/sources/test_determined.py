"""The Determined source (sources/managers/determined.py): a trial container's rendezvous file.

No Determined cluster runs here: each container's variables and file are TYPED from
determined-ai/determined@c1e9c6d, as it writes them:

- ``DET_MASTER``, ``DET_ALLOCATION_ID``, ``DET_TASK_TYPE``, ``DET_RESOURCES_TYPE``: the
  master's ``master/pkg/tasks/task.go`` (``TaskSpec.EnvVars``), ``task_trial.go``
  (``DET_TASK_TYPE=TRIAL``, ``C10D_PORT`` from ``UniqueExposedPortRequests``, one port per
  allocation from 29400: ``allocation.go``), ``rm/agentrm/resources.go`` (``Start``:
  ``DET_RESOURCES_TYPE=docker-container``), ``rm/kubernetesrm/resource_pool.go``
  (``k8s-job``); ``DET_SLOT_IDS``: ``agent/internal/containers/spec.go`` (``containerEnv``:
  ``[0,1]``) and ``rm/kubernetesrm/spec.go``.
- ``rendezvous.json``: ``harness/determined/_info.py`` (``RendezvousInfo._to_file``:
  ``json.dump(vars(self))``), from ``harness/determined/exec/prep_container.py``
  (``do_rendezvous_kubernetes``, ``do_rendezvous_slurm``: rank order;
  ``do_rendezvous_rm_provided``: the master's order, ``master/internal/task/rendezvous.go``
  ``info``: rank 0 first, then by resource id).
- The torchrun workers of Determined's launcher: ``harness/determined/launch/
  torch_distributed.py`` (``main``: ``torch.distributed.run --nnodes --nproc_per_node
  --node_rank --master_addr --master_port``, ``DET_CHIEF_IP``), torchrun's own variables
  as tests/sources/test_torchrun.py types them.

The real harness (``pip install --no-deps determined``, test-only, marked frameworks) runs
its own launcher on the same files: the torchrun command it builds is what derive-env
derives.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.digest import digest_of, facts_of
from derive_env.errors import TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.sources import BY_NAME, DETERMINED_RENDEZVOUS, seen_sources
from derive_env.sources.managers import determined
from derive_env.sources.report import Report
from derive_env.topology import Node
from helpers import require

FIX = determined._FIX
TYPED = Path(__file__).parents[1] / "fixtures/typed"
K8S = (TYPED / "determined-k8s/rendezvous.json").read_text(encoding="utf-8")
AGENTS = (TYPED / "determined-agents/rendezvous.json").read_text(encoding="utf-8")
PYTORCH = {PREFIX + "frameworks": "pytorch"}


def container(kind: str = "k8s-job", slots: int = 4, port: str | None = "29401",
              task: str = "TRIAL") -> dict[str, str]:
    """One trial container's variables (module docstring: task.go, task_trial.go ...)."""
    env = {"DET_MASTER": "http://determined-master.det:8080", "DET_CLUSTER_ID": "c0ffee",
           "DET_AGENT_ID": "node-1", "DET_SLOT_IDS": json.dumps(list(range(slots)),
                                                                separators=(",", ":")),
           "DET_TASK_ID": "3.7e1b", "DET_ALLOCATION_ID": "3.7e1b.1",
           "DET_SESSION_TOKEN": "t", "DET_TASK_TYPE": task, "DET_RESOURCES_TYPE": kind,
           "DET_RESOURCES_ID": "r1", "DET_CONTAINER_ID": "r1", "DET_TRIAL_ID": "3",
           "DET_EXPERIMENT_ID": "2"}
    if port is not None:
        env["C10D_PORT"] = port
    return env


def rendezvous(addrs: list[str], rank: int, slots: list[int]) -> str:
    """``RendezvousInfo._to_file``'s text: ``json.dump(vars(self))``."""
    return json.dumps({"container_addrs": addrs, "container_rank": rank,
                       "container_slot_counts": slots})


def files(text: str | None):
    """The edge's reader with the rendezvous file at its default path."""
    return lambda paths: {path: text if path == DETERMINED_RENDEZVOUS else None
                          for path in paths}


def read(environ: dict[str, str], text: str | None) -> Report:
    return determined.read(environ, BY_NAME["determined"], {DETERMINED_RENDEZVOUS: text})


def test_a_kubernetes_trial_container_exactly() -> None:
    env = container()
    assert [line.name for line in seen_sources(env)] == ["determined"]
    assert determined.files_needed(env, "determined") == (DETERMINED_RENDEZVOUS,)
    path = DETERMINED_RENDEZVOUS
    assert read(env, K8S) == Report(
        source="determined", title="a Determined trial",
        nodes=(Node("10.244.1.7"), Node("10.244.2.5"), Node("10.244.3.9")), node_rank=1,
        num_nodes=3, master_port=29401, gpus=4, session_id="3.7e1b.1",
        job=("determined", "3.7e1b.1", "10.244.1.7"),
        inputs={"node_rank": (path,), "num_nodes": (path,), "master": (path,),
                "ports": ("DET_ALLOCATION_ID", path), "gpus": ("DET_SLOT_IDS",),
                "master_port": ("C10D_PORT",), "nodes": (path,)},
        order="container_addrs (node rank r = container rank r)",
        notes=("container 1 of 3 (container_rank, container_addrs); master = the first of "
               "container_addrs; torchrun gets what Determined's launcher gives it (--nnodes 3 "
               "--node_rank 1, launch/torch_distributed.py)",))


def test_what_torchrun_is_given_is_what_determineds_launcher_gives_it() -> None:
    """launch/torch_distributed.py: --nnodes len(container_addrs), --nproc_per_node
    len(DET_SLOT_IDS), --node_rank container_rank, --master_addr container_addrs[0],
    --master_port $C10D_PORT."""
    derivation = derive(container(), PYTORCH, files=files(K8S))
    assert derivation is not None
    changes = derivation.changes()
    assert {k: changes[k] for k in ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK",
                                    "PET_MASTER_ADDR", "PET_MASTER_PORT", "MASTER_ADDR",
                                    "NODE_RANK")} == {
        "PET_NNODES": "3", "PET_NPROC_PER_NODE": "4", "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": "10.244.1.7", "PET_MASTER_PORT": "29401",
        "MASTER_ADDR": "10.244.1.7", "NODE_RANK": "1"}


def test_the_agents_order_gives_no_host_list_beyond_the_master() -> None:
    """Three containers on agents: rank 1 is listed third (rendezvous.go, info): the count,
    this rank and the master only; TF_CONFIG is refused with the reason."""
    env = container("docker-container")
    report = read(env, AGENTS)
    assert (report.nodes, report.node_rank, report.num_nodes, report.master) == (
        (), 1, 3, "192.168.10.21")
    assert report.notes[1] == (
        "DET_RESOURCES_TYPE=docker-container: the agents' rendezvous lists rank 0 first, then "
        "the others by resource id, not by rank (master/internal/task/rendezvous.go): no host "
        "list beyond the master")
    derivation = derive(env, {PREFIX + "frameworks": "pytorch,jax"}, files=files(AGENTS))
    assert derivation is not None
    changes = derivation.changes()
    assert (changes["PET_NNODES"], changes["PET_NODE_RANK"], changes["MASTER_ADDR"],
            changes["JAX_PROCESS_ID"]) == ("3", "1", "192.168.10.21", "1")
    with pytest.raises(TopologyError) as caught:
        derive(env, {PREFIX + "frameworks": "tensorflow"}, files=files(AGENTS))
    assert str(caught.value).startswith(
        "TF_CONFIG cannot be built: it lists every task's host:port, and no source states the "
        "hosts of every node.")


def test_two_containers_on_agents_are_in_rank_order() -> None:
    """Rank 0 first, and the one other: a host list (rendezvous.go sorts rank 0 first)."""
    report = read(container("docker-container"),
                  rendezvous(["192.168.10.21", "192.168.10.23"], 1, [4, 4]))
    assert (report.nodes, report.node_rank, report.master) == (
        (Node("192.168.10.21"), Node("192.168.10.23")), 1, None)


def test_a_trial_of_one_container_is_a_single_container() -> None:
    """Determined's launcher gives torchrun --master_addr localhost; derive-env loopback."""
    derivation = derive(container(slots=2), PYTORCH,
                        files=files(rendezvous(["10.244.1.7"], 0, [2])))
    assert derivation is not None
    assert (derivation.topology.num_nodes, derivation.topology.multi_node) == (1, False)
    assert derivation.changes()["MASTER_ADDR"] == "127.0.0.1"


@pytest.mark.parametrize("task", ["COMMAND", "NOTEBOOK", "SHELL", "TENSORBOARD"])
def test_other_tasks_are_one_container_without_a_file(task: str) -> None:
    """ClusterInfo.container_addrs: ["127.0.0.1"] for every task but a trial."""
    env = container(task=task, port=None)
    assert determined.files_needed(env, "determined") == ()
    derivation = derive(env, PYTORCH, files=files(None))
    assert derivation is not None
    assert (derivation.topology.num_nodes, derivation.topology.node_rank) == (1, 0)
    assert derivation.topology.notes == (
        f"DET_TASK_TYPE={task}: one container (only trials rendezvous across containers: "
        "ClusterInfo.container_addrs, harness/determined/_info.py)",)


def test_the_path_can_be_chosen() -> None:
    env = {**container(), determined.PATH_VARIABLE: "/tmp/r.json"}
    assert determined.files_needed(env, "determined") == ("/tmp/r.json",)
    report = determined.read(env, BY_NAME["determined"], {"/tmp/r.json": K8S})
    assert report.inputs["nodes"] == ("/tmp/r.json",)


P = DETERMINED_RENDEZVOUS


@pytest.mark.parametrize(("env", "text", "message"), [
    (container(), None,
     f"{P}: expected Determined's rendezvous file (container_addrs, container_rank, "
     "container_slot_counts), readable JSON: it cannot be read, so the trial's containers "
     f"are unknown (another path: DERIVE_ENV_DETERMINED_RENDEZVOUS); {FIX}; for a trial of "
     "one container, choose --source none (or DERIVE_ENV_SOURCE=none)"),
    (container(), '{"container_addrs": ["a"], "container_rank": 0}',
     f"{P}: expected a JSON object of exactly container_addrs, container_rank, "
     "container_slot_counts (Determined's RendezvousInfo, harness/determined/_info.py), got "
     f"'{{\"container_addrs\": [\"a\"], \"container_rank\": 0}}'; {FIX}"),
    (container(), rendezvous(["10.0.0.1", "10.0.0.2"], 2, [4, 4]),
     f"{P}: expected container_rank, an integer from 0 to 1 (one per container_addrs "
     f"entry), got 2; {FIX}"),
    (container(), rendezvous(["10.0.0.1", "10.0.0.2"], True, [4, 4]),
     f"{P}: expected container_rank, an integer from 0 to 1 (one per container_addrs "
     f"entry), got true; {FIX}"),
    (container(), rendezvous(["10.0.0.1", "10.0.0.2"], 1, [float("nan"), 1]),
     f"{P}: expected container_slot_counts, one slot count per container_addrs entry (2), "
     f"got [NaN, 1]; {FIX}"),
    (container(), rendezvous(["10.0.0.1", "10.0.0.2"], 1, [4]),
     f"{P}: expected container_slot_counts, one slot count per container_addrs entry (2), "
     f"got [4]; {FIX}"),
    (container(), rendezvous(["10.0.0.1", "10.0.0.1"], 1, [4, 4]),
     f"{P}: expected distinct container_addrs: '10.0.0.1' is listed twice; {FIX}"),
    (container(), rendezvous(["10.0.0.1", "10.0.0.2:29400"], 1, [4, 4]),
     f"{P}: expected an address per container in container_addrs: entry 2 "
     "('10.0.0.2:29400'): a host name or an IP address (IPv6 without brackets, no port); "
     + FIX),
    (container(), rendezvous([], 0, []),
     f"{P}: expected container_addrs, a list of addresses, got []; {FIX}"),
    (container(slots=2), rendezvous(["10.0.0.1", "10.0.0.2"], 1, [4, 4]),
     f"DET_SLOT_IDS='[0,1]': expected 4 slot id(s), this container's entry (container_rank "
     f"1) of container_slot_counts [4, 4] in {P}: a file of another allocation?; {FIX}"),
    ({**container(), "DET_SLOT_IDS": "0,1"}, K8S,
     "DET_SLOT_IDS='0,1': expected a JSON list of this container's slot ids, such as [0,1] "
     "(Determined's agent sets it: agent/internal/containers/spec.go, containerEnv)"),
    (container(port="0"), K8S,
     "C10D_PORT='0': expected a port number 1-65535 (the master gives each trial's allocation one: "
     "master/pkg/tasks/task_trial.go)"),
])
def test_bad_input_is_refused_naming_it(env: dict[str, str], text: str | None,
                                        message: str) -> None:
    with pytest.raises(TopologyError) as caught:
        read(env, text)
    assert str(caught.value) == message


def test_inside_the_workers_of_determineds_launcher_nothing_is_rewritten() -> None:
    """torchrun (started by launch/torch_distributed.py) set the workers' variables: its
    source gives both layers; every torch variable is kept, none exported over it."""
    env = {**container(), "USE_TORCH_DISTRIBUTED": "True", "DET_CHIEF_IP": "10.244.1.7",
           "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0",
           "TORCHELASTIC_MAX_RESTARTS": "0", "RANK": "6", "LOCAL_RANK": "2",
           "WORLD_SIZE": "12", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1",
           "GROUP_WORLD_SIZE": "3", "ROLE_RANK": "6", "ROLE_WORLD_SIZE": "12",
           "ROLE_NAME": "default", "MASTER_ADDR": "10.244.1.7", "MASTER_PORT": "29401"}
    assert [line.name for line in seen_sources(env)] == ["torchrun", "determined"]
    derivation = derive(env, {PREFIX + "frameworks": "pytorch,jax"}, files=files(K8S))
    assert derivation is not None
    topology = derivation.topology
    assert (topology.num_nodes, topology.node_rank, topology.master_addr) == (
        3, 1, "10.244.1.7")
    assert {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"} <= \
        topology.preset
    changes = derivation.changes()
    assert not topology.preset & set(changes)  # torchrun's own: none rewritten
    assert (changes["NODE_RANK"], changes["JAX_PROCESS_ID"]) == ("1", "6")  # added


# -- the real harness -------------------------------------------------------------------

@pytest.mark.frameworks
@pytest.mark.parametrize(("kind", "text", "slots"), [
    ("k8s-job", K8S, 4), ("docker-container", AGENTS, 4),
    ("k8s-job", rendezvous(["10.244.1.7"], 0, [2]), 2),
    ("slurm-job", rendezvous(["172.16.0.1", "172.16.0.2"], 0, [8, 8]), 8),
], ids=["k8s", "agents", "one", "slurm"])
def test_determineds_own_launcher_builds_the_torchrun_derive_env_derives(
        kind: str, text: str, slots: int, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Determined's RendezvousInfo reads the fixture file, its ClusterInfo holds it, and its
    launcher's main() builds the torchrun command (subprocess.Popen captured): --nnodes,
    --nproc_per_node, --node_rank, --master_addr and --master_port are derive-env's PET_*."""
    try:
        import importlib

        import determined as det
        from determined.launch import torch_distributed
    except ImportError:
        require(False, "determined is not installed (make venv installs it, --no-deps)")
    path = tmp_path / "rendezvous.json"
    path.write_text(text, encoding="utf-8")
    env = container(kind, slots=slots)
    monkeypatch.setattr(os, "environ", {**os.environ, **env})  # the launcher writes it
    torch_distributed = importlib.reload(torch_distributed)  # C10D_PORT, read on import
    info = det.ClusterInfo(
        master_url=env["DET_MASTER"], cluster_id=env["DET_CLUSTER_ID"],
        agent_id=env["DET_AGENT_ID"], slot_ids=json.loads(env["DET_SLOT_IDS"]),
        task_id=env["DET_TASK_ID"], allocation_id=env["DET_ALLOCATION_ID"],
        session_token=env["DET_SESSION_TOKEN"], task_type=env["DET_TASK_TYPE"],
        rendezvous_info=det.RendezvousInfo._from_file(str(path)))
    launched: list[list[str]] = []

    class Process:
        pid = 0

        def __init__(self, cmd: list[str]) -> None:
            launched.append(cmd)

        def wait(self) -> int:
            return 0

        def send_signal(self, signum: int) -> None:
            pass

    monkeypatch.setattr(det, "get_cluster_info", lambda: info)
    monkeypatch.setattr(torch_distributed.subprocess, "Popen", Process)
    assert torch_distributed.main([], ["python3", "train.py"]) == 0
    cmd = launched[0]
    run = cmd[cmd.index("torch.distributed.run") + 1:]
    given_torchrun = {run[i]: run[i + 1] for i in range(0, 12, 2)}
    derivation = derive({**env, determined.PATH_VARIABLE: str(path)}, PYTORCH,
                        files=lambda paths: {p: Path(p).read_text() for p in paths})
    assert derivation is not None
    ours = derivation.changes()
    master = "localhost" if ours["PET_MASTER_ADDR"] == "127.0.0.1" else ours[
        "PET_MASTER_ADDR"]
    assert given_torchrun == {
        "--nnodes": ours["PET_NNODES"], "--nproc_per_node": ours["PET_NPROC_PER_NODE"],
        "--node_rank": ours["PET_NODE_RANK"], "--max_restarts": "0",
        "--master_addr": master, "--master_port": ours["PET_MASTER_PORT"]}
    assert os.environ["DET_CHIEF_IP"] == json.loads(text)["container_addrs"][0]


# -- properties ---------------------------------------------------------------------------

def _addrs(count: int) -> list[str]:
    return [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(1, count + 1)]


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 16), kind=st.sampled_from(["k8s-job", "slurm-job",
                                                      "docker-container", ""]),
       data=st.data())
def test_every_container_of_a_trial_derives_one_job(count: int, kind: str,
                                                    data: st.DataObject) -> None:
    """Same master, same ports, distinct node ranks 0..n-1, same digest in every container;
    a trial of more than one container is never one node."""
    addrs = data.draw(st.permutations(_addrs(count)))
    # one slot count for all: PET_NPROC_PER_NODE is job-wide (in the digest), so uneven
    # slots give each container its own digest, as for every source
    slots = [data.draw(st.integers(0, 8))] * count
    derivations = []
    for rank in range(count):
        env = container(kind, slots=slots[rank])
        if not kind:
            del env["DET_RESOURCES_TYPE"]
        text = rendezvous(addrs, rank, slots)
        derivations.append(derive(env, {PREFIX + "frameworks": "pytorch,jax"},
                                  files=files(text)))
    assert all(d is not None for d in derivations)
    changes = [d.changes() for d in derivations]
    assert {c["MASTER_ADDR"] for c in changes} == {addrs[0] if count > 1 else "127.0.0.1"}
    assert len({c["MASTER_PORT"] for c in changes}) == 1
    assert [d.topology.node_rank for d in derivations] == list(range(count))
    assert {d.topology.num_nodes for d in derivations} == {count}
    assert all(d.topology.multi_node == (count > 1) for d in derivations)
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1


TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["[0,1]", "[]", "[-1]", "TRIAL", "COMMAND", "k8s-job", "docker-container", "0", "29400",
     "65536", ""])
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2, 5) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4), max_leaves=8)
DOCUMENT = st.one_of(
    st.fixed_dictionaries({"container_addrs": st.lists(
        st.sampled_from(["10.0.0.1", "10.0.0.2", "h-1", "", "a b", "::1"]), max_size=4)
        | JSON, "container_rank": st.integers(-1, 4) | JSON,
        "container_slot_counts": st.lists(st.integers(-1, 8), max_size=4) | JSON}).map(
        json.dumps),
    st.text(max_size=40), st.none())
NAMES = ["DET_SLOT_IDS", "DET_TASK_TYPE", "DET_RESOURCES_TYPE", "C10D_PORT"]


@settings(max_examples=300, deadline=None)
@given(values=st.fixed_dictionaries({n: TEXT for n in NAMES}), text=DOCUMENT)
def test_arbitrary_text_gives_a_report_or_a_topology_error(values: dict[str, str],
                                                           text: str | None) -> None:
    env = {**container(), **values, "DET_SLOT_IDS": values["DET_SLOT_IDS"] or "[]"}
    try:
        report = read(env, text)
    except TopologyError:
        return
    count = report.count()
    assert count is not None and 0 <= report.node_rank < count
    assert not report.nodes or len(report.nodes) == count


# -- a slot count of 0 beside others: every container stops alike ----------------------------

RDV = '{"container_addrs":["192.168.10.21","192.168.10.23"],"container_rank":%d,' \
      '"container_slot_counts":[0,2]}'


@pytest.mark.parametrize(("rank", "slot_ids"), [(0, ""), (0, "[]"), (1, "[0,1]"), (1, "")])
def test_a_zero_slot_count_stops_every_container(tmp_path: Path, rank: int,
                                                 slot_ids: str) -> None:
    """container_slot_counts [0,2]: each container refuses (exit 3), the one of 0 slots too,
    whether its agent set DET_SLOT_IDS to [] or not at all (a partial set then, whose file
    states two containers): none derives a job of one container, none of two."""
    from support.dry_run import dry_run

    path = tmp_path / "rendezvous.json"
    path.write_text(RDV % rank, encoding="utf-8")
    status, out, err = dry_run([f"DERIVE_ENV_DETERMINED_RENDEZVOUS={path}",
                                "DET_MASTER=http://m:8080", "DET_ALLOCATION_ID=a.1",
                                f"DET_SLOT_IDS={slot_ids}"])
    assert (status, out) == (3, "")
    if not slot_ids:
        assert err == (
            f"derive-env: error: container_addrs in {path}='[\"192.168.10.21\", "
            "\"192.168.10.23\"]': expected a list of one host or unset: a Determined trial "
            "states a job of more than one container, but only part of its variables are set "
            "(not set: DET_SLOT_IDS), and a partial set is never used: it may be left over "
            "from another job. Run derive-env in the launcher's own process (the launcher sets "
            "all of them), or set label ai.backend.distributed.on-error=warn to run the "
            "command with the environment unchanged\n")
        return
    assert err == (
        f"derive-env: error: {path}: expected container_slot_counts all 0 (a trial without "
        "slots) or all at least 1 (Determined splits slots_per_trial among the containers), "
        "got [0, 2]: entry 0 (192.168.10.21) has 0 while entry 1 (192.168.10.23) has 2 "
        "(every container reads this file and stops alike): a file of another trial or "
        "written by hand? Determined writes it (prep_container --rendezvous)\n")
