"""The TPU slice source (sources/managers/tpu.py): a host of a TPU slice, or of several
(multislice).

No TPU here: the containers' variables are TYPED from the setters' code and tests, each
fixture citing its file and function:

- kubernetes-sigs/lws ``pkg/utils/accelerators/tpu_test.go`` ``TestAddTPUVariables`` and
  ``TestAddTPUVariablesSubGroup`` (the expected values of ``AddTPUVariables`` /
  ``addTPUVariablesSubGroup`` in ``tpu.go``);
- GoogleCloudPlatform/ai-on-gke ``ray-on-gke/tpu/kuberay-tpu-webhook/main.go``
  ``genDNSHostnames`` (``<group>-<replica>-<j>.<cluster>-headless-worker-svc``) and
  ``mutatePod`` (hostname ``<group>-<replica>-<TPU_WORKER_ID>``, ``TPU_NAME``);
- the GKE TPU webhook (closed) for a JobSet: pods ``<jobset>-<rjob>-<job>-<pod>`` in the
  JobSet's headless service, ``MEGASCALE_SLICE_ID`` <- label ``jobset.sigs.k8s.io/job-index``,
  ``MEGASCALE_COORDINATOR_ADDRESS`` <- the host of job 0's pod 0 (JobSet's TPU examples,
  sources-cloud.md 12).

JAX's own cluster code (jax ``_src/clusters/cloud_tpu_cluster.py``) reads every fixture in a
subprocess: its coordinator, process id and process count are derive-env's.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.digest import digest_of, facts_of
from derive_env.errors import TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.sources import BY_NAME, forced_source, seen_sources
from derive_env.sources.managers import tpu
from derive_env.sources.report import Report
from derive_env.topology import nodes_of
from helpers import require

ALL = {PREFIX + "frameworks": "pytorch,jax"}
FIX = ("the TPU webhook (GKE, LeaderWorkerSet or KubeRay) sets it in the container that "
       "requests google.com/tpu; do not set it in the manifest's env")


def read(environ: dict[str, str]) -> Report:
    return tpu.read(environ, BY_NAME["gke-tpu"])


def error(environ: dict[str, str]) -> str:
    with pytest.raises(TopologyError) as info:
        read(environ)
    assert info.value.exit_code == 3
    return str(info.value)


def lws_pod(worker: int, size: int, leader_tpu: bool = True) -> dict[str, str]:
    """Pod ``worker`` of LWS group ``test-sample-0`` (namespace default, subdomain default):
    tpu_test.go TestAddTPUVariables, "Leader requests TPU resources, leader pod" / "worker
    pod" (size 2) and "Leader does not request TPU resources, worker pod"; the LWS variables
    of pod_utils.go AddLWSVariables beside them. The leader without a TPU gets none."""
    leader = "test-sample-0"
    env = {"LWS_LEADER_ADDRESS": f"{leader}.default.default", "LWS_GROUP_SIZE": str(size),
           "LWS_WORKER_INDEX": str(worker), "HOSTNAME": leader if worker == 0
           else f"{leader}-{worker}", "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    hosts = [f"{leader}.default"] * leader_tpu + [f"{leader}-{i}.default"
                                                  for i in range(1, size)]
    if leader_tpu or worker:
        env.update(TPU_WORKER_HOSTNAMES=",".join(hosts), TPU_NAME=leader,
                   TPU_WORKER_ID=str(worker - (not leader_tpu)),
                   TPU_PROCESS_ADDRESSES=",".join(f"{h}:8476" for h in hosts),
                   TPU_PROCESS_PORT="8476")
    return env


def kuberay_pod(host: int, hosts: int, replica: int = 0, group: str = "test-group-name",
                cluster: str = "raycluster-test-sample") -> dict[str, str]:
    """main.go mutatePod / genDNSHostnames: worker ``host`` of replica ``replica`` of a
    multi-host TPU worker group; names from webhook_main_test.go ``setupTest`` (RayCluster
    ``raycluster-test-sample``, group ``test-group-name``, topology 2x2x4 at 4 chips per
    host: 4 hosts; Test_GetNextWorkerID "multi-host, multi-slice worker group": ids 0..3
    in each of 4 replicas)."""
    return {"TPU_WORKER_HOSTNAMES": ",".join(
                f"{group}-{replica}-{j}.{cluster}-headless-worker-svc" for j in range(hosts)),
            "TPU_WORKER_ID": str(host), "TPU_NAME": f"{group}-{replica}",
            "HOSTNAME": f"{group}-{replica}-{host}", "KUBERNETES_SERVICE_HOST": "10.96.0.1"}


def jobset_pod(job: int, pod: int, hosts: int, slices: int, name: str = "js",
               rjob: str = "slice") -> dict[str, str]:
    """A GKE JobSet multislice host: job ``job`` (the slice) pod ``pod``; MEGASCALE_* wired
    from the job-index label and the coordinator (sources-cloud.md 12)."""
    env = {"TPU_WORKER_HOSTNAMES": ",".join(f"{name}-{rjob}-{job}-{p}.{name}"
                                            for p in range(hosts)),
           "TPU_WORKER_ID": str(pod), "HOSTNAME": f"{name}-{rjob}-{job}-{pod}",
           "JOB_COMPLETION_INDEX": str(pod), "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    if slices > 1:
        env.update(MEGASCALE_NUM_SLICES=str(slices), MEGASCALE_SLICE_ID=str(job),
                   MEGASCALE_COORDINATOR_ADDRESS=f"{name}-{rjob}-0-0.{name}")
    return env


# -- the setters' own values -------------------------------------------------------------


@pytest.mark.parametrize("worker", [0, 1])
def test_a_lws_group_whose_leader_has_a_tpu_is_one_slice(worker: int) -> None:
    """tpu_test.go "Leader requests TPU resources, leader pod" and "worker pod"."""
    report = read(lws_pod(worker, 2))
    assert report.nodes == nodes_of(["test-sample-0.default", "test-sample-0-1.default"])
    assert (report.node_rank, report.master, report.num_nodes, report.gpus,
            report.warnings) == (worker, None, None, None, ())
    assert report.job == ("gke-tpu", "test-sample-0.default", "1x2")


def test_a_tpu_pod_of_a_lws_group_is_read_by_the_tpu_source_not_lws() -> None:
    """Both sets in one pod: the slice wins (it is what JAX reads); the lws line is set
    aside by its ``unless``, and ``--source lws`` still checks the TPU variables."""
    assert [s.name for s in seen_sources(lws_pod(1, 2))] == ["gke-tpu"]
    assert forced_source("lws", lws_pod(1, 2)).name == "lws"
    derivation = derive(lws_pod(1, 2), ALL)
    assert derivation is not None
    assert derivation.changes()["MASTER_ADDR"] == "test-sample-0.default"


def test_a_lws_leader_without_a_tpu_is_not_in_the_slice() -> None:
    """tpu_test.go "Leader does not request TPU resources, worker pod" (size 3 here): the
    workers' slice is the TPU pods, ids shifted by one, the leader outside (JAX's view),
    with a warning naming the leader's fix; the leader pod itself has no TPU variable and
    is read by the lws source."""
    report = read(lws_pod(2, 3, leader_tpu=False))
    assert report.nodes == nodes_of(["test-sample-0-1.default", "test-sample-0-2.default"])
    assert report.node_rank == 1
    assert report.warnings == (
        "the slice is the 2 TPU workers of this LeaderWorkerSet group of 3 "
        "(TPU_WORKER_HOSTNAMES): its leader requests no TPU and is not in it (JAX's view, "
        "followed here); run the leader's command with --source none (or without "
        "derive-env), or request the TPU in the leader too",)
    leader = lws_pod(0, 3, leader_tpu=False)
    assert "TPU_WORKER_ID" not in leader
    assert [s.name for s in seen_sources(leader)] == ["lws"]


def test_a_lws_tpu_id_other_than_the_worker_index_is_an_error() -> None:
    environ = {**lws_pod(1, 3), "HOSTNAME": ""}
    environ["TPU_WORKER_ID"] = "2"
    assert error(environ) == (
        "TPU_WORKER_ID='2': expected 1, LWS_WORKER_INDEX='1' (lws tpu.go, AddTPUVariables: "
        "the TPU ids are the worker indices); remove TPU_WORKER_ID from the manifest's env")


def test_lws_subgroups_are_each_their_own_slice() -> None:
    """tpu_test.go TestAddTPUVariablesSubGroup "Leader requests TPU resources, worker with
    subgroup index > 0": pod test-sample-1-7 of a group of 8, subgroups of 4."""
    hosts = [f"test-sample-1-{i}.default" for i in range(4, 8)]
    report = read({"TPU_WORKER_HOSTNAMES": ",".join(hosts), "TPU_WORKER_ID": "3",
                   "HOSTNAME": "test-sample-1-7", "LWS_GROUP_SIZE": "8",
                   "LWS_WORKER_INDEX": "7",
                   "LWS_LEADER_ADDRESS": "test-sample-1.default.default"})
    assert (report.nodes, report.node_rank) == (nodes_of(hosts), 3)


def test_one_entry_per_tpu_container_is_refused() -> None:
    """tpu_test.go "Test multi-container TPU_PROCESS_ADDRESSES, leader pod": each host
    listed once per TPU container: JAX counts 4 processes, the pods are 2 nodes."""
    hosts = ("test-sample-0.default,test-sample-0.default,test-sample-0-1.default,"
             "test-sample-0-1.default")
    assert error({"TPU_WORKER_HOSTNAMES": hosts, "TPU_WORKER_ID": "0"}) == (
        f"TPU_WORKER_HOSTNAMES={hosts!r}: expected each host once: 'test-sample-0.default' "
        "is listed twice (one entry per TPU container: several JAX processes per host, which "
        "JAX counts as processes and derive-env would count as nodes); request "
        "google.com/tpu in one container per pod, or run the command without derive-env")


def test_process_addresses_of_other_hosts_are_refused() -> None:
    environ = {**lws_pod(0, 2),
               "TPU_PROCESS_ADDRESSES": "test-sample-0.default:8476,test-sample-0.default:8477"}
    assert error(environ).startswith(
        "TPU_PROCESS_ADDRESSES='test-sample-0.default:8476,test-sample-0.default:8477': "
        "expected one <host>:<port> per host of TPU_WORKER_HOSTNAMES='test-sample-0.default,"
        "test-sample-0-1.default', in its order: JAX reads TPU_PROCESS_ADDRESSES first")


@pytest.mark.parametrize("host", [0, 1, 3])
def test_a_kuberay_tpu_worker_group(host: int) -> None:
    """Replica 1 of the worker group: each replica is its own slice (KubeRay sets no
    MEGASCALE_* here: the replicas are separate jobs)."""
    report = read(kuberay_pod(host, 4, replica=1))
    assert report.nodes[0].host == (
        "test-group-name-1-0.raycluster-test-sample-headless-worker-svc")
    assert (len(report.nodes), report.node_rank) == (4, host)


@pytest.mark.parametrize(("job", "pod"), [(0, 0), (0, 1), (1, 0), (2, 1)])
def test_a_jobset_multislice_host_is_numbered_slice_major(job: int, pod: int) -> None:
    report = read(jobset_pod(job, pod, hosts=2, slices=3))
    assert (report.nodes, report.num_nodes, report.node_rank, report.master) == (
        (), 6, job * 2 + pod, "js-slice-0-0.js")
    assert report.job == ("gke-tpu", "js-slice-0-0.js", "3x2")
    derivation = derive(jobset_pod(job, pod, hosts=2, slices=3), ALL)
    assert derivation is not None
    changes = derivation.changes()
    assert {k: changes[k] for k in ("MASTER_ADDR", "NODE_RANK", "PET_NNODES",
                                    "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")} == {
        "MASTER_ADDR": "js-slice-0-0.js", "NODE_RANK": str(job * 2 + pod), "PET_NNODES": "6",
        "JAX_NUM_PROCESSES": "6", "JAX_PROCESS_ID": str(job * 2 + pod)}
    assert changes["JAX_COORDINATOR_ADDRESS"].startswith("js-slice-0-0.js:")


def test_a_coordinator_with_a_port_is_cut_as_jax_cuts_it() -> None:
    """Ray's TPU multislice helpers set ``MEGASCALE_COORDINATOR_ADDRESS=<ip>:<port>`` (with
    ``MEGASCALE_PORT``): the host is the part before the first ':' (JAX's
    get_coordinator_address), an address: no name to compare with slice 0's first host."""
    environ = {**jobset_pod(0, 0, 2, 2), "MEGASCALE_COORDINATOR_ADDRESS": "10.0.0.5:8081",
               "MEGASCALE_PORT": "8081"}
    report = read(environ)
    assert (report.master, report.warnings, report.job) == (
        "10.0.0.5", (), ("gke-tpu", "10.0.0.5", "2x2"))


def test_single_host_slices_one_alone_or_several_joined() -> None:
    """A single-host slice (``localhost``: one host, JAX's one process) is a single node; the
    same slices joined by MEGASCALE_* are one job of a host per slice, slice-major."""
    alone = derive({"TPU_WORKER_HOSTNAMES": "localhost", "TPU_WORKER_ID": "0"}, ALL)
    assert alone is not None
    assert (alone.topology.num_nodes, alone.topology.multi_node) == (1, False)
    joined = [read({"TPU_WORKER_HOSTNAMES": "localhost", "TPU_WORKER_ID": "0",
                    "MEGASCALE_NUM_SLICES": "3", "MEGASCALE_SLICE_ID": str(i),
                    "MEGASCALE_COORDINATOR_ADDRESS": "10.0.0.5:8081"}) for i in range(3)]
    assert [(r.node_rank, r.num_nodes, r.master) for r in joined] == [
        (0, 3, "10.0.0.5"), (1, 3, "10.0.0.5"), (2, 3, "10.0.0.5")]


def test_the_source_can_be_chosen() -> None:
    environ = {**kuberay_pod(1, 2), "DERIVE_ENV_SOURCE": "gke-tpu"}
    derivation = derive(environ, ALL)
    assert derivation is not None
    assert (derivation.topology.source, derivation.topology.node_rank) == ("gke-tpu", 1)


def test_a_tpu_host_derives_no_process_count_from_gpus() -> None:
    """Pitfall 8: no GPU count on a TPU host, so never nproc_per_node=0 (the note says why)."""
    derivation = derive({**kuberay_pod(1, 2), "SKYPILOT_NUM_GPUS_PER_NODE": "0"},
                        {PREFIX + "frameworks": "pytorch"})
    assert derivation is not None
    assert derivation.topology.gpus_per_node is None
    assert "PET_NPROC_PER_NODE" not in derivation.changes()


# -- what is refused ----------------------------------------------------------------------


@pytest.mark.parametrize(("changes", "message"), [
    ({"TPU_WORKER_ID": "2"}, "TPU_WORKER_ID='2': expected an index below the 2 hosts of "
     f"TPU_WORKER_HOSTNAMES: {FIX}"),
    ({"TPU_WORKER_ID": "x"}, f"TPU_WORKER_ID='x': expected an integer >= 0 (an index); {FIX}"),
    ({"TPU_WORKER_HOSTNAMES": "a:8476,b"}, "TPU_WORKER_HOSTNAMES='a:8476,b': expected the "
     "slice's hosts joined by ',': entry 1 ('a:8476') is not a host name or IPv4 address "
     f"without ':' (JAX cuts an entry at its first ':'); {FIX}"),
    ({"TPU_WORKER_HOSTNAMES": "b,::1"}, "TPU_WORKER_HOSTNAMES='b,::1': expected the slice's "
     "hosts joined by ',': entry 2 ('::1') is not a host name or IPv4 address without ':'"),
    ({"TPU_WORKER_HOSTNAMES": "a,-b"}, "TPU_WORKER_HOSTNAMES='a,-b': expected the slice's "
     "hosts joined by ',': entry 2 ('-b') is not a host name (letters, di"),
    ({"MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "1"}, "MEGASCALE_NUM_SLICES='2': "
     "expected MEGASCALE_COORDINATOR_ADDRESS beside it: JAX reads a missing slice id as 0 "
     "and a missing coordinator as this slice's first host, so the slices would number "
     "their hosts alike or start one coordinator each; set MEGASCALE_SLICE_ID (JobSet: the "
     "jobset.sigs.k8s.io/job-index label) and MEGASCALE_COORDINATOR_ADDRESS (the host of "
     "slice 0's worker 0) on every host"),
    ({"MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "2",
      "MEGASCALE_COORDINATOR_ADDRESS": "c"}, "MEGASCALE_SLICE_ID='2': expected a slice id "
     "below MEGASCALE_NUM_SLICES='2' (slices are numbered from 0)"),
    ({"MEGASCALE_COORDINATOR_ADDRESS": "[::1]:8080"}, "MEGASCALE_COORDINATOR_ADDRESS="
     "'[::1]:8080': expected <host> or <host>:<port>, the host of slice 0's worker 0 (JAX "
     "takes the part before the first ':', jax _src/clusters/cloud_tpu_cluster.py): '[' is "
     "not"),
])
def test_malformed(changes: dict[str, str], message: str) -> None:
    environ = {"TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "1", **changes}
    assert error(environ).startswith(message)


def test_a_hostname_at_another_position_is_an_error_naming_it() -> None:
    """Pitfall 6: a TPU_WORKER_ID the user set (the webhooks skip theirs then) that the pod's
    own name contradicts."""
    environ = {**kuberay_pod(2, 4), "TPU_WORKER_ID": "1"}
    assert error(environ) == (
        "TPU_WORKER_ID='1': expected 2: this pod's HOSTNAME='test-group-name-0-2' is entry 2 of "
        "TPU_WORKER_HOSTNAMES (0-based), and the webhooks number a slice's hosts in that "
        "order (JAX and PyTorch/XLA take the list's entry TPU_WORKER_ID as this host); "
        "remove TPU_WORKER_ID from the manifest's env")


def test_a_hostname_of_63_characters_is_checked_too() -> None:
    """Pitfall 10: a DNS label's longest (JobSet names cut at 63, kubernetes-sigs/jobset#408)."""
    long = "a" * 53 + "-slice-0-1"
    assert len(long) == 63
    environ = {"TPU_WORKER_HOSTNAMES": f"{'a' * 53}-slice-0-0.js,{long}.js",
               "TPU_WORKER_ID": "0", "HOSTNAME": long}
    assert "expected 1: this pod's HOSTNAME=" in error(environ)
    assert read({**environ, "TPU_WORKER_ID": "1"}).node_rank == 1


def test_hostnames_that_are_no_pod_names_are_not_cross_checked() -> None:
    assert read({"TPU_WORKER_HOSTNAMES": "10.0.0.1,10.0.0.2", "TPU_WORKER_ID": "1",
                 "HOSTNAME": "gke-node-abc"}).node_rank == 1


def test_a_coordinator_other_than_slice_0s_first_host_is_warned() -> None:
    report = read({**jobset_pod(0, 1, 2, 2), "MEGASCALE_COORDINATOR_ADDRESS": "other:8080"})
    assert report.master == "other"
    assert report.warnings == (
        "MEGASCALE_COORDINATOR_ADDRESS names 'other', and this slice 0's first host is "
        "'js-slice-0-0.js': JAX takes the coordinator's (followed here); it must be the host "
        "of TPU_WORKER_ID=0 in slice 0",)


def test_seen_only_with_both_variables() -> None:
    environ = kuberay_pod(0, 2)
    assert [s.name for s in seen_sources(environ)] == ["gke-tpu"]
    del environ["TPU_WORKER_HOSTNAMES"]  # a single-host KubeRay slice: no list
    assert seen_sources(environ) == []


# -- JAX's own cluster code reads the same job ---------------------------------------------

#: Runs JAX's cluster detection (jax._src.clusters) on each case, as
#: jax.distributed.initialize() without arguments does, with what touches the network
#: stubbed: the TPU VM check (libtpu and chips), the DNS wait for the coordinator, the GCE
#: metadata server (on GKE it has no TPU VM attribute: GceTpuCluster, checked first, is not
#: present, and a key not in the environment is absent from ``tpu-env`` too).
_PROBE = r"""
import json, os, sys
from jax._src import clusters
from jax._src.clusters import cloud_tpu_cluster as tpu

tpu.running_in_cloud_tpu_vm = True
tpu.BaseTpuCluster.wait_for_coordinator = classmethod(lambda cls, address, timeout: None)
tpu.get_metadata = lambda key: ("", 404)  # GKE: no TPU VM attributes (no tpu-env either)
out = []
for case in json.load(sys.stdin):
    os.environ.clear()
    os.environ.update(case)
    env = next(e for e in clusters.ClusterEnv._cluster_types
               if not e.opt_in_only_method and e.is_env_present())
    address, count, pid, _ = clusters.ClusterEnv.auto_detect_unset_distributed_params(
        None, None, None, None, None, 300)
    out.append([env.name, address, pid, count])
print(json.dumps(out))
"""


def _cases() -> list[dict[str, str]]:
    cases = [lws_pod(0, 2), lws_pod(1, 2), lws_pod(2, 3, leader_tpu=False)]
    cases += [kuberay_pod(h, 4, replica=1) for h in range(4)]
    cases += [jobset_pod(j, p, 2, 3) for j in range(3) for p in range(2)]
    cases += [jobset_pod(0, p, 4, 1) for p in range(4)]
    cases += [{**jobset_pod(j, 1, 2, 2), "MEGASCALE_COORDINATOR_ADDRESS": "10.0.0.5:8081"}
              for j in range(2)]
    cases += [{"TPU_WORKER_HOSTNAMES": "localhost", "TPU_WORKER_ID": "0",
               "MEGASCALE_NUM_SLICES": "3", "MEGASCALE_SLICE_ID": str(i),
               "MEGASCALE_COORDINATOR_ADDRESS": "10.0.0.5:8081"} for i in range(3)]
    cases.append({"TPU_WORKER_HOSTNAMES": ",".join(f"test-sample-1-{i}.default"
                                                   for i in range(4, 8)),
                  "TPU_WORKER_ID": "3", "LWS_GROUP_SIZE": "8", "LWS_WORKER_INDEX": "7"})
    return cases


@pytest.mark.frameworks
def test_jax_own_cluster_detection_derives_the_same_job() -> None:
    """For LWS, KubeRay and JobSet (one slice and three) hosts: JAX 0.10's GkeTpuCluster,
    given derive-env's port as JAX_COORDINATOR_PORT, finds exactly derive-env's
    JAX_COORDINATOR_ADDRESS, JAX_PROCESS_ID and JAX_NUM_PROCESSES."""
    require(importlib.util.find_spec("jax") is not None, "JAX is not installed")
    inputs, expected = [], []
    for environ in _cases():
        derivation = derive(environ, {PREFIX + "frameworks": "jax"})
        assert derivation is not None
        exported = derivation.changes()
        port = exported["JAX_COORDINATOR_ADDRESS"].rpartition(":")[2]
        inputs.append({k: v for k, v in environ.items() if not k.startswith("LWS_")}
                      | {"JAX_COORDINATOR_PORT": port})
        expected.append(["gketpu", exported["JAX_COORDINATOR_ADDRESS"],
                         int(exported["JAX_PROCESS_ID"]), int(exported["JAX_NUM_PROCESSES"])])
    run = subprocess.run([sys.executable, "-c", _PROBE], input=json.dumps(inputs) + "\n",
                         capture_output=True, text=True, timeout=180, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.splitlines()[-1]) == expected


# -- properties ---------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(hosts=st.integers(1, 16), slices=st.integers(1, 6),
       kind=st.sampled_from(["jobset", "kuberay"]),
       frameworks=st.sampled_from(["pytorch", "jax", "pytorch,jax"]))
def test_every_host_of_random_slices_derives_one_job(hosts: int, slices: int, kind: str,
                                                     frameworks: str) -> None:
    """Every host of every slice: node ranks 0..n-1 slice-major, one master, the same ports
    and digest; a job of more than one host is never a single node."""
    derivations = []
    for job in range(slices):
        for pod in range(hosts):
            environ = (jobset_pod(job, pod, hosts, slices) if kind == "jobset" or slices > 1
                       else kuberay_pod(pod, hosts))
            derivation = derive(environ, {PREFIX + "frameworks": frameworks})
            assert derivation is not None
            derivations.append(derivation)
    topologies = [d.topology for d in derivations]
    assert [t.node_rank for t in topologies] == list(range(hosts * slices))
    assert {t.num_nodes for t in topologies} == {hosts * slices}
    assert all(t.multi_node for t in topologies) == (hosts * slices > 1)
    assert len({d.changes().get("MASTER_ADDR") for d in derivations}) == 1
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1
    ports = {tuple(v.value for v in d.variables if v.name.endswith(("PORT", "ADDRESS")))
             for d in derivations}
    assert len(ports) == 1


TEXT = st.text(st.characters(codec="utf-8"), max_size=16) | st.sampled_from(
    ["0", "1", "2", "-1", "01", "a,b", "a,a", "a:1,b:1", "a.b,c.d", "t-0-1", "c:8080", ""])
NAMES = ["TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID", "TPU_PROCESS_ADDRESSES",
         "MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID", "MEGASCALE_COORDINATOR_ADDRESS",
         "HOSTNAME", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX"]


@settings(max_examples=300, deadline=None)
@given(values=st.fixed_dictionaries({n: TEXT for n in NAMES}))
def test_arbitrary_text_gives_a_report_or_a_topology_error(values: dict[str, str]) -> None:
    try:
        report = read(values)
    except TopologyError as exc:
        assert str(exc).split("=", 1)[0] in NAMES
        return
    count = report.count()
    assert count is not None
    assert 0 <= report.node_rank < count


# -- the docs' manifest ---------------------------------------------------------------------

# kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go: the json tags of JobSetSpec and
# ReplicatedJob.
JOBSET_SPEC = {"replicatedJobs", "network", "successPolicy", "failurePolicy", "startupPolicy",
               "suspend", "coordinator", "managedBy", "ttlSecondsAfterFinished",
               "volumeClaimPolicies"}
REPLICATED_JOB = {"name", "groupName", "template", "replicas", "dependsOn"}


def test_the_docs_jobset_names_only_the_apis_fields_and_what_jax_reads() -> None:
    """docs/sources/kubernetes.md's TPU manifest (found by its name: the page may hold other
    JobSets) parses, names only JobSet's fields, and sets exactly the MEGASCALE_* that
    sources/managers/tpu.py and JAX read, the slice index from JobSet's job-index label."""
    import re
    from pathlib import Path

    import yaml

    page = Path(__file__).resolve().parents[2] / "docs" / "sources" / "kubernetes.md"
    found = [doc for block in re.findall(r"```yaml\n(.*?)```", page.read_text(encoding="utf-8"),
                                         re.S) for doc in yaml.safe_load_all(block)]
    jobset = next(d for d in found if d.get("kind") == "JobSet"
                  and d["metadata"]["name"] == "tpu-train")
    assert jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert set(jobset["spec"]) <= JOBSET_SPEC
    (replicated,) = jobset["spec"]["replicatedJobs"]
    assert set(replicated) <= REPLICATED_JOB
    (container,) = replicated["template"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert set(env) == {"MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID",
                        "MEGASCALE_COORDINATOR_ADDRESS"}
    assert env["MEGASCALE_NUM_SLICES"]["value"] == str(replicated["replicas"])
    assert env["MEGASCALE_SLICE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['jobset.sigs.k8s.io/job-index']")
    # JobSet names job 0's pod 0 <jobset>-<replicatedJob>-0-0 in the subdomain <jobset>.
    assert env["MEGASCALE_COORDINATOR_ADDRESS"]["value"] == (
        f"tpu-train-{replicated['name']}-0-0.tpu-train")
    assert container["resources"]["limits"]["google.com/tpu"] == 4


# -- a partial set: the host list alone ------------------------------------------------------

def test_a_host_list_without_the_worker_id_is_refused() -> None:
    """TPU_WORKER_HOSTNAMES of three hosts without TPU_WORKER_ID: a partial set stating a
    slice of three hosts, refused (exit 3), never a job of one host."""
    from support.dry_run import dry_run

    assert dry_run(["TPU_WORKER_HOSTNAMES=h-0,h-1,h-2"], "pytorch,jax") == (3, "", (
        "derive-env: error: TPU_WORKER_HOSTNAMES='h-0,h-1,h-2': expected one host or unset: "
        "a TPU slice (GKE, LeaderWorkerSet or KubeRay) states a job of more than one host, but "
        "only part of its variables are set (not set: TPU_WORKER_ID), and a partial set is "
        "never used: it may be left over from another job. Run derive-env in the launcher's "
        "own process (the launcher sets all of them), or set label "
        "ai.backend.distributed.on-error=warn to run the command with the environment "
        "unchanged\n"))


def test_a_host_list_of_one_host_alone_is_one_container() -> None:
    from support.dry_run import dry_run

    status, out, err = dry_run(["TPU_WORKER_HOSTNAMES=h-0"], "jax")
    assert (status, err) == (0, "")
    assert "JAX_NUM_PROCESSES=1\n" in out
