"""TensorFlow's TF_CONFIG (contract section 6), checked against TensorFlow's own resolver."""

from __future__ import annotations

import importlib
import json
import os

import pytest

from derive_env.errors import LabelError
from derive_env.frameworks import jax, pytorch, tensorflow
from derive_env.frameworks.context import Context
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.policy import ImagePolicy
from derive_env.topology import ClusterTopology, Inputs, Node

TF = {PREFIX + "frameworks": "tensorflow"}
ROLES = PREFIX + "tensorflow-roles"
ROLES_LABEL = "label ai.backend.distributed.tensorflow-roles"


def tf_config_of(environ, labels) -> str | None:
    derivation = derive(environ, labels)
    assert derivation is not None
    values = {v.name: v.value for v in derivation.variables}
    return values.get("TF_CONFIG")


def label_error(environ, labels) -> str:
    with pytest.raises(LabelError) as info:
        derive(environ, labels)
    assert info.value.exit_code == 4
    return str(info.value)


# --- layouts: the exact JSON ----------------------------------------------------------------

THREE = ["sub2", "main1", "sub1"]


@pytest.mark.parametrize(("host", "index"), [("main1", 0), ("sub1", 1), ("sub2", 2)])
def test_default_all_workers(backendai_env, host: str, index: int) -> None:
    assert tf_config_of(backendai_env(THREE, host), TF) == (
        '{"cluster":{"worker":["main1:2222","sub1:2222","sub2:2222"]},'
        f'"task":{{"type":"worker","index":{index}}}}}'
    )


def test_tf_config_is_compact_json_with_integer_index(backendai_env) -> None:
    text = tf_config_of(backendai_env(THREE, "sub1"), TF)
    assert text is not None
    assert " " not in text and "\n" not in text
    assert json.loads(text)["task"]["index"] == 1
    assert isinstance(json.loads(text)["task"]["index"], int)


def test_tensorflow_port_label(backendai_env) -> None:
    text = tf_config_of(backendai_env(THREE, "main1"), {**TF, PREFIX + "tensorflow-port": "3333"})
    assert text == (
        '{"cluster":{"worker":["main1:3333","sub1:3333","sub2:3333"]},'
        '"task":{"type":"worker","index":0}}'
    )


@pytest.mark.parametrize(("host", "task"), [
    ("main1", '{"type":"chief","index":0}'),
    ("sub1", '{"type":"worker","index":0}'),
    ("sub2", '{"type":"worker","index":1}'),
])
def test_chief_and_workers(backendai_env, host: str, task: str) -> None:
    labels = {**TF, ROLES: "main:chief,sub:worker"}
    assert tf_config_of(backendai_env(THREE, host), labels) == (
        '{"cluster":{"chief":["main1:2222"],"worker":["sub1:2222","sub2:2222"]},'
        f'"task":{task}}}'
    )


PS_HOSTS = ["sub2", "ps2", "main1", "sub1", "ps1"]  # REPLICAS main:1,ps:2,sub:2


@pytest.mark.parametrize(("host", "task"), [
    ("main1", '{"type":"chief","index":0}'),
    ("ps1", '{"type":"ps","index":0}'),
    ("ps2", '{"type":"ps","index":1}'),
    ("sub1", '{"type":"worker","index":0}'),
    ("sub2", '{"type":"worker","index":1}'),
])
def test_chief_worker_ps(backendai_env, host: str, task: str) -> None:
    labels = {**TF, ROLES: "main:chief,sub:worker,ps:ps"}
    assert tf_config_of(backendai_env(PS_HOSTS, host), labels) == (
        '{"cluster":{"chief":["main1:2222"],"worker":["sub1:2222","sub2:2222"],'
        f'"ps":["ps1:2222","ps2:2222"]}},"task":{task}}}'
    )


EVAL_HOSTS = ["sub1", "eval1", "main1", "sub2"]  # canonical: main1, eval1, sub1, sub2


@pytest.mark.parametrize(("host", "task"), [
    ("main1", '{"type":"chief","index":0}'),
    ("eval1", '{"type":"evaluator","index":0}'),
    ("sub1", '{"type":"worker","index":0}'),
    ("sub2", '{"type":"worker","index":1}'),
])
def test_evaluator_left_out_of_every_cluster(backendai_env, host: str, task: str) -> None:
    labels = {**TF, ROLES: "main:chief,sub:worker,eval:evaluator"}
    assert tf_config_of(backendai_env(EVAL_HOSTS, host), labels) == (
        '{"cluster":{"chief":["main1:2222"],"worker":["sub1:2222","sub2:2222"]},'
        f'"task":{task}}}'
    )


def test_single_node_has_no_tf_config(backendai_env) -> None:
    derivation = derive(backendai_env(["main1"], "main1"), TF)
    assert derivation is not None
    assert [v.name for v in derivation.variables] == ["DERIVE_ENV_RUN_ID"]  # no TF_CONFIG
    assert "TF_CONFIG not set: a single node (TensorFlow trains locally)" in (
        derivation.notes)
    assert tf_config_of({}, TF) is None


def test_explain_notes_map_roles_to_tasks(backendai_env) -> None:
    derivation = derive(backendai_env(THREE, "sub1"), {**TF, ROLES: "main:chief,sub:worker"})
    assert derivation is not None
    assert list(derivation.notes) == [
        "TensorFlow roles -> tasks:",
        "  main: main1 -> chief 0",
        "  sub: sub1 -> worker 0  <- this container",
        "  sub: sub2 -> worker 1",
    ]


# --- role mapping errors --------------------------------------------------------------------


def test_at_most_one_chief(backendai_env) -> None:
    labels = {**TF, ROLES: "main:worker,sub:chief"}
    assert label_error(backendai_env(THREE, "main1"), labels) == (
        f"{ROLES_LABEL}='main:worker,sub:chief': expected at most one chief node "
        "(TensorFlow rejects more); 2 nodes map to chief: sub1, sub2"
    )


def test_at_most_one_evaluator(backendai_env) -> None:
    labels = {**TF, ROLES: "main:chief,sub:evaluator"}
    assert label_error(backendai_env(THREE, "sub1"), labels) == (
        f"{ROLES_LABEL}='main:chief,sub:evaluator': expected at most one evaluator node "
        "(TensorFlow rejects more); 2 nodes map to evaluator: sub1, sub2"
    )


def test_many_chiefs_listing_is_shortened(backendai_env) -> None:
    hosts = ["main1"] + [f"sub{i}" for i in range(1, 8)]
    labels = {**TF, ROLES: "main:worker,sub:chief"}
    assert label_error(backendai_env(hosts, "main1"), labels) == (
        f"{ROLES_LABEL}='main:worker,sub:chief': expected at most one chief node "
        "(TensorFlow rejects more); 7 nodes map to chief: sub1, sub2, sub3, sub4, sub5, ..."
    )


def test_unmapped_role(backendai_env) -> None:
    labels = {**TF, ROLES: "main:chief,sub:worker"}
    assert label_error(backendai_env(PS_HOSTS, "main1"), labels) == (
        f"{ROLES_LABEL}='main:chief,sub:worker': expected a task type for every role of the "
        "Backend.AI session; role 'ps' (host ps1) has none. Map it, e.g. "
        "DERIVE_ENV_TENSORFLOW_ROLES=main:chief,sub:worker,ps:worker (or the label "
        "ai.backend.distributed.tensorflow-roles=main:chief,sub:worker,ps:worker); the role * "
        "maps every role not listed (main:chief,sub:worker,*:worker)"
    )


#: A cluster template whose roles are ``worker`` and ``a100`` (issue 15): REPLICAS
#: main:1,worker:2,a100:1; canonical order main1, a1001, worker1, worker2.
TEMPLATE = ["worker2", "a1001", "main1", "worker1"]
REPLICAS = "a100:1,main:1,worker:2"


@pytest.mark.parametrize(("host", "task"), [
    ("main1", ("chief", 0)), ("a1001", ("worker", 0)), ("worker1", ("worker", 1)),
    ("worker2", ("worker", 2)),
])
def test_star_maps_every_role_not_listed(backendai_env, host: str, task) -> None:
    """main:chief,*:worker: the template's roles worker and a100 are workers."""
    labels = {**TF, ROLES: "main:chief,*:worker"}
    config = json.loads(tf_config_of(backendai_env(TEMPLATE, host, REPLICAS), labels) or "")
    assert config["cluster"] == {"chief": ["main1:2222"],
                                 "worker": ["a1001:2222", "worker1:2222", "worker2:2222"]}
    assert (config["task"]["type"], config["task"]["index"]) == task


def test_a_listed_role_wins_over_star(backendai_env) -> None:
    labels = {**TF, ROLES: "*:worker,main:chief,a100:evaluator"}
    config = json.loads(tf_config_of(backendai_env(TEMPLATE, "a1001", REPLICAS), labels)
                        or "")
    assert config["task"] == {"type": "evaluator", "index": 0}
    assert config["cluster"] == {"chief": ["main1:2222"],
                                 "worker": ["worker1:2222", "worker2:2222"]}


def test_no_chief_or_worker(backendai_env) -> None:
    labels = {**TF, ROLES: "main:ps,sub:ps"}
    assert label_error(backendai_env(THREE, "main1"), labels) == (
        f"{ROLES_LABEL}='main:ps,sub:ps': expected at least one node mapped to chief or worker"
    )


def test_role_errors_only_matter_with_more_than_one_node(backendai_env) -> None:
    assert tf_config_of(backendai_env(["main1"], "main1"), {**TF, ROLES: "sub:worker"}) is None


# --- IPv6 -----------------------------------------------------------------------------------

V6 = ("2001:db8::1", "2001:db8::2", "2001:db8::3")


def v6_context(node_rank: int, labels: dict[str, str], environ=None) -> Context:
    topo = ClusterTopology(
        source="test",
        nodes=(Node(host=V6[0], role="main", index=1), Node(host=V6[1], role="sub", index=1),
               Node(host=V6[2], role="sub", index=2)),
        node_rank=node_rank,
    )
    policy = ImagePolicy.from_labels({PREFIX + "frameworks": "pytorch,tensorflow,jax", **labels})
    environ = environ or {}
    return Context(topo, policy, Inputs(environ, {}))


def values(module, ctx: Context) -> dict[str, str]:
    return {v.name: v.value for v in module.derive(ctx).variables}


def test_ipv6_hosts_bracketed_in_tf_config() -> None:
    ctx = v6_context(1, {})
    assert values(tensorflow, ctx)["TF_CONFIG"] == (
        '{"cluster":{"worker":["[2001:db8::1]:2222","[2001:db8::2]:2222",'
        '"[2001:db8::3]:2222"]},"task":{"type":"worker","index":1}}'
    )


def test_ipv6_chief_layout() -> None:
    ctx = v6_context(0, {ROLES: "main:chief,sub:worker"})
    assert json.loads(values(tensorflow, ctx)["TF_CONFIG"]) == {
        "cluster": {"chief": ["[2001:db8::1]:2222"],
                    "worker": ["[2001:db8::2]:2222", "[2001:db8::3]:2222"]},
        "task": {"type": "chief", "index": 0},
    }


def test_ipv6_master_addr_bare_and_jax_bracketed() -> None:
    ctx = v6_context(2, {})
    got = values(pytorch, ctx)
    assert got["MASTER_ADDR"] == "2001:db8::1"
    assert got["PET_MASTER_ADDR"] == "2001:db8::1"
    assert values(jax, ctx)["JAX_COORDINATOR_ADDRESS"] == "[2001:db8::1]:1234"


def test_mixed_ipv4_ipv6_and_names() -> None:
    topo = ClusterTopology(
        source="test",
        nodes=(Node(host="10.0.0.1"), Node(host="fd00::2"), Node(host="node3.example")),
        node_rank=2,
    )
    policy = ImagePolicy.from_labels(TF)
    ctx = Context(topo, policy, Inputs({}, {}))
    assert values(tensorflow, ctx)["TF_CONFIG"] == (
        '{"cluster":{"worker":["10.0.0.1:2222","[fd00::2]:2222","node3.example:2222"]},'
        '"task":{"type":"worker","index":2}}'
    )


def test_user_ipv6_master_addr_bare_in_pytorch_bracketed_in_jax() -> None:
    ctx = v6_context(1, {}, environ={"MASTER_ADDR": "2001:db8::99"})
    assert values(pytorch, ctx)["PET_MASTER_ADDR"] == "2001:db8::99"
    assert values(jax, ctx)["JAX_COORDINATOR_ADDRESS"] == "[2001:db8::99]:1234"


# --- TensorFlow's own resolver --------------------------------------------------------------


@pytest.fixture(scope="module")
def tf():
    """TensorFlow, imported once; under CI=true its absence is a failure, not a skip."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")  # quiet, while this module runs
        if os.environ.get("CI", "").lower() == "true":
            module = importlib.import_module("tensorflow")
        else:
            module = pytest.importorskip("tensorflow")
        yield module


def expected_accelerators(tf) -> dict[str, int]:
    """What the resolver reports with no TF_CONFIG influence: this machine's accelerators."""
    counts: dict[str, int] = {}
    for device in tf.config.list_logical_devices():
        if device.device_type not in ("CPU", "XLA_CPU"):
            counts[device.device_type] = counts.get(device.device_type, 0) + 1
    return counts


def resolve(tf, monkeypatch, text: str):
    monkeypatch.setenv("TF_CONFIG", text)
    return tf.distribute.cluster_resolver.TFConfigClusterResolver()


CHIEF = ["main1:2222"]
WORKERS3 = ["main1:2222", "sub1:2222", "sub2:2222"]
WORKERS2 = ["sub1:2222", "sub2:2222"]
LAYOUTS = {
    "all-workers": (THREE, None, {"worker": WORKERS3},
                    {"main1": ("worker", 0), "sub1": ("worker", 1), "sub2": ("worker", 2)}),
    "chief+workers": (THREE, "main:chief,sub:worker", {"chief": CHIEF, "worker": WORKERS2},
                      {"main1": ("chief", 0), "sub1": ("worker", 0), "sub2": ("worker", 1)}),
    "chief+worker+ps": (PS_HOSTS, "main:chief,sub:worker,ps:ps",
                        {"chief": CHIEF, "worker": WORKERS2, "ps": ["ps1:2222", "ps2:2222"]},
                        {"main1": ("chief", 0), "ps1": ("ps", 0), "ps2": ("ps", 1),
                         "sub1": ("worker", 0), "sub2": ("worker", 1)}),
    "with-evaluator": (EVAL_HOSTS, "main:chief,sub:worker,eval:evaluator",
                       {"chief": CHIEF, "worker": WORKERS2},
                       {"main1": ("chief", 0), "eval1": ("evaluator", 0),
                        "sub1": ("worker", 0), "sub2": ("worker", 1)}),
}


@pytest.mark.frameworks
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_tf_config_resolver(tf, monkeypatch, backendai_env, layout: str) -> None:
    from tensorflow.python.distribute import multi_worker_util

    hosts, roles, cluster, tasks = LAYOUTS[layout]
    labels = {**TF, ROLES: roles} if roles else TF
    accelerators = expected_accelerators(tf)
    for host, (task_type, task_id) in tasks.items():
        text = tf_config_of(backendai_env(hosts, host), labels)
        assert text is not None
        resolver = resolve(tf, monkeypatch, text)
        assert resolver.cluster_spec().as_dict() == cluster
        assert resolver.task_type == task_type
        assert resolver.task_id == task_id
        assert resolver.rpc_layer is None
        # TensorFlow's own cluster validation (raises on a bad spec), and who is chief.
        chief = task_type in ("chief", "evaluator") or (
            "chief" not in cluster and task_type == "worker" and task_id == 0)
        assert multi_worker_util.is_chief(resolver.cluster_spec(), task_type, task_id) is chief
        if task_type != "evaluator":
            # The evaluator is outside the cluster, so TF cannot look up its own master.
            assert resolver.master() == cluster[task_type][task_id]
            assert dict(resolver.num_accelerators()) == accelerators


@pytest.mark.frameworks
def test_tf_config_resolver_ipv6(tf, monkeypatch) -> None:
    for rank in range(3):
        text = values(tensorflow, v6_context(rank, {}))["TF_CONFIG"]
        resolver = resolve(tf, monkeypatch, text)
        assert resolver.cluster_spec().as_dict() == {
            "worker": ["[2001:db8::1]:2222", "[2001:db8::2]:2222", "[2001:db8::3]:2222"]}
        assert (resolver.task_type, resolver.task_id) == ("worker", rank)
        assert resolver.master() == f"[{V6[rank]}]:2222"
        assert dict(resolver.num_accelerators()) == expected_accelerators(tf)


def test_roles_ending_in_digits_can_be_mapped(backendai_env) -> None:
    """A role the Backend.AI source accepts (``a100`` -> hosts ``a1001``, ``a1002``) is a role
    the tensorflow-roles label can map: one role rule for both (hosts.ROLE_NAME)."""
    labels = {PREFIX + "frameworks": "tensorflow", ROLES: "main:chief,a100:worker"}
    hosts = ["a1002", "main1", "a1001"]
    environ = backendai_env(hosts, "a1002", "a100:2,main:1")
    assert json.loads(tf_config_of(environ, labels)) == {
        "cluster": {"chief": ["main1:2222"], "worker": ["a1001:2222", "a1002:2222"]},
        "task": {"type": "worker", "index": 1},
    }


def test_no_host_list_is_not_fixed_by_a_master_address() -> None:
    """mpirun over SSH with MASTER_ADDR set: TF_CONFIG needs every host, so the message does
    not ask for MASTER_ADDR (it is set) and ends in one fix."""
    from derive_env.errors import TopologyError

    environ = {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "1",
               "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
               "MASTER_ADDR": "a"}
    with pytest.raises(TopologyError) as info:
        derive(environ, {PREFIX + "frameworks": "tensorflow"})
    assert str(info.value) == (
        "TF_CONFIG cannot be built: it lists every task's host:port, and no source states the "
        "hosts of every node. Run the job under a launcher that states every node's processes "
        "(srun: SLURM_STEP_TASKS_PER_NODE), or set TF_CONFIG yourself")
