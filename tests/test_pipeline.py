"""pipeline.derive: environment + labels -> derivation, end to end but pure; pipeline.host_list:
the same inputs -> what the host formats print."""

from __future__ import annotations

from pathlib import Path

import pytest

from derive_env.errors import LabelError, TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import Derivation, derive, host_list
from derive_env.topology import Inputs

ALL = {PREFIX + "frameworks": "pytorch,tensorflow,jax", "maintainer": "someone"}
HOSTS_ORDER = ["sub2", "main1", "sub1"]  # as a database query may return them
TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize("labels", [
    {},
    {"maintainer": "me", "ai.backend.kernelspec": "1"},
    {PREFIX + "master-port": "23456"},            # other labels, but no opt-in
    {PREFIX + "master-port": "not-a-port"},       # not validated when not opted in
])
def test_not_opted_in(backendai_env, labels) -> None:
    assert derive(backendai_env(HOSTS_ORDER, "sub1"), labels) is None


def test_derive_takes_the_inputs_fields_by_keyword(backendai_env) -> None:
    """``source`` is the ``choice`` field; another keyword is no field of the inputs."""
    env = backendai_env(["main1", "sub1"], "sub1")
    labels = {PREFIX + "frameworks": "pytorch"}
    derivation = derive(env, labels, None, source="none", fresh_run_id="abc")
    assert derivation is not None
    assert (derivation.topology.num_nodes, derivation.changes()["DERIVE_ENV_RUN_ID"]) == (1, "abc")
    with pytest.raises(TypeError):
        derive(env, labels, None, choise="none")


def test_derive_takes_the_field_name_choice_as_source(backendai_env) -> None:
    env = backendai_env(["main1", "sub1"], "sub1")
    labels = {PREFIX + "frameworks": "pytorch"}
    derivation = derive(env, labels, None, choice="none", fresh_run_id="abc")
    assert derivation is not None
    assert derivation.topology.num_nodes == 1  # Backend.AI's two nodes without the choice
    assert derive(env, labels, None, source="none", fresh_run_id="abc") == derivation
    with pytest.raises(TypeError, match=r"^derive\(\) got both source= and choice= \(one "
                                        r"field\): give source=$"):
        derive(env, labels, None, source="none", choice="auto")


def test_not_opted_in_ignores_broken_cluster_variables() -> None:
    broken = {"BACKENDAI_CLUSTER_SIZE": "banana", "MASTER_PORT": "nope"}
    assert derive(broken, {}) is None


def expected_changes(host: str, rank: int) -> dict[str, str]:
    return {
        "MASTER_ADDR": "main1",
        "MASTER_PORT": "29500",
        "NODE_RANK": str(rank),
        "PET_NNODES": "3",
        "PET_NODE_RANK": str(rank),
        "PET_MASTER_ADDR": "main1",
        "PET_MASTER_PORT": "29500",
        "PET_NPROC_PER_NODE": "2",
        "TF_CONFIG": (
            '{"cluster":{"worker":["main1:2222","sub1:2222","sub2:2222"]},'
            f'"task":{{"type":"worker","index":{rank}}}}}'
        ),
        "JAX_COORDINATOR_ADDRESS": "main1:1234",
        "JAX_NUM_PROCESSES": "3",
        "JAX_PROCESS_ID": str(rank),
        "JAX_LOCAL_DEVICE_IDS": "0,1",  # the one JAX process of a node: all its GPUs
        "DERIVE_ENV_RUN_ID": "4710a43c645d3cb2",  # session sess-0123: one id on every node
    }


@pytest.mark.parametrize(("host", "rank"), [("main1", 0), ("sub1", 1), ("sub2", 2)])
def test_three_node_session(backendai_env, host: str, rank: int) -> None:
    env = {**backendai_env(HOSTS_ORDER, host), "GPU_COUNT": "2", "PATH": "/usr/bin",
           "HOME": "/home/work"}
    derivation = derive(env, ALL)
    assert isinstance(derivation, Derivation)
    assert derivation.changes() == expected_changes(host, rank)
    assert list(derivation.changes()) == list(expected_changes(host, rank))  # framework order
    assert derivation.topology.node_rank == rank
    assert derivation.topology.this_node.host == host
    assert derivation.policy.frameworks == ("pytorch", "tensorflow", "jax")
    assert derivation.warnings == ()
    assert not any(v.kept for v in derivation.variables)


def test_three_node_session_every_container_agrees(backendai_env) -> None:
    orders = [["sub2", "main1", "sub1"], ["main1", "sub1", "sub2"], ["sub1", "sub2", "main1"]]
    results = [derive(backendai_env(order, host), ALL)
               for order, host in zip(orders, ["sub2", "main1", "sub1"], strict=True)]
    ranks = sorted(int(r.changes()["NODE_RANK"]) for r in results if r)
    assert ranks == [0, 1, 2]
    assert {r.changes()["MASTER_ADDR"] for r in results if r} == {"main1"}


def test_framework_order_follows_table_not_label(backendai_env) -> None:
    labels = {PREFIX + "frameworks": "jax,tensorflow,pytorch"}
    derivation = derive(backendai_env(HOSTS_ORDER, "sub1"), labels)
    assert derivation is not None
    frameworks = [v.framework for v in derivation.variables]
    assert frameworks.pop() == "derive-env"  # the run id, after every framework's
    assert frameworks == sorted(frameworks, key=["pytorch", "tensorflow", "jax"].index)


def test_tensorflow_only(backendai_env) -> None:
    derivation = derive(backendai_env(HOSTS_ORDER, "main1"), {PREFIX + "frameworks": "tensorflow"})
    assert derivation is not None
    assert list(derivation.changes()) == ["TF_CONFIG", "DERIVE_ENV_RUN_ID"]


def test_bad_label_is_label_error(backendai_env) -> None:
    with pytest.raises(LabelError):
        derive(backendai_env(HOSTS_ORDER, "sub1"), {**ALL, PREFIX + "master-port": "0"})


def test_bad_topology_is_topology_error(backendai_env) -> None:
    # sub1 of main:1,sub:2 is 0 (sub listed first) or 1 (main first), never 2
    env = {**backendai_env(HOSTS_ORDER, "sub1"), "BACKENDAI_CLUSTER_LOCAL_RANK": "2"}
    with pytest.raises(TopologyError):
        derive(env, ALL)


def test_a_cluster_template_group_order_starts_without_a_warning(backendai_env) -> None:
    """Contract section 5 (revised, issue 15 item 6): LOCAL_RANK of another group order is an
    --explain note only; every container of a valid session starts without a message."""
    env = backendai_env(HOSTS_ORDER, "sub1", group_order=["sub", "main"])
    assert env["BACKENDAI_CLUSTER_LOCAL_RANK"] == "0"
    derivation = derive(env, ALL)
    assert derivation is not None
    assert derivation.changes()["NODE_RANK"] == "1"
    assert (derivation.topology.warnings, derivation.warnings) == ((), ())
    assert derivation.topology.notes[-1].startswith("BACKENDAI_CLUSTER_LOCAL_RANK=0: ")


def test_labels_checked_before_topology(backendai_env) -> None:
    env = {**backendai_env(HOSTS_ORDER, "sub1"), "BACKENDAI_CLUSTER_SIZE": "x"}
    with pytest.raises(LabelError):
        derive(env, {**ALL, PREFIX + "typo": "1"})


def test_inputs_not_modified(backendai_env) -> None:
    env = backendai_env(HOSTS_ORDER, "sub1")
    labels = dict(ALL)
    before = (dict(env), dict(labels))
    derive(env, labels)
    assert (env, labels) == before


def test_tensorflow_only_image_ignores_a_malformed_master_addr(backendai_env) -> None:
    """MASTER_ADDR is PyTorch's and JAX's input; a TensorFlow-only image must not fail on it."""
    environ = {**backendai_env(["sub1", "main1"], "sub1"), "MASTER_ADDR": "not a host"}
    labels = {PREFIX + "frameworks": "tensorflow"}
    result = derive(environ, labels)
    assert result is not None
    assert result.changes() == {
        "TF_CONFIG": '{"cluster":{"worker":["main1:2222","sub1:2222"]},'
                     '"task":{"type":"worker","index":1}}',
        "DERIVE_ENV_RUN_ID": "4710a43c645d3cb2",
    }
    with pytest.raises(TopologyError, match="MASTER_ADDR='not a host'"):
        derive(environ, {PREFIX + "frameworks": "tensorflow,pytorch"})


# --- host_list: what the host formats print ---------------------------------------------------

NPROC = PREFIX + "nproc-per-node"


def test_host_list_not_opted_in_reads_no_label(backendai_env) -> None:
    """The host formats set nothing: an image that did not opt in gets the topology, and its
    labels are not read for N (not even a malformed one: the command line reports stray labels)."""
    env = {**backendai_env(HOSTS_ORDER, "sub1"), "PET_NPROC_PER_NODE": "3"}
    topology, nproc, opted_in = host_list(Inputs(env, {NPROC: "zero"}))
    assert [node.host for node in topology.nodes] == ["main1", "sub1", "sub2"]
    assert (nproc, opted_in) == (None, False)


@pytest.mark.parametrize(("label", "user", "nproc"), [
    (None, None, None),
    ("2", None, 2),
    ("2", "3", 3),     # a user-set value wins over the label, as the merge keeps it
    (None, "3", 3),
    ("2", " 3 ", 3),   # compared as data, as torchrun's int() reads it
    ("2", "auto", 2),  # torchrun's words say no number: the label
    ("2", "0", 2),
    ("2", "", 2),      # empty counts as unset
    (None, "gpu", None),
])
def test_host_list_nproc_is_the_merged_pet_nproc_per_node(
    backendai_env, label: str | None, user: str | None, nproc: int | None
) -> None:
    env = backendai_env(HOSTS_ORDER, "sub2")
    if user is not None:
        env["PET_NPROC_PER_NODE"] = user
    labels = {PREFIX + "frameworks": "pytorch", **({NPROC: label} if label else {})}
    topology, got, opted_in = host_list(Inputs(env, labels))
    assert (got, opted_in) == (nproc, True)
    assert topology.num_nodes == 3
    if user == "0":  # torchrun refuses it (issue 15, item 7): the derivation says so
        with pytest.raises(TopologyError, match="PET_NPROC_PER_NODE='0': expected"):
            derive(env, labels)
        return
    # The same number as the derivation's PET_NPROC_PER_NODE, whenever that is one >= 1.
    derived = {v.name: v.value for v in derive(env, labels).variables}
    value = derived.get("PET_NPROC_PER_NODE", "").strip()
    if value.isdigit() and int(value) >= 1:
        assert int(value) == nproc


def test_host_list_takes_the_user_value_for_an_image_without_pytorch(backendai_env) -> None:
    """A session-wide PET_NPROC_PER_NODE is what torchrun starts, whatever the image derives."""
    env = {**backendai_env(HOSTS_ORDER, "sub2"), "PET_NPROC_PER_NODE": "4"}
    assert host_list(Inputs(env, {PREFIX + "frameworks": "tensorflow", NPROC: "2"}))[1] == 4


def test_host_list_gpu_count_is_left_to_the_renderer(backendai_env) -> None:
    """Without the label the GPU count is not N here: a launcher's own counts per node come
    first (render_hosts), and the topology carries the GPU count."""
    env = {**backendai_env(HOSTS_ORDER, "sub2"), "GPU_COUNT": "4"}
    topology, nproc, _ = host_list(Inputs(env, {PREFIX + "frameworks": "pytorch"}))
    assert (nproc, topology.gpus_per_node) == (None, 4)


def test_host_list_checks_labels_before_topology(backendai_env) -> None:
    env = {**backendai_env(HOSTS_ORDER, "sub1"), "BACKENDAI_CLUSTER_SIZE": "x"}
    with pytest.raises(LabelError):
        host_list(Inputs(env, {**ALL, NPROC: "0"}))
    with pytest.raises(TopologyError):
        host_list(Inputs(env, ALL))


def test_host_list_of_a_batch_script_where_derive_stops() -> None:
    """A batch script of several nodes: derive() stops (only srun starts the other nodes),
    the host list is the allocation's (``hosts_only``)."""
    from support.recorded import load_fixture

    _, env = load_fixture(TESTS / "fixtures/recorded/sbatch-3node/batch.env")
    labels = {PREFIX + "frameworks": "pytorch", NPROC: "2"}
    with pytest.raises(TopologyError):
        derive(dict(env), labels)
    topology, nproc, opted_in = host_list(Inputs(dict(env), labels))
    assert [node.host for node in topology.nodes] == ["gpu-a100-09", "gpu-a100-10",
                                                        "gpu-a100-11"]
    assert (nproc, opted_in) == (2, True)


def test_host_list_inputs_not_modified(backendai_env) -> None:
    env = {**backendai_env(HOSTS_ORDER, "sub1"), "PET_NPROC_PER_NODE": "3"}
    labels = {**ALL, NPROC: "2"}
    before = (dict(env), dict(labels))
    host_list(Inputs(env, labels))
    assert (env, labels) == before
