"""The TF_CONFIG sources (sources/managers/tfconfig.py): a manager's TF_CONFIG and Vertex AI's
CLUSTER_SPEC as the node layer for PyTorch and JAX, the TF_CONFIG kept as set.

No recorded environment exists here: the documents are TYPED from the managers' code:

- TFJob: kubeflow/trainer ``pkg/controller.v1/tensorflow/tensorflow.go`` ``genClusterSpec``
  (``<job>-<type>-<i>.<ns>.svc:<port>``, every replica type lower-cased, port 2222 by default,
  ``util.go`` ``GetPortFromTFJob``), ``genTFConfigJSONStr`` (``"environment": "cloud"``; with
  ``EnableDynamicWorker`` the ``SparseTFConfig`` of ``convertClusterSpecToSparseClusterSpec``:
  ``{"sparseCluster": {"worker": {"<i>": ...}, "ps": [...]}, "task": ...}``).
- Vertex AI: the docs' cluster-spec-format example (``cmle-training-workerpool<N>-<hash>-<i>
  :2222``, ``task`` with ``trial``, ``environment`` and ``job`` keys), and its PyTorch
  containers' node-level ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE``.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.digest import digest_of, facts_of
from derive_env.errors import TopologyError, shorten
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.sources import BY_NAME, seen_sources
from derive_env.sources.managers import tfconfig
from derive_env.sources.report import Report
from derive_env.topology import nodes_of
from support.k8s import manifest, tfjob

ALL = {PREFIX + "frameworks": "pytorch,tensorflow,jax"}
RUN_TF = ("TensorFlow reads the TF_CONFIG itself: run this replica's command without "
          "derive-env")


def vertex(pools: list[int], pool: int, index: int) -> str:
    """Vertex AI's CLUSTER_SPEC (docs, cluster-spec-format)."""
    cluster = {f"workerpool{p}": [f"cmle-training-workerpool{p}-ab12-{i}:2222"
                                  for i in range(n)] for p, n in enumerate(pools) if n}
    return json.dumps({"cluster": cluster, "environment": "cloud", "task": {
        "type": f"workerpool{pool}", "index": index, "trial": ""}, "job": '{"python_module":'
        '"trainer.task"}'})


def read(environ: dict[str, str], name: str = "tf-config") -> Report:
    return tfconfig.read(environ, BY_NAME[name])


def test_a_tfjob_worker() -> None:
    config = tfjob("mnist", {"chief": 1, "worker": 2, "ps": 1, "evaluator": 1}, "worker", 1)
    report = read({"TF_CONFIG": config})
    assert report.nodes == nodes_of(
        ["mnist-chief-0.default.svc", "mnist-worker-0.default.svc",
         "mnist-worker-1.default.svc"], ["chief", "worker", "worker"], [1, 1, 2])
    assert (report.node_rank, report.job, report.preset) == (
        2, ("tf-config", "mnist-chief-0.default.svc:2222", "3"), frozenset({"TF_CONFIG"}))


def test_the_chief_is_node_0_and_without_one_worker_0_is() -> None:
    assert read({"TF_CONFIG": tfjob("j", {"chief": 1, "worker": 3}, "chief", 0)}).node_rank == 0
    report = read({"TF_CONFIG": tfjob("j", {"worker": 3, "ps": 2}, "worker", 2)})
    assert ([n.host for n in report.nodes], report.node_rank) == (
        ["j-worker-0.default.svc", "j-worker-1.default.svc", "j-worker-2.default.svc"], 2)


def test_tfjobs_deprecated_master_is_the_chief() -> None:
    report = read({"TF_CONFIG": tfjob("j", {"master": 1, "worker": 1}, "worker", 0)})
    assert ([n.role for n in report.nodes], report.node_rank) == (["master", "worker"], 1)


def test_derives_pytorch_and_jax_and_keeps_the_tf_config() -> None:
    config = tfjob("mnist", {"chief": 1, "worker": 2, "ps": 1}, "worker", 0)
    derivation = derive({"TF_CONFIG": config, "KUBERNETES_SERVICE_HOST": "10.96.0.1"}, ALL)
    changes = derivation.changes()
    assert "TF_CONFIG" not in changes
    assert {k: changes[k] for k in ("MASTER_ADDR", "NODE_RANK", "PET_NNODES",
                                    "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")} == {
        "MASTER_ADDR": "mnist-chief-0.default.svc", "NODE_RANK": "1", "PET_NNODES": "3",
        "JAX_NUM_PROCESSES": "3", "JAX_PROCESS_ID": "1"}
    assert "TF_CONFIG kept as set by tf-config (derive-env derives none)" in derivation.notes
    assert [v.value for v in derivation.variables if v.name == "TF_CONFIG"] == []


@pytest.mark.parametrize("task", ["ps", "evaluator"])
def test_a_ps_or_evaluator_task_is_refused_with_the_reason(task: str) -> None:
    config = tfjob("j", {"chief": 1, "worker": 1, "ps": 1, "evaluator": 1}, task, 0)
    with pytest.raises(TopologyError) as info:
        read({"TF_CONFIG": config})
    assert str(info.value) == (
        f"TF_CONFIG={shorten(config)!r}: expected a chief or worker task: "
        f"{'an' if task == 'evaluator' else 'a'} {task} task is not a "
        "training node for PyTorch or JAX (parameter servers and evaluators are not in their "
        f"node layer); {RUN_TF}")


def test_the_sparse_tfjob_form_is_recognised_and_refused_with_the_reason() -> None:
    """convertClusterSpecToSparseClusterSpec: only this worker, the ps list; no chief."""
    config = json.dumps({"sparseCluster": {"worker": {"1": "j-worker-1.default.svc:2222"},
                                           "ps": ["j-ps-0.default.svc:2222"]},
                         "task": {"type": "worker", "index": 1}}, separators=(",", ":"))
    with pytest.raises(TopologyError) as info:
        read({"TF_CONFIG": config})
    assert str(info.value) == (
        f"TF_CONFIG={config!r}: expected a cluster that lists every task. This one is sparse "
        "(TFJob enableDynamicWorker: sparseCluster names only this worker, kubeflow/trainer "
        "tensorflow.go convertClusterSpecToSparseClusterSpec), so it states neither the node "
        f"count nor the chief. Set enableDynamicWorker: false, or {RUN_TF}")


def test_vertex_pools_0_and_1_are_the_nodes() -> None:
    spec = vertex([1, 2, 1, 1], 1, 1)
    report = read({"CLUSTER_SPEC": spec, "CLOUD_ML_JOB_ID": "42"}, "vertex")
    assert [n.host for n in report.nodes] == [
        "cmle-training-workerpool0-ab12-0", "cmle-training-workerpool1-ab12-0",
        "cmle-training-workerpool1-ab12-1"]
    assert (report.node_rank, report.preset, report.master_port) == (2, frozenset(), None)
    with pytest.raises(TopologyError, match="a ps task is not a training node"):
        read({"CLUSTER_SPEC": vertex([1, 2, 1], 2, 0), "CLOUD_ML_JOB_ID": "42"}, "vertex")


def test_vertex_pytorch_variables_are_node_values_checked() -> None:
    env = {"CLUSTER_SPEC": vertex([1, 2], 1, 0), "CLOUD_ML_JOB_ID": "42", "RANK": "1",
           "WORLD_SIZE": "3", "MASTER_ADDR": "cmle-training-workerpool0-ab12-0",
           "MASTER_PORT": "3333"}
    report = read(env, "vertex")
    assert (report.master_port, report.preset) == (3333, frozenset(
        {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}))
    with pytest.raises(TopologyError) as info:
        read({**env, "RANK": "2"}, "vertex")
    assert str(info.value) == (
        "RANK='2': expected '1': Vertex AI sets it per node from CLUSTER_SPEC (node 1 of 3, "
        "master cmle-training-workerpool0-ab12-0); it is not Vertex AI's, unset it")


def test_vertex_wins_over_its_own_tf_config() -> None:
    environ = {"CLUSTER_SPEC": vertex([1, 1], 1, 0), "CLOUD_ML_JOB_ID": "42",
               "TF_CONFIG": tfjob("x", {"chief": 1, "worker": 1}, "worker", 0)}
    assert [s.name for s in seen_sources(environ)] == ["vertex"]


@pytest.mark.parametrize(("value", "expected"), [
    ("{}", "a TF_CONFIG, JSON"),
    ("not json", "a TF_CONFIG, JSON"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": true}}',
     "a TF_CONFIG, JSON"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}',
     "a task index below the 1 task(s) of type 'worker' in its cluster, not 1"),
    ('{"cluster": {"chief": ["a:1", "b:1"]}, "task": {"type": "chief", "index": 0}}',
     "at most one chief (or master) task: node rank 0, the master"),
    ('{"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0}}',
     "a chief or worker task: a ps task"),
    ('{"cluster": {"trainer": ["a:1"]}, "task": {"type": "trainer", "index": 0}}',
     "task types chief, master, worker, ps, evaluator only, not trainer"),
    ('{"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}}',
     "every task as host:port, not 'a' (a host)"),
    ('{"cluster": {"worker": ["[::1]:x"]}, "task": {"type": "worker", "index": 0}}',
     "every task as host:port, not '[::1]:x' (a port number)"),
])
def test_malformed(value: str, expected: str) -> None:
    with pytest.raises(TopologyError) as info:
        read({"TF_CONFIG": value})
    assert str(info.value).startswith(f"TF_CONFIG={value!r}: expected {expected}")


def test_ipv6_hosts() -> None:
    value = '{"cluster": {"worker": ["[fd00::1]:2222", "[fd00::2]:2222"]}, ' \
            '"task": {"type": "worker", "index": 1}}'
    assert [n.host for n in read({"TF_CONFIG": value}).nodes] == ["fd00::1", "fd00::2"]


# -- properties ---------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(chief=st.booleans(), workers=st.integers(0, 12), ps=st.integers(0, 3),
       frameworks=st.sampled_from(["pytorch", "jax", "tensorflow", "pytorch,jax"]))
def test_every_training_task_derives_one_job(chief: bool, workers: int, ps: int,
                                            frameworks: str) -> None:
    if not chief and not workers:
        workers = 1
    replicas = {"chief": int(chief), "worker": workers, "ps": ps}
    tasks = [("chief", 0)] * chief + [("worker", i) for i in range(workers)]
    derivations = [derive({"TF_CONFIG": tfjob("j", replicas, t, i)},
                          {PREFIX + "frameworks": frameworks}) for t, i in tasks]
    topologies = [d.topology for d in derivations]
    assert [t.node_rank for t in topologies] == list(range(len(tasks)))
    assert {t.nodes[0].host for t in topologies} == {
        f"j-{'chief' if chief else 'worker'}-0.default.svc"}
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1
    assert len({tuple(v.value for v in d.variables if v.name.endswith("PORT"))
                for d in derivations}) == 1


DOCS = st.recursive(st.none() | st.booleans() | st.integers(-2, 5) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(
                        ["cluster", "task", "type", "index", "worker", "chief", "ps",
                         "sparseCluster", "workerpool0", "workerpool1", "0"]), inner,
                        max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(doc=DOCS, name=st.sampled_from(["tf-config", "vertex"]))
def test_arbitrary_documents_give_a_report_or_a_topology_error(doc: object, name: str) -> None:
    variable = "TF_CONFIG" if name == "tf-config" else "CLUSTER_SPEC"
    try:
        report = read({variable: json.dumps(doc), "CLOUD_ML_JOB_ID": "1"}, name)
    except TopologyError as exc:
        assert str(exc).startswith(variable + "=")
        return
    assert 0 <= report.node_rank < len(report.nodes)


# kubeflow/trainer (v1) pkg/apis/kubeflow.org/v1/tensorflow_types.go TFJobSpec and
# common_types.go ReplicaSpec: their json tags; replica types TFJobReplicaType*.
TFJOB_SPEC = {"runPolicy", "successPolicy", "tfReplicaSpecs", "enableDynamicWorker"}
REPLICA_SPEC = {"replicas", "template", "restartPolicy"}
REPLICA_TYPES = {"PS", "Worker", "Chief", "Master", "Evaluator"}


def test_the_docs_manifest_names_only_the_apis_fields() -> None:
    found = manifest("TFJob")
    assert found["apiVersion"] == "kubeflow.org/v1"
    assert set(found["spec"]) <= TFJOB_SPEC
    assert set(found["spec"]["tfReplicaSpecs"]) <= REPLICA_TYPES
    assert all(set(spec) <= REPLICA_SPEC for spec in found["spec"]["tfReplicaSpecs"].values())


@settings(max_examples=40, deadline=None)
@given(workers=st.integers(0, 10), servers=st.integers(0, 2), evaluators=st.integers(0, 1),
       torch=st.booleans())
def test_every_vertex_training_replica_derives_one_job(workers: int, servers: int,
                                                       evaluators: int, torch: bool) -> None:
    """Pools 0 and 1 are the nodes, every replica of them agrees; pools 2 and 3 refused."""
    pools = [1, workers, servers, evaluators]
    replicas = [(0, 0)] + [(1, i) for i in range(workers)]
    derivations = []
    for rank, (pool, index) in enumerate(replicas):
        env = {"CLUSTER_SPEC": vertex(pools, pool, index), "CLOUD_ML_JOB_ID": "7"}
        if torch:  # Vertex AI's PyTorch containers: node values
            env.update(MASTER_ADDR="cmle-training-workerpool0-ab12-0", MASTER_PORT="3333",
                       RANK=str(rank), WORLD_SIZE=str(len(replicas)))
        derivations.append(derive(env, {PREFIX + "frameworks": "pytorch,jax"}))
    assert [d.topology.node_rank for d in derivations] == list(range(len(replicas)))
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1
    for pool, count in ((2, servers), (3, evaluators)):
        for index in range(count):
            with pytest.raises(TopologyError, match="is not a training node"):
                derive({"CLUSTER_SPEC": vertex(pools, pool, index), "CLOUD_ML_JOB_ID": "7"},
                       {PREFIX + "frameworks": "pytorch"})


def torchrun_worker(node: int, local: int, nodes: int, per_node: int, master: str) -> dict:
    """What torchrun's agent (static rendezvous, ``--nnodes=$WORLD_SIZE --node-rank=$RANK
    --master-addr=$MASTER_ADDR``) sets for a worker: the variables of the recorded
    ``torchrun-static`` workers, over the replica's own (torch/distributed/elastic/agent/
    server/local_elastic_agent.py, ``_start_workers``)."""
    rank = node * per_node + local
    return {"TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_USE_AGENT_STORE": "True",
            "RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": str(nodes * per_node),
            "LOCAL_WORLD_SIZE": str(per_node), "GROUP_RANK": str(node),
            "GROUP_WORLD_SIZE": str(nodes), "ROLE_RANK": str(rank), "ROLE_NAME": "default",
            "ROLE_WORLD_SIZE": str(nodes * per_node), "MASTER_ADDR": master,
            "MASTER_PORT": "3333"}


def test_a_torchrun_worker_inside_a_vertex_replica_is_read_not_refused() -> None:
    """torchrun started in every replica from Vertex AI's node values overwrote RANK (the
    node's index) with its global rank: the worker is torchrun's process inside the cluster
    spec's node layer. Before: refused, ``RANK='3': expected '1': Vertex AI sets it per
    node from CLUSTER_SPEC ...; it is not Vertex AI's, unset it``."""
    master = "cmle-training-workerpool0-ab12-0"
    replicas = [(0, 0), (1, 0), (1, 1)]
    seen = []
    for node, (pool, index) in enumerate(replicas):
        for local in range(2):
            env = {"CLUSTER_SPEC": vertex([1, 2], pool, index), "CLOUD_ML_JOB_ID": "42",
                   **torchrun_worker(node, local, 3, 2, master)}
            derivation = derive(env, {PREFIX + "frameworks": "pytorch"})
            values = {v.name: v.value for v in derivation.variables}
            seen.append((values["RANK"], values["NODE_RANK"], values["MASTER_ADDR"]))
            assert [s.name for s in seen_sources(env)] == ["torchrun", "vertex"]
    assert seen == [(str(r), str(r // 2), master) for r in range(6)]

