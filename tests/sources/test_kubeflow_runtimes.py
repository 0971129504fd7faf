"""sources/managers/kubeflow_runtimes.py: JAXJob (v1) pods, TrainJob JAX and XGBoost runtime nodes.

No Kubernetes here: the pods' variables are TYPED from the controllers' code (cited per
fixture); the values a controller sets are kept (never overwritten), PyTorch's are derived
from the same facts.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.digest import digest_of, facts_of
from derive_env.errors import TopologyError
from derive_env.pipeline import derive
from derive_env.sources import BY_NAME, seen_sources
from derive_env.sources.managers import kubeflow_runtimes
from derive_env.sources.report import Report

JAX = {"ai.backend.distributed.frameworks": "jax"}
BOTH = {"ai.backend.distributed.frameworks": "pytorch,jax"}


def read(environ: dict[str, str], name: str) -> Report:
    return kubeflow_runtimes.read(environ, BY_NAME[name])


def jax_node(job: str, nodes: int, index: int) -> dict[str, str]:
    """kubeflow/trainer pkg/runtime/framework/plugins/jax/jax.go ``EnforceMLPolicy``: the
    three JAX_* (the process id a fieldRef to the completion index), plus what the Job
    controller and the kubelet set for an Indexed Job pod (jax_test.go expects the same)."""
    return {"JAX_NUM_PROCESSES": str(nodes), "JAX_PROCESS_ID": str(index),
            "JAX_COORDINATOR_ADDRESS": f"{job}-node-0-0.{job}:29500",
            "JOB_COMPLETION_INDEX": str(index), "KUBERNETES_SERVICE_HOST": "10.96.0.1",
            "HOSTNAME": f"{job}-node-0-{index}"}


def jaxjob_pod(job: str, replicas: int, index: int, port: int = 6666) -> dict[str, str]:
    """kubeflow/trainer@ee11629 pkg/controller.v1/jax/envvar.go ``setPodEnv`` (envvar_test.go
    ``TestSetPodEnv``: COORDINATOR_ADDRESS ``test-jaxjob-worker-0``); 6666 = the API's
    default jaxjob-port (jax_types.go)."""
    return {"PYTHONUNBUFFERED": "1", "COORDINATOR_PORT": str(port),
            "COORDINATOR_ADDRESS": f"{job}-worker-0", "NUM_PROCESSES": str(replicas),
            "PROCESS_ID": str(index), "HOSTNAME": f"{job}-worker-{index}",
            "KUBERNETES_SERVICE_HOST": "10.96.0.1"}


def xgboost_node(job: str, nodes: int, index: int, gpus: int = 1,
                 nnodes: bool = True) -> dict[str, str]:
    """kubeflow/trainer pkg/runtime/framework/plugins/xgboost/xgboost.go ``EnforceMLPolicy``:
    tracker ``<trainjob>-node-0-0.<trainjob>``, port 29500, task id = completion index,
    DMLC_NUM_WORKER = nodes x GPUs per node (1 without GPUs; xgboost_test.go)."""
    env = {"DMLC_TRACKER_URI": f"{job}-node-0-0.{job}", "DMLC_TRACKER_PORT": "29500",
           "DMLC_TASK_ID": str(index), "DMLC_NUM_WORKER": str(nodes * gpus),
           "JOB_COMPLETION_INDEX": str(index), "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    if nnodes:
        env["DERIVE_ENV_NNODES"] = str(nodes)
    return env


def test_jax_trainjob_node_is_read_and_its_values_kept() -> None:
    env = jax_node("llm", 4, 2)
    assert [s.name for s in seen_sources(env)] == ["kubeflow-jax"]
    report = read(env, "kubeflow-jax")
    assert (report.node_rank, report.num_nodes, report.master, report.master_port) == (
        2, 4, "llm-node-0-0.llm", None)
    assert report.job == ("kubeflow-jax", "llm-node-0-0.llm:29500", "4")
    derivation = derive(env, BOTH)
    assert derivation is not None
    changes = derivation.changes()
    assert not any(name.startswith("JAX_") for name in changes)  # kept as the trainer set
    assert changes["MASTER_ADDR"] == changes["PET_MASTER_ADDR"] == "llm-node-0-0.llm"
    assert (changes["NODE_RANK"], changes["PET_NNODES"]) == ("2", "4")
    assert changes["MASTER_PORT"] != "29500"  # JAX's coordinator holds 29500 on node 0
    assert 61000 <= int(changes["MASTER_PORT"]) <= 65535
    assert report.server_ports == (("jax", 29500, "JAX_COORDINATOR_ADDRESS"),)


def test_jaxjob_v1_pod_gives_jax_its_own_names() -> None:
    env = jaxjob_pod("mnist", 3, 1)
    assert [s.name for s in seen_sources(env)] == ["kubeflow-jaxjob"]
    report = read(env, "kubeflow-jaxjob")
    assert (report.node_rank, report.num_nodes, report.master) == (1, 3, "mnist-worker-0")
    derivation = derive(env, JAX)
    assert derivation is not None
    changes = derivation.changes()
    assert (changes["JAX_NUM_PROCESSES"], changes["JAX_PROCESS_ID"]) == ("3", "1")
    assert changes["JAX_COORDINATOR_ADDRESS"] == "mnist-worker-0:6666"  # COORDINATOR_PORT
    assert "NUM_PROCESSES" not in changes  # the operator's own names are never rewritten
    assert report.server_ports == (("jax", 6666, "COORDINATOR_PORT"),)


@pytest.mark.parametrize("labels", [JAX, {**BOTH, "ai.backend.distributed.jax-port": "7777"}])
def test_the_jaxjobs_declared_port_is_the_coordinators(labels: dict[str, str]) -> None:
    """The operator's COORDINATOR_PORT (the container port jaxjob-port, envvar.go
    getPortFromJAXJob) is the port the job's Service and network policies open: JAX's
    coordinator uses it, never a hashed one, and a label does not move it."""
    derivation = derive(jaxjob_pod("mnist", 3, 2, port=12345), labels)
    assert derivation is not None
    changes = derivation.changes()
    assert changes["JAX_COORDINATOR_ADDRESS"] == "mnist-worker-0:12345"
    assert changes.get("MASTER_PORT") != "12345"  # PyTorch's master (with pytorch) elsewhere


def test_a_master_port_on_the_jaxjobs_declared_port_is_refused() -> None:
    env = {**jaxjob_pod("mnist", 3, 1), "MASTER_PORT": "6666"}
    with pytest.raises(TopologyError) as err:
        derive(env, BOTH)
    assert "COORDINATOR_PORT (the manager's port for it)" in str(err.value)
    assert "MASTER_PORT (already set)" in str(err.value)


@pytest.mark.parametrize("gpus", [1, 4])
def test_xgboost_node_count_is_derive_env_nnodes(gpus: int) -> None:
    env = xgboost_node("xgb", 2, 1, gpus)
    assert [s.name for s in seen_sources(env)] == ["kubeflow-xgboost"]
    report = read(env, "kubeflow-xgboost")
    assert (report.node_rank, report.num_nodes, report.master) == (1, 2, "xgb-node-0-0.xgb")
    derivation = derive(env, {"ai.backend.distributed.frameworks": "pytorch"})
    assert derivation is not None
    assert derivation.changes()["PET_NNODES"] == "2"
    assert not any(name.startswith("DMLC_") for name in derivation.changes())


def test_xgboost_without_the_node_count_is_a_job_of_unknown_size() -> None:
    """DMLC_NUM_WORKER counts workers (nodes x GPUs): never taken for the node count."""
    env = xgboost_node("xgb", 2, 1, gpus=4, nnodes=False)
    report = read(env, "kubeflow-xgboost")
    assert (report.node_rank, report.num_nodes) == (1, None)
    topology = derive(env, {"ai.backend.distributed.frameworks": "pytorch"}).topology
    assert (topology.multi_node, topology.sized, topology.node_rank) == (True, False, 1)
    with pytest.raises(TopologyError) as err:
        derive(env, JAX)
    assert str(err.value).startswith(
        "JAX_NUM_PROCESSES cannot be set: the number of nodes is decided only when the job "
        "starts, or not stated (DERIVE_ENV_NNODES: an elastic job, or a manager that does not "
        "say it); ")
    assert report.notes[0] == (
        "node 1 (DMLC_TASK_ID) of a job of unknown size: DMLC_NUM_WORKER=8 is nodes x workers "
        "per node (GPUs); set DERIVE_ENV_NNODES to spec.trainer.numNodes for the node count")


FIX = {name: BY_NAME[name].roles["why"]
       for name in ("kubeflow-jax", "kubeflow-jaxjob", "kubeflow-xgboost")}


@pytest.mark.parametrize(("name", "env", "changes", "message"), [
    ("kubeflow-jax", jax_node("t", 2, 1), {"JAX_PROCESS_ID": "2", "JOB_COMPLETION_INDEX": "2"},
     "JAX_PROCESS_ID='2': expected a node rank below JAX_NUM_PROCESSES='2': "),
    ("kubeflow-jax", jax_node("t", 2, 1), {"JOB_COMPLETION_INDEX": "0"},
     "JAX_PROCESS_ID='1': expected JOB_COMPLETION_INDEX='0': the controller sets JAX_PROCESS_ID "
     "to the pod's Job completion index; "),
    ("kubeflow-jax", jax_node("t", 2, 1), {"JAX_COORDINATOR_ADDRESS": "t-node-0-0.t"},
     "JAX_COORDINATOR_ADDRESS='t-node-0-0.t': expected host:port (jax.py: "
     "'<trainjob>-node-0-0.<trainjob>:29500'); "),
    ("kubeflow-jax", jax_node("t", 2, 1), {"JAX_COORDINATOR_ADDRESS": "localhost:29500"},
     "JAX_COORDINATOR_ADDRESS='localhost:29500': expected the host of node 0, which every "
     "node reaches (a loopback address makes every node wait at itself); "),
    ("kubeflow-jaxjob", jaxjob_pod("m", 3, 1), {"HOSTNAME": "m-worker-2"},
     "PROCESS_ID='1': expected the index of this pod's hostname 'm-worker-2' "
     "(m-worker-<PROCESS_ID>, envvar.go setPodEnv); "),
    ("kubeflow-jaxjob", jaxjob_pod("m", 3, 1), {"COORDINATOR_PORT": "0"},
     "COORDINATOR_PORT='0': expected a port number 1-65535; "),
    ("kubeflow-xgboost", xgboost_node("x", 2, 1, 4), {"DERIVE_ENV_NNODES": "3"},
     "DERIVE_ENV_NNODES='3': expected a divisor of DMLC_NUM_WORKER=8 (nodes x workers per "
     "node, xgboost.go): the TrainJob's spec.trainer.numNodes"),
])
def test_malformed(name: str, env: dict[str, str], changes: dict[str, str],
                   message: str) -> None:
    with pytest.raises(TopologyError) as caught:
        read({**env, **changes}, name)
    expected = message if message.endswith("numNodes") else message + FIX[name]
    assert (str(caught.value), caught.value.exit_code) == (expected, 3)


# -- properties ---------------------------------------------------------------------------

POD = {"kubeflow-jax": jax_node, "kubeflow-jaxjob": jaxjob_pod, "kubeflow-xgboost": xgboost_node}


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(POD)), nodes=st.integers(2, 12))
def test_every_pod_of_a_job_derives_one_job(name: str, nodes: int) -> None:
    derived = [derive(POD[name]("job-7", nodes, i), BOTH if name != "kubeflow-xgboost" else
                      {"ai.backend.distributed.frameworks": "pytorch"}) for i in range(nodes)]
    masters = {(d.changes()["MASTER_ADDR"], d.changes()["MASTER_PORT"]) for d in derived}
    assert len(masters) == 1
    assert [d.topology.node_rank for d in derived] == list(range(nodes))
    assert {d.topology.num_nodes for d in derived} == {nodes}
    assert len({digest_of(facts_of(d.topology, d)) for d in derived}) == 1


NAMES = {"kubeflow-jax": ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_COORDINATOR_ADDRESS",
                          "JOB_COMPLETION_INDEX"),
         "kubeflow-jaxjob": ("COORDINATOR_ADDRESS", "COORDINATOR_PORT", "NUM_PROCESSES",
                             "PROCESS_ID", "HOSTNAME"),
         "kubeflow-xgboost": ("DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID",
                              "DMLC_NUM_WORKER", "DERIVE_ENV_NNODES", "JOB_COMPLETION_INDEX")}
TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["0", "1", "2", "-1", "x-worker-0", "x-worker-1", "h:1", "[::1]:5", "localhost", "a:0"])


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(NAMES)), data=st.data())
def test_arbitrary_text_gives_a_report_or_a_topology_error(name: str,
                                                           data: st.DataObject) -> None:
    values = data.draw(st.fixed_dictionaries({n: TEXT.filter(bool) for n in NAMES[name]}))
    try:
        report = read(values, name)
    except TopologyError as exc:
        assert str(exc).split("=", 1)[0] in NAMES[name]
        return
    assert report.node_rank is not None and report.node_rank >= 0
    assert report.num_nodes is None or report.node_rank < report.num_nodes


#: kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go, the JSON tags of
#: TrainJobSpec and Trainer.
TRAINJOB_SPEC = {"runtimeRef", "initializer", "trainer", "runtimePatches", "suspend",
                 "managedBy"}
TRAINER = {"image", "command", "args", "env", "numNodes", "resourcesPerNode",
           "numProcPerNode"}


def test_the_xgboost_manifest_names_only_the_apis_fields() -> None:
    from support.k8s import manifest

    job = manifest("TrainJob", "xgb", page="kubeflow.md")
    assert set(job["spec"]) <= TRAINJOB_SPEC and set(job["spec"]["trainer"]) <= TRAINER
    env = {e["name"]: e["value"] for e in job["spec"]["trainer"]["env"]}
    # constants.XGBoostReservedEnvNames: the webhook refuses these four in the trainer's env
    assert not set(env) & {"DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID",
                           "DMLC_NUM_WORKER"}
    assert env["DERIVE_ENV_NNODES"] == str(job["spec"]["trainer"]["numNodes"])


def test_a_jaxjob_pod_of_a_cut_hostname_is_compared_as_the_kubelet_cuts_it() -> None:
    """Pitfall 10: the kubelet cuts the pod name to 63 characters (then trailing '-')."""
    job = "m" * 54
    env = {**jaxjob_pod(job, 12, 11), "HOSTNAME": f"{job}-worker-11"[:63]}
    assert env["HOSTNAME"].endswith("-worker-1")  # 64 characters cut to 63
    assert read(env, "kubeflow-jaxjob").node_rank == 11
    with pytest.raises(TopologyError, match=r"^PROCESS_ID='2': expected the index"):
        read({**env, "PROCESS_ID": "2"}, "kubeflow-jaxjob")  # "-worker-2" is not cut


def test_every_nodes_view_keeps_the_trainers_job_wide_values() -> None:
    """--all-nodes: the trainer set JAX_COORDINATOR_ADDRESS and JAX_NUM_PROCESSES alike on
    every node, so no node's row shows another coordinator (only JAX_PROCESS_ID differs)."""
    from derive_env.topology import Inputs
    from derive_env.whole_job import job_view

    env = jax_node("llm", 3, 1)
    view = job_view(Inputs(env, BOTH), derive(env, BOTH))
    assert "JAX_COORDINATOR_ADDRESS" not in view.columns
    assert ("JAX_COORDINATOR_ADDRESS", "llm-node-0-0.llm:29500") in [
        shared[:2] for shared in view.shared]


def test_a_jaxjob_pod_without_its_process_id_is_refused() -> None:
    """COORDINATOR_ADDRESS, COORDINATOR_PORT and NUM_PROCESSES=3 (the operator sets them
    together) without PROCESS_ID: a partial set stating three nodes, refused (exit 3); a lone
    NUM_PROCESSES, a generic name, is anyone's and is not."""
    from support.dry_run import dry_run

    assert dry_run(["COORDINATOR_ADDRESS=jx-0.jx", "COORDINATOR_PORT=6666",
                    "NUM_PROCESSES=3"]) == (
        3, "", "derive-env: error: NUM_PROCESSES='3': expected 1 or unset: a Kubeflow JAXJob "
        "(v1) states a job of more than one node, but only part of its variables are set (not "
        "set: PROCESS_ID), and a partial set is never used: it may be left over from another "
        "job. Run derive-env in the launcher's own process (the launcher sets all of them), or "
        "set label ai.backend.distributed.on-error=warn to run the command with the "
        "environment unchanged\n")
    status, out, err = dry_run(["NUM_PROCESSES=3"])
    assert (status, err) == (0, "")
    assert "PET_NNODES=1\n" in out
