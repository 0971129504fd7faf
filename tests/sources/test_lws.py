"""The LeaderWorkerSet source (sources/managers/lws.py): one group of a LeaderWorkerSet as one job.

No recorded environment exists here (no Kubernetes on this machine): the pods' variables are
TYPED from the controller's code and its own tests (kubernetes-sigs/lws@060ab4d):

- ``pkg/utils/pod/pod_utils_test.go`` ``TestAddLWSVariables``: the expected
  ``LWS_LEADER_ADDRESS`` / ``LWS_GROUP_SIZE`` / ``LWS_WORKER_INDEX`` of pods made by
  ``wrappers.MakePodWithLabels("test-sample", group, worker, namespace, size)``;
- ``pkg/utils/pod/pod_utils.go`` ``AddLWSVariables`` (the address ``<lws>-<group>.<subdomain>.
  <namespace>``), ``pkg/webhooks/pod_webhook.go`` ``Default`` (subdomain = the leader pod's
  name under ``UniquePerReplica``), ``pkg/controllers/pod_controller.go``
  ``constructWorkerStatefulSetApplyConfiguration`` (workers ``<leader>-<i>``, the leader's
  service): the pods' hostnames.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.digest import digest_of, facts_of
from derive_env.errors import TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.sources import BY_NAME, seen_sources
from derive_env.sources.managers import lws
from derive_env.sources.report import Report
from derive_env.topology import nodes_of
from support.k8s import lws_pod as pod
from support.k8s import manifest

FIX = ("the LeaderWorkerSet controller sets it in every container (kubernetes-sigs/lws "
       "pkg/utils/pod/pod_utils.go, AddLWSVariables); do not set it in the template's env")
ALL = {PREFIX + "frameworks": "pytorch,tensorflow,jax"}


def read(environ: dict[str, str]) -> Report:
    return lws.read(environ, BY_NAME["lws"])


# pod_utils_test.go TestAddLWSVariables: "Leader pod", "Worker pod" (size 3, group 0) and
# "Leader pod, group 1" (size 2).
@pytest.mark.parametrize(("group", "worker", "size", "namespace"), [
    (0, 0, 3, "default"), (0, 1, 3, "default"), (1, 0, 2, "default"), (1, 1, 2, "lws")])
def test_the_controllers_own_pods(group: int, worker: int, size: int, namespace: str) -> None:
    leader = f"test-sample-{group}.test-sample.{namespace}"
    report = read(pod("test-sample", group, worker, size, namespace))
    assert report.nodes == nodes_of(
        [leader] + [f"test-sample-{group}-{i}.test-sample.{namespace}" for i in range(1, size)])
    assert (report.node_rank, report.master, report.job) == (
        worker, None, ("lws", leader, str(size)))
    assert report.inputs["node_rank"] == ("LWS_WORKER_INDEX",)


def test_unique_per_replica_workers_are_in_the_leaders_subdomain() -> None:
    """UniquePerReplica (pod_webhook.go): the leader's subdomain is its own name, and the
    worker StatefulSet's serviceName is the leader pod's (pod_controller.go)."""
    report = read(pod("vllm", 2, 3, 4, "serving", subdomain="vllm-2"))
    assert [n.host for n in report.nodes] == [
        "vllm-2.vllm-2.serving", "vllm-2-1.vllm-2.serving", "vllm-2-2.vllm-2.serving",
        "vllm-2-3.vllm-2.serving"]
    assert report.node_rank == 3


def test_derives_every_framework_from_the_group() -> None:
    changes = derive(pod("train", 0, 2, 3), ALL).changes()
    assert {k: changes[k] for k in ("MASTER_ADDR", "NODE_RANK", "PET_NNODES",
                                    "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")} == {
        "MASTER_ADDR": "train-0.train.default", "NODE_RANK": "2", "PET_NNODES": "3",
        "JAX_NUM_PROCESSES": "3", "JAX_PROCESS_ID": "2"}
    assert changes["TF_CONFIG"].startswith(
        '{"cluster":{"worker":["train-0.train.default:')
    assert changes["TF_CONFIG"].endswith('"task":{"type":"worker","index":2}}')


def test_a_hostname_of_63_characters_is_the_kubelets_cut() -> None:
    """A pod name of 64 characters: the hostname is its first 63 (pitfall 10)."""
    name = "a" * 58
    environ = pod(name, 0, 1, 2)  # pod name: 58 + "-0-1" = 62 characters
    assert read(environ).node_rank == 1
    long = pod(name + "bb", 0, 1, 2)  # 64 characters: cut to 63, then the trailing "-"
    long["HOSTNAME"] = name + "bb-0"  # kubelet: GeneratePodHostNameAndDomain
    assert read(long).node_rank == 1


def test_a_hostname_of_another_pod_is_an_error_naming_both() -> None:
    environ = {**pod("train", 0, 1, 3), "HOSTNAME": "train-0-2"}
    with pytest.raises(TopologyError) as info:
        read(environ)
    assert str(info.value) == (
        "HOSTNAME='train-0-2': expected 'train-0-1': a LeaderWorkerSet names worker "
        "LWS_WORKER_INDEX=1 of the group, <leader>-<index> (pod_webhook.go, pod_controller.go) "
        "after LWS_LEADER_ADDRESS='train-0.train.default'; the LWS_* variables here are "
        "another pod's or set by hand: remove them from the manifest, or choose the source "
        "(--source)")


def test_a_worker_reporting_index_0_is_caught_by_its_hostname() -> None:
    """kubernetes-sigs/lws#507: a worker saw LWS_WORKER_INDEX=0; it is not the leader."""
    environ = {**pod("train", 1, 2, 3), "LWS_WORKER_INDEX": "0"}
    with pytest.raises(TopologyError, match=r"^HOSTNAME='train-1-2': expected 'train-1': a "
                       r"LeaderWorkerSet names the leader \(LWS_WORKER_INDEX=0\)"):
        read(environ)


def test_without_hostname_no_cross_check() -> None:
    environ = pod("train", 0, 1, 2)
    del environ["HOSTNAME"]
    assert read(environ).node_rank == 1


@pytest.mark.parametrize(("changes", "message"), [
    # pod_utils_test.go "Worker pod, group 1": worker index 3 of a group of size 2 (the test's
    # pod is hand-made; a real group has none).
    ({"LWS_WORKER_INDEX": "3", "HOSTNAME": "test-sample-1-3"},
     f"LWS_WORKER_INDEX='3': expected a node rank below LWS_GROUP_SIZE='2': {FIX}"),
    ({"LWS_GROUP_SIZE": "0"}, "LWS_GROUP_SIZE='0': expected an integer >= 1 (the node count)"),
    ({"LWS_WORKER_INDEX": "-1"}, "LWS_WORKER_INDEX='-1': expected an integer >= 0 (the node rank)"),
    # LWS states no size limit (an int32): refused before 10^8 names are built
    ({"LWS_GROUP_SIZE": "100000000"}, "LWS_GROUP_SIZE='100000000': expected at most 65536 "
     "nodes (the largest job a manager is known to name: Slurm's MAX_SLURM_NODES); "
     f"{FIX}"),
    ({"LWS_LEADER_ADDRESS": "leader"},
     "LWS_LEADER_ADDRESS='leader': expected <lws>-<group>.<subdomain>.<namespace>, the leader "
     f"pod's DNS name (pod_utils.go, AddLWSVariables); {FIX}"),
    ({"LWS_LEADER_ADDRESS": "a b"},
     "LWS_LEADER_ADDRESS='a b': expected a host name (letters, digits, '-' and '.') or an IP "
     f"address; {FIX}"),
])
def test_malformed(changes: dict[str, str], message: str) -> None:
    with pytest.raises(TopologyError) as info:
        read({**pod("test-sample", 1, 1, 2), **changes})
    assert str(info.value) == message


def test_seen_only_with_its_three_variables() -> None:
    environ = pod("t", 0, 0, 2)
    assert [s.name for s in seen_sources(environ)] == ["lws"]
    del environ["LWS_WORKER_INDEX"]
    assert seen_sources(environ) == []


# -- properties ---------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 24), group=st.integers(0, 99),
       frameworks=st.sampled_from(["pytorch", "jax", "tensorflow", "pytorch,jax"]),
       unique=st.booleans())
def test_every_pod_of_a_group_derives_one_job(size: int, group: int, frameworks: str,
                                              unique: bool) -> None:
    derivations = [derive(pod("set", group, i, size, "ns", f"set-{group}" if unique else None),
                          {PREFIX + "frameworks": frameworks}) for i in range(size)]
    topologies = [d.topology for d in derivations]
    assert [t.node_rank for t in topologies] == list(range(size))
    assert {t.nodes[0].host for t in topologies} == {
        f"set-{group}.{f'set-{group}' if unique else 'set'}.ns"}
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1
    ports = {tuple(v.value for v in d.variables if v.name.endswith("PORT")) for d in derivations}
    assert len(ports) == 1


TEXT = st.text(st.characters(codec="utf-8"), max_size=16) | st.sampled_from(
    ["0", "1", "2", "3", "-1", "01", "t-0.t.ns", "t-0", "t-0-1", "t-x.t.ns", "::1", ""])
NAMES = ["LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX", "HOSTNAME"]


@settings(max_examples=300, deadline=None)
@given(values=st.fixed_dictionaries({n: TEXT for n in NAMES}))
def test_arbitrary_text_gives_a_report_or_a_topology_error(values: dict[str, str]) -> None:
    try:
        report = read(values)
    except TopologyError as exc:
        assert str(exc).split("=", 1)[0] in NAMES
        return
    assert 0 <= report.node_rank < len(report.nodes)
    assert report.nodes[0].host == values["LWS_LEADER_ADDRESS"]


# kubernetes-sigs/lws@060ab4d api/leaderworkerset/v1/leaderworkerset_types.go: the json tags
# of LeaderWorkerSetSpec and LeaderWorkerTemplate.
LWS_SPEC = {"replicas", "leaderWorkerTemplate", "rolloutStrategy", "startupPolicy",
            "networkConfig"}
LWS_TEMPLATE = {"leaderTemplate", "workerTemplate", "size", "restartPolicy", "subGroupPolicy",
                "volumeClaimTemplates", "persistentVolumeClaimRetentionPolicy"}


def test_the_docs_manifest_names_only_the_apis_fields() -> None:
    found = manifest("LeaderWorkerSet")
    assert found["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert set(found["spec"]) <= LWS_SPEC
    assert set(found["spec"]["leaderWorkerTemplate"]) <= LWS_TEMPLATE


def tpu_pod(worker: int, size: int, leader_tpu: bool) -> dict[str, str]:
    """A TPU group's pod (lws pkg/utils/accelerators/tpu.go AddTPUVariables): the hostnames
    of the TPU pods (without the leader when it requests no TPU, ids then shifted by one)."""
    env = pod("tpu", 0, worker, size)
    first = 0 if leader_tpu else 1
    env["TPU_WORKER_HOSTNAMES"] = ",".join(
        ["tpu-0.tpu"] * leader_tpu + [f"tpu-0-{i}.tpu" for i in range(1, size)])
    if worker >= first:
        env["TPU_WORKER_ID"] = str(worker - first)
    return env


def test_a_tpu_group_with_a_tpu_leader_is_read() -> None:
    assert read(tpu_pod(2, 3, leader_tpu=True)).node_rank == 2


def test_a_leader_without_a_tpu_is_an_error_on_the_workers() -> None:
    """tpu_test.go: the leader requests no TPU; the workers' ids shift by one, so JAX's
    process count (the TPU hosts) is not the group's: never contradict JAX."""
    with pytest.raises(TopologyError) as info:
        read(tpu_pod(1, 3, leader_tpu=False))
    assert str(info.value) == (
        "TPU_WORKER_HOSTNAMES='tpu-0-1.tpu,tpu-0-2.tpu': expected 3 hosts, the group's pods "
        "(LWS_GROUP_SIZE): it lists 2: the leader requests no TPU, so the TPU workers are the "
        "other pods, their ids shifted by one (lws tpu.go, AddTPUVariables), and JAX, which "
        "reads TPU_WORKER_* itself, would count other processes than the group's nodes. "
        "Request the TPU in the leader too, or run the command without derive-env")


def test_a_tpu_worker_id_other_than_the_index_is_an_error() -> None:
    with pytest.raises(TopologyError, match=r"^TPU_WORKER_ID='0': expected 1, LWS_WORKER_INDEX"):
        read({**tpu_pod(1, 2, leader_tpu=True), "TPU_WORKER_ID": "0"})
