"""The Kubeflow sources (sources/managers/kubeflow.py): PyTorchJob v1 and TrainJob v2 pods.

No recorded environment exists here (no Kubernetes on this machine): the pods' variables are
TYPED from the operators' code, as it sets them:

- v1: kubeflow/training-operator pkg/controller.v1/pytorch/envvar.go ``setPodEnv`` (RANK =
  PET_NODE_RANK = the pod rank, master 0, worker i -> i + 1; WORLD_SIZE = pods x
  getNprocPerNodeInt; PET_NNODES = pods, ``MIN:MAX`` with an elastic policy, elastic.go) and
  master.go (MASTER_ADDR = ``<job>-master-0``, MASTER_PORT = the container port, default
  23456; in later operators the master pod's own MASTER_ADDR is ``localhost`` and both are
  copied into PET_MASTER_ADDR / PET_MASTER_PORT: ``later=True``); PYTHONUNBUFFERED=0 too.
- v2: kubeflow/trainer pkg/runtime/framework/plugins/torch/torch.go ``EnforceMLPolicy``
  (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK = the Job completion index, PET_MASTER_ADDR
  = ``<trainjob>-node-0-0.<trainjob>``, PET_MASTER_PORT = constants.ContainerTrainerPort =
  29500).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.errors import TopologyError
from derive_env.sources import BY_NAME, seen_sources
from derive_env.sources.managers import kubeflow
from derive_env.sources.report import Processes, Report
from helpers import framework_changes
from support.kubeflow import pytorchjob_pod, trainjob_node


def read(environ: dict[str, str], name: str) -> Report:
    """:func:`kubeflow.read` for the table line called ``name``."""
    return kubeflow.read(environ, BY_NAME[name])


V1_FIX = ("the training operator sets it for every pod (kubeflow/training-operator "
          "pkg/controller.v1/pytorch/envvar.go); do not set it in the pod template's env")
V2_FIX = ("the trainer sets it for every node (kubeflow/trainer pkg/runtime/framework/plugins/"
          "torch/torch.go); do not set it in the TrainJob's or runtime's env")


@pytest.mark.parametrize("pod", [0, 1, 2])
def test_pytorchjob_nproc_2(pod: int) -> None:
    env = pytorchjob_pod("bert", 2, pod, "2")
    assert [s.name for s in seen_sources(env)] == ["kubeflow-pytorchjob"]
    report = read(env, "kubeflow-pytorchjob")
    assert report.title == "a Kubeflow PyTorchJob (v1)"
    assert (report.node_rank, report.num_nodes) == (pod, 3)
    assert report.processes is None  # RANK=pod, WORLD_SIZE=6: not this process's
    assert (report.master, report.master_port) == ("bert-master-0", 23456)
    assert report.job == ("kubeflow-pytorchjob", "23456", "3")
    assert report.preset == {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE",
                             "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE"}
    assert report.inputs == {"node_rank": ("PET_NODE_RANK",), "num_nodes": ("PET_NNODES",),
                             "master": ("MASTER_ADDR",), "master_port": ("MASTER_PORT",),
                             "ports": ("MASTER_PORT", "PET_NNODES")}
    assert report.notes[-1] == ("RANK and WORLD_SIZE are the pod's rank and the job's process "
                                "count, not this process's: torchrun sets each worker's")


@pytest.mark.parametrize("pod", [0, 1, 2])
def test_pytorchjob_master_pod_with_localhost_names_its_service(pod: int) -> None:
    report = read(pytorchjob_pod("bert", 2, pod, "2", later=True), "kubeflow-pytorchjob")
    assert report.master == "bert-master-0"  # the master pod's own name (HOSTNAME)
    assert report.job == ("kubeflow-pytorchjob", "23456", "3")  # the same on every pod
    assert {"PET_MASTER_ADDR", "PET_MASTER_PORT"} <= report.preset
    assert report.inputs["master"] == (("MASTER_ADDR", "HOSTNAME") if pod == 0
                                       else ("MASTER_ADDR",))
    assert (("MASTER_ADDR='localhost': this is the master pod (the operator gives it "
             "localhost, the other pods its service name): the master is bert-master-0 "
             "(HOSTNAME) for every pod, and MASTER_ADDR='localhost' is kept")
            in report.notes) == (pod == 0)


def test_pytorchjob_nproc_1_is_a_process_layer() -> None:
    report = read(pytorchjob_pod("bert", 3, 2, "1"), "kubeflow-pytorchjob")
    assert report.processes == Processes(2, 0, 4, 1)
    assert report.inputs["processes"] == ("RANK", "WORLD_SIZE", "PET_NPROC_PER_NODE")


def test_pytorchjob_nproc_auto_world_size_counts_pods() -> None:
    report = read(pytorchjob_pod("bert", 1, 1, "auto"), "kubeflow-pytorchjob")
    assert (report.node_rank, report.num_nodes, report.processes) == (1, 2, None)


def test_pytorchjob_elastic_range() -> None:
    report = read(pytorchjob_pod("bert", 2, 1, "2", elastic="1:3"), "kubeflow-pytorchjob")
    assert (report.node_rank, report.num_nodes, report.count()) == (1, None, None)
    assert "PET_RDZV_ENDPOINT" in report.preset
    assert report.notes[1] == ("PET_NNODES='1:3' is an elastic range: torchrun's rendezvous "
                               "decides the node count")


def test_pytorchjob_elastic_with_a_master_adds_nothing_of_torchruns() -> None:
    """elastic.go's PET_RDZV_* beside the Master's variables: torchrun's own rendezvous."""
    from derive_env.pipeline import derive

    for pod in (0, 2):
        env = pytorchjob_pod("bert", 2, pod, "2", elastic="1:3")
        derivation = derive(env, {"ai.backend.distributed.frameworks": "pytorch"})
        assert framework_changes(derivation) == {"NODE_RANK": str(pod)}
        assert ("torchrun's own rendezvous (PET_RDZV_ENDPOINT, set by the manager): no PET_* "
                "added, the manager's kept as they are") in derivation.notes


def test_pytorchjob_elastic_static_range() -> None:
    report = read(pytorchjob_pod("bert", 2, 1, "2", elastic="3:3"), "kubeflow-pytorchjob")
    assert report.num_nodes == 3


@pytest.mark.parametrize("index", [0, 1])
def test_trainjob(index: int) -> None:
    env = trainjob_node("llm", 2, index)
    assert [s.name for s in seen_sources(env)] == ["kubeflow-trainjob"]
    report = read(env, "kubeflow-trainjob")
    assert report.title == "a Kubeflow TrainJob (v2)"
    assert (report.node_rank, report.num_nodes, report.processes) == (index, 2, None)
    assert (report.master, report.master_port) == ("llm-node-0-0.llm", 29500)
    assert report.preset == set(env)
    assert report.inputs == {"node_rank": ("PET_NODE_RANK",), "num_nodes": ("PET_NNODES",),
                             "master": ("PET_MASTER_ADDR",),
                             "master_port": ("PET_MASTER_PORT",),
                             "ports": ("PET_MASTER_ADDR", "PET_MASTER_PORT")}


@pytest.mark.parametrize("nproc", ["auto", "cpu", "gpu", "xpu", "8"])
def test_trainjob_nproc_words(nproc: str) -> None:
    assert read(trainjob_node("llm", 2, 0, nproc), "kubeflow-trainjob").num_nodes == 2


V1_MALFORMED = [
    ({"RANK": "1"}, "RANK='1': expected PET_NODE_RANK='2': a PyTorchJob sets both to the pod's "
     "rank (envvar.go, setPodEnv); "),
    ({"WORLD_SIZE": "3"}, "WORLD_SIZE='3': expected PET_NNODES='3' x PET_NPROC_PER_NODE='2' = "
     "6 (envvar.go, setPodEnv); "),
    ({"WORLD_SIZE": "4", "PET_NPROC_PER_NODE": "auto"}, "WORLD_SIZE='4': expected "
     "PET_NNODES='3' (pods; PET_NPROC_PER_NODE='auto' is not a number) (envvar.go, "
     "setPodEnv); "),
    ({"PET_NODE_RANK": "3", "RANK": "3"}, "PET_NODE_RANK='3': expected an index below "
     "PET_NNODES='3': "),
    ({"PET_NNODES": "3:1"}, "PET_NNODES='3:1': expected an integer >= 1 or MIN:MAX with 1 <= "
     "MIN <= MAX; "),
    ({"PET_NNODES": "x"}, "PET_NNODES='x': expected an integer >= 1 or MIN:MAX with 1 <= MIN "
     "<= MAX; "),
    ({"PET_NPROC_PER_NODE": "0"}, "PET_NPROC_PER_NODE='0': expected an integer >= 1 or one of "
     "auto, cpu, gpu, xpu (torchrun's --nproc-per-node, torch/distributed/run.py); "),
    ({"MASTER_ADDR": "a b"}, "MASTER_ADDR='a b': expected a host name (letters, digits, '-' "
     "and '.') or an IP address; "),
    ({"MASTER_PORT": "0"}, "MASTER_PORT='0': expected a port number 1-65535; "),
    ({"RANK": "two"}, "RANK='two': expected an integer >= 0; "),
    ({"MASTER_ADDR": "localhost"}, "MASTER_ADDR='localhost': expected the master's service or "
     "address on pod 2 (PET_NODE_RANK): only the master pod (rank 0) reaches the master at a "
     "loopback address; "),
    ({"PET_MASTER_ADDR": "other-master-0"}, "PET_MASTER_ADDR='other-master-0': expected "
     "MASTER_ADDR='bert-master-0': the operator sets both to the same value (master.go); "),
    ({"PET_MASTER_PORT": "29500"}, "PET_MASTER_PORT='29500': expected MASTER_PORT='23456': the "
     "operator sets both to the same value (master.go); "),
]


@pytest.mark.parametrize(("changes", "message"), V1_MALFORMED)
def test_pytorchjob_malformed(changes: dict[str, str], message: str) -> None:
    env = pytorchjob_pod("bert", 2, 2, "2")
    env.update(changes)
    with pytest.raises(TopologyError) as err:
        read(env, "kubeflow-pytorchjob")
    assert str(err.value) == message + V1_FIX
    assert err.value.exit_code == 3


V2_MALFORMED = [
    ({"PET_NODE_RANK": "2"}, "PET_NODE_RANK='2': expected an index below PET_NNODES='2': "),
    ({"PET_NNODES": "2:2"}, "PET_NNODES='2:2': expected an integer >= 1; "),
    ({"PET_NPROC_PER_NODE": "many"}, "PET_NPROC_PER_NODE='many': expected an integer >= 1 or "
     "one of auto, cpu, gpu, xpu (torchrun's --nproc-per-node, torch/distributed/run.py); "),
    ({"PET_MASTER_ADDR": "-x"}, "PET_MASTER_ADDR='-x': expected a host name (letters, digits, "
     "'-' and '.') or an IP address; "),
    ({"PET_MASTER_PORT": "http"}, "PET_MASTER_PORT='http': expected a port number 1-65535; "),
]


@pytest.mark.parametrize(("changes", "message"), V2_MALFORMED)
def test_trainjob_malformed(changes: dict[str, str], message: str) -> None:
    env = trainjob_node("llm", 2, 1)
    env.update(changes)
    with pytest.raises(TopologyError) as err:
        read(env, "kubeflow-trainjob")
    assert str(err.value) == message + V2_FIX


def test_misleading_torchrun_worker_in_a_pod_is_not_kubeflow() -> None:
    # torchrun started in the pod: its worker has the pod's PET_* and TORCHELASTIC_RUN_ID;
    # the Kubeflow lines step aside (unless=TORCHELASTIC_RUN_ID), RANK is torchrun's.
    env = pytorchjob_pod("bert", 2, 1, "2")
    env.update(TORCHELASTIC_RUN_ID="none", RANK="3", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2",
               GROUP_RANK="1", GROUP_WORLD_SIZE="3")
    assert [s.name for s in seen_sources(env)] == ["torchrun"]


def test_misleading_trainjob_with_rank_is_not_a_trainjob() -> None:
    # A RANK beside v2's PET_* is no TrainJob (v2 sets none; its webhook refuses the name).
    env = trainjob_node("llm", 2, 1)
    env["RANK"] = "1"
    assert "kubeflow-trainjob" not in [s.name for s in seen_sources(env)]


# -- properties ---------------------------------------------------------------------------


NPROC = st.sampled_from(["1", "2", "4", "8", "auto", "cpu", "gpu"])


@settings(max_examples=150, deadline=None)
@given(workers=st.integers(0, 20), nproc=NPROC, port=st.integers(1, 65535),
       later=st.booleans())
def test_every_pytorchjob_pod_agrees(workers: int, nproc: str, port: int, later: bool) -> None:
    pods = workers + 1
    reports = [read(pytorchjob_pod("job-1", workers, pod, nproc, port, later=later),
                    "kubeflow-pytorchjob") for pod in range(pods)]
    assert {(r.num_nodes, r.master_port, r.job) for r in reports} == {
        (pods, port, ("kubeflow-pytorchjob", str(port), str(pods)))}
    assert {r.master for r in reports} == {"job-1-master-0"}
    assert [r.node_rank for r in reports] == list(range(pods))
    if nproc == "1":
        assert [r.processes for r in reports] == [Processes(p, 0, pods, 1) for p in range(pods)]
    else:
        assert {r.processes for r in reports} == {None}


@settings(max_examples=100, deadline=None)
@given(nodes=st.integers(1, 64), nproc=NPROC)
def test_every_trainjob_node_agrees(nodes: int, nproc: str) -> None:
    reports = [read(trainjob_node("t", nodes, i, nproc), "kubeflow-trainjob")
               for i in range(nodes)]
    assert {(r.num_nodes, r.master, r.master_port) for r in reports} == {
        (nodes, "t-node-0-0.t", 29500)}
    assert [r.node_rank for r in reports] == list(range(nodes))


TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["0", "1", "2", "3", "1:3", "3:1", "2:2", ":", "auto", "gpu", "-1", "01", "node-0",
     "::1", "99999999999999999999"])
V1_NAMES = ["MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "PET_NODE_RANK", "PET_NNODES",
            "PET_NPROC_PER_NODE", "PET_MASTER_ADDR", "PET_MASTER_PORT"]
V2_NAMES = ["PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
            "PET_NPROC_PER_NODE"]


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(["kubeflow-pytorchjob", "kubeflow-trainjob"]), data=st.data())
def test_arbitrary_text_gives_a_report_or_a_topology_error(name: str,
                                                           data: st.DataObject) -> None:
    names = V1_NAMES if name == "kubeflow-pytorchjob" else V2_NAMES
    values = data.draw(st.fixed_dictionaries({n: TEXT for n in names}))
    try:
        report = read(values, name)
    except TopologyError as exc:
        assert str(exc).split("=", 1)[0] in names
        return
    assert report.node_rank is not None and report.node_rank >= 0
    assert report.num_nodes is None or report.node_rank < report.num_nodes


def test_trainjob_loopback_master_of_a_multi_node_job_is_an_error() -> None:
    env = {**trainjob_node("tj", 3, 1), "PET_MASTER_ADDR": "localhost"}
    with pytest.raises(TopologyError) as caught:
        read(env, "kubeflow-trainjob")
    assert str(caught.value) == (
        "PET_MASTER_ADDR='localhost': expected the master node's service name or address (a "
        "job of 3 nodes): a loopback address makes every node wait at itself; "
        + kubeflow._FIX["kubeflow-trainjob"])


def test_trainjob_with_a_stale_master_addr_is_an_error() -> None:
    env = {**trainjob_node("tj", 3, 1), "MASTER_ADDR": "other"}
    with pytest.raises(TopologyError) as caught:
        read(env, "kubeflow-trainjob")
    assert str(caught.value).startswith(
        f"MASTER_ADDR='other': expected unset or PET_MASTER_ADDR={env['PET_MASTER_ADDR']!r}: "
        "torchrun meets at PET_MASTER_ADDR, and init_process_group and JAX would use "
        "MASTER_ADDR; ")


def test_an_elastic_pytorchjob_is_a_job_of_unknown_size_never_one_node() -> None:
    """PET_NNODES=2:4: the rendezvous decides; JAX cannot be given a process count."""
    from derive_env.pipeline import derive

    for pod in (0, 1):
        env = {**pytorchjob_pod("bert", 3, pod, "2"), "PET_NNODES": "2:4"}
        derivation = derive(env, {"ai.backend.distributed.frameworks": "pytorch"})
        assert derivation is not None
        topo = derivation.topology
        assert (topo.multi_node, topo.num_nodes, topo.node_rank, topo.sized) == (
            True, None, pod, False)
        assert framework_changes(derivation) == {  # no PET_NNODES: the elastic range stays
            "NODE_RANK": str(pod), "PET_MASTER_ADDR": "bert-master-0",
            "PET_MASTER_PORT": "23456"}
        with pytest.raises(TopologyError, match=r"^JAX_NUM_PROCESSES cannot be set: the num"):
            derive(env, {"ai.backend.distributed.frameworks": "jax"})


# -- the classic v1 set: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE without PET_* ---------


def classic_pod(job: str, workers: int, pod: int, port: int = 23456) -> dict[str, str]:
    """One pod of a PyTorchJob of kubeflow/pytorch-operator (before PET_*), as its
    pkg/controller.v1/pytorch/pod.go ``setClusterSpec`` (training-operator up to v1.3,
    pytorch.go ``setPodEnv``) sets it: the master pod's MASTER_ADDR is ``localhost``, the
    workers' ``<job>-master-0``; WORLD_SIZE = the pods (totalReplicas), RANK = 0 on the
    master, worker i: i + 1; PYTHONUNBUFFERED=0; HOSTNAME the pod's name (the kubelet's)."""
    return {"MASTER_PORT": str(port), "MASTER_ADDR": "localhost" if pod == 0 else
            f"{job}-master-0", "WORLD_SIZE": str(workers + 1), "RANK": str(pod),
            "PYTHONUNBUFFERED": "0", "KUBERNETES_SERVICE_HOST": "10.96.0.1",
            "HOSTNAME": f"{job}-master-0" if pod == 0 else f"{job}-worker-{pod - 1}"}


@pytest.mark.parametrize("pod", [0, 1, 2])
def test_classic_v1_pod_is_read_as_node_values(pod: int) -> None:
    """Item 2 of issue 16: no longer refused as "closest: torchrun"."""
    from derive_env.pipeline import derive

    env = classic_pod("bert", 2, pod)
    assert [s.name for s in seen_sources(env)] == ["kubeflow-pytorchjob-classic"]
    report = read(env, "kubeflow-pytorchjob-classic")
    assert (report.node_rank, report.num_nodes, report.processes) == (
        pod, 3, Processes(pod, 0, 3, 1))
    assert report.master == "bert-master-0"  # on the master pod: its HOSTNAME
    assert report.job == ("kubeflow-pytorchjob", "23456", "3")
    assert report.warnings == ()
    derivation = derive(env, {"ai.backend.distributed.frameworks": "pytorch"})
    assert framework_changes(derivation) == {
        "NODE_RANK": str(pod), "PET_NNODES": "3", "PET_NODE_RANK": str(pod),
        "PET_MASTER_ADDR": "localhost" if pod == 0 else "bert-master-0",
        "PET_MASTER_PORT": "23456"}
    assert not derivation.topology.per_process  # one process per pod: the node layer


def test_classic_v1_set_outside_kubernetes_warns_it_reads_node_values() -> None:
    env = {k: v for k, v in classic_pod("bert", 2, 1).items() if k != "KUBERNETES_SERVICE_HOST"}
    assert read(env, "kubeflow-pytorchjob-classic").warnings == (
        "RANK='1' and WORLD_SIZE='3' without a launcher's marker (LOCAL_RANK, "
        "TORCHELASTIC_RUN_ID) nor a Kubernetes pod's: read as a node's rank and the node count, "
        "one process per node (a Kubeflow PyTorchJob's meaning); if they count processes, "
        "start the command from their launcher instead",)


@pytest.mark.parametrize("stray", ["LOCAL_RANK", "TORCHELASTIC_RUN_ID", "NODE_RANK",
                                   "PET_NODE_RANK", "AZUREML_RUN_ID"])
def test_classic_v1_set_beside_a_launchers_marker_is_not_read(stray: str) -> None:
    env = {**classic_pod("bert", 2, 1), stray: "1"}
    assert "kubeflow-pytorchjob-classic" not in [s.name for s in seen_sources(env)]


@pytest.mark.parametrize(("changes", "message"), [
    ({"RANK": "3"}, "RANK='3': expected an index below WORLD_SIZE='3': "),
    ({"MASTER_ADDR": "127.0.0.1"}, "MASTER_ADDR='127.0.0.1': expected the master's service or "
     "address on pod 1 (RANK): only the master pod (rank 0) reaches the master at a loopback "
     "address; "),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0': expected an integer >= 1; "),
])
def test_classic_v1_malformed(changes: dict[str, str], message: str) -> None:
    with pytest.raises(TopologyError) as err:
        read({**classic_pod("bert", 2, 1), **changes}, "kubeflow-pytorchjob-classic")
    assert str(err.value) == message + V1_FIX


@settings(max_examples=80, deadline=None)
@given(workers=st.integers(1, 30), port=st.integers(1, 65535))
def test_every_classic_pod_derives_one_job(workers: int, port: int) -> None:
    from derive_env.digest import digest_of, facts_of
    from derive_env.pipeline import derive

    labels = {"ai.backend.distributed.frameworks": "pytorch,jax"}
    derived = [derive(classic_pod("j", workers, pod, port), labels)
               for pod in range(workers + 1)]
    assert [d.topology.node_rank for d in derived] == list(range(workers + 1))
    assert {d.topology.num_nodes for d in derived} == {workers + 1}
    # One digest on every pod, the master pod's (MASTER_ADDR=localhost) included: its
    # loopback address is written as its own name, the workers' <job>-master-0.
    assert len({digest_of(facts_of(d.topology, d)) for d in derived}) == 1
    master = dict(facts_of(derived[0].topology, derived[0]))
    assert (master["master"], master["var.MASTER_ADDR"]) == ("j-master-0", "j-master-0")
    # ... while what the master pod exports stays what works there
    exported = {v.name: v.value for v in derived[0].variables}
    assert (exported["MASTER_ADDR"], exported["PET_MASTER_ADDR"]) == ("localhost", "localhost")
    assert "MASTER_ADDR" not in derived[0].changes()  # the operator's value, kept


def test_classic_master_pod_without_its_pod_name_keeps_localhost() -> None:
    env = {k: v for k, v in classic_pod("bert", 2, 0).items() if k != "HOSTNAME"}
    report = read(env, "kubeflow-pytorchjob-classic")
    assert report.master == "localhost"
    assert report.notes[-1] == (
        "MASTER_ADDR='localhost': this is the master pod (the operator gives it localhost, "
        "the other pods its service name), but HOSTNAME is not <job>-master-0: this pod's "
        "job digest names the master as localhost, not as the other pods do")


# -- an elastic PyTorchJob without a Master: torchrun's own rendezvous -------------------


def elastic_pod(job: str, workers: int, pod: int, nnodes: str | None = None,
                port: int = 23456) -> dict[str, str]:
    """A Worker pod of an elastic PyTorchJob without a Master replica, as kubeflow/trainer@
    ee11629 pkg/controller.v1/pytorch/envvar.go ``setPodEnv`` (no master: no MASTER_*, RANK,
    WORLD_SIZE, PET_NODE_RANK) and elastic.go ``Generate`` set it (elastic_test.go: backend
    c10d, PET_RDZV_ID, PET_MAX_RESTARTS; PET_NNODES ``MIN:MAX`` or the worker replicas;
    endpoint ``<job>-worker-0:<port>``); HOSTNAME = the pod name (common ``GenGeneralName``)."""
    return {"PYTHONUNBUFFERED": "1", "PET_RDZV_ENDPOINT": f"{job}-worker-0:{port}",
            "PET_RDZV_BACKEND": "c10d", "PET_NNODES": nnodes or str(workers),
            "PET_MAX_RESTARTS": "3", "PET_RDZV_ID": job, "PET_NPROC_PER_NODE": "2",
            "HOSTNAME": f"{job}-worker-{pod}", "KUBERNETES_SERVICE_HOST": "10.96.0.1"}


@pytest.mark.parametrize("nnodes", ["2:4", "4"])
@pytest.mark.parametrize("pod", [0, 3])
def test_elastic_workers_pass_to_torchruns_rendezvous(pod: int, nnodes: str) -> None:
    """Item 1 of issue 16: no error, nothing of torchrun's rewritten or added."""
    from derive_env.pipeline import derive

    env = elastic_pod("el", 4, pod, nnodes)
    assert [s.name for s in seen_sources(env)] == ["kubeflow-elastic"]
    report = read(env, "kubeflow-elastic")
    assert (report.node_rank, report.master, report.renumbers) == (pod, "el-worker-0", True)
    assert report.num_nodes == (None if ":" in nnodes else 4)
    assert report.notes[0] == (
        "torchrun's own rendezvous (PET_RDZV_BACKEND='c10d' at PET_RDZV_ENDPOINT="
        "'el-worker-0:23456') numbers the nodes: nothing of torchrun's (PET_*) is rewritten or "
        "added")
    derivation = derive(env, {"ai.backend.distributed.frameworks": "pytorch"})
    changes = framework_changes(derivation)
    assert not [name for name in changes if name.startswith("PET_")]
    assert (changes["MASTER_ADDR"], changes["NODE_RANK"]) == ("el-worker-0", str(pod))
    assert changes["MASTER_PORT"] != "23456"  # the rendezvous store's port
    assert derivation.topology.multi_node
    assert derivation.topology.sized == (":" not in nnodes)


def test_elastic_pod_whose_index_is_unknown_is_refused_with_the_fix() -> None:
    env = {**elastic_pod("el", 2, 1), "HOSTNAME": "custom"}
    with pytest.raises(TopologyError) as err:
        read(env, "kubeflow-elastic")
    assert str(err.value) == (
        "HOSTNAME='custom': expected <job>-worker-<index>, the pod's name (the operator names "
        "an elastic PyTorchJob's pods so): without it this pod's index is unknown; run "
        "derive-env in each worker torchrun starts (torchrun ... --no-python derive-env -- "
        "python train.py): the torchrun source reads what its rendezvous gave")


def test_a_torchrun_worker_of_an_elastic_pod_is_torchruns() -> None:
    env = {**elastic_pod("el", 2, 1), "TORCHELASTIC_RUN_ID": "el", "RANK": "3",
           "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
           "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29400"}
    assert [s.name for s in seen_sources(env)] == ["torchrun"]


@settings(max_examples=60, deadline=None)
@given(workers=st.integers(2, 30), fixed=st.booleans())
def test_every_elastic_pod_derives_one_job(workers: int, fixed: bool) -> None:
    from derive_env.digest import digest_of, facts_of
    from derive_env.pipeline import derive

    labels = {"ai.backend.distributed.frameworks": "pytorch" + (",jax" if fixed else "")}
    nnodes = str(workers) if fixed else f"1:{workers}"
    derived = [derive(elastic_pod("e", workers, pod, nnodes), labels) for pod in range(workers)]
    assert [d.topology.node_rank for d in derived] == list(range(workers))
    assert {(d.topology.multi_node, d.topology.num_nodes) for d in derived} == {
        (True, workers if fixed else None)}
    assert len({digest_of(facts_of(d.topology, d)) for d in derived}) == 1


# -- the manifests of docs/sources/kubeflow.md ---------------------------------------------

#: kubeflow/trainer@ee11629 pkg/apis/kubeflow.org/v1/pytorch_types.go, the JSON tags of
#: PyTorchJobSpec and ElasticPolicy.
PYTORCHJOB_SPEC = {"runPolicy", "elasticPolicy", "pytorchReplicaSpecs", "nprocPerNode"}
ELASTIC_POLICY = {"minReplicas", "maxReplicas", "rdzvBackend", "rdzvPort", "rdzvHost",
                  "rdzvId", "rdzvConf", "standalone", "nProcPerNode", "maxRestarts", "metrics"}


def test_the_elastic_manifest_names_only_the_apis_fields() -> None:
    from support.k8s import manifest

    job = manifest("PyTorchJob", "el", page="kubeflow.md")
    spec = job["spec"]
    assert set(spec) <= PYTORCHJOB_SPEC and set(spec["elasticPolicy"]) <= ELASTIC_POLICY
    assert set(spec["pytorchReplicaSpecs"]) == {"Worker"}  # no Master: kubeflow-elastic
    container = spec["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    # getPortFromPyTorchJob: the container "pytorch", its port "pytorchjob-port"
    # (kubeflowv1.PyTorchJobDefaultContainerName, PyTorchJobDefaultPortName)
    assert container["name"] == "pytorch"
    assert container["ports"][0]["name"] == "pytorchjob-port"
    assert container["command"][:2] == ["derive-env", "--"]


def test_an_elastic_pod_of_a_63_character_hostname_is_refused() -> None:
    """Pitfall 10: the kubelet cuts the pod name to 63 characters; "<54>-worker-12" becomes
    "<54>-worker-1", another pod's index. Never guessed."""
    job = "j" * 54
    env = {**elastic_pod(job, 13, 12), "HOSTNAME": f"{job}-worker-12"[:63]}
    assert env["HOSTNAME"].endswith("-worker-1")
    with pytest.raises(TopologyError) as err:
        read(env, "kubeflow-elastic")
    assert str(err.value).startswith(
        f"HOSTNAME={env['HOSTNAME']!r}: expected a pod name under 63 characters: the kubelet "
        "cuts longer ones, so the index at its end may be cut too (give the PyTorchJob a "
        "shorter name); ")


CLASSIC_NAMES = ["MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "KUBERNETES_SERVICE_HOST"]
ELASTIC_NAMES = ["PET_RDZV_ENDPOINT", "PET_RDZV_BACKEND", "PET_NNODES", "HOSTNAME"]
HOSTNAMES = st.sampled_from(["el-worker-0", "el-worker-3", "x-worker-", "-worker-1", "w" * 63,
                             "el-worker-٣"])


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(["kubeflow-pytorchjob-classic", "kubeflow-elastic"]),
       data=st.data())
def test_arbitrary_text_of_the_new_lines_gives_a_report_or_a_topology_error(
        name: str, data: st.DataObject) -> None:
    names = CLASSIC_NAMES if name == "kubeflow-pytorchjob-classic" else ELASTIC_NAMES
    values = data.draw(st.fixed_dictionaries(
        {n: (TEXT | HOSTNAMES) if n == "HOSTNAME" else TEXT for n in names}))
    try:
        report = read(values, name)
    except TopologyError as exc:
        assert str(exc).split("=", 1)[0] in names
        return
    assert report.node_rank is not None and report.node_rank >= 0
    assert report.num_nodes is None or report.node_rank < report.num_nodes
    assert report.count() != 1 or report.node_rank == 0


@settings(max_examples=120, deadline=None)
@given(name=st.sampled_from(["kubeflow-pytorchjob-classic", "kubeflow-elastic"]),
       workers=st.integers(2, 9), pod=st.integers(0, 8), stray=st.data())
def test_no_pod_of_a_larger_job_derives_one_node_with_a_stray_variable(
        name: str, workers: int, pod: int, stray: st.DataObject) -> None:
    """A variable of the line's `unless` (a user's, another launcher's) sets it aside: then
    the pod is refused or read by another source, never a single node with exit 0."""
    from derive_env.pipeline import derive

    pod = min(pod, workers - 1)
    env = (classic_pod("j", workers - 1, pod) if name == "kubeflow-pytorchjob-classic"
           else elastic_pod("j", workers, pod))
    extra = stray.draw(st.sampled_from(BY_NAME[name].unless))
    env[extra] = stray.draw(st.sampled_from(["0", "1", "x"]))
    try:
        derivation = derive(env, {"ai.backend.distributed.frameworks": "pytorch"})
    except TopologyError:
        return
    assert derivation.topology.multi_node
