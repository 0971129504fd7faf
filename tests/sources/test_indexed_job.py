"""The Kubernetes Indexed Job source (sources/managers/jobset.py, its line kubernetes-indexed-job).

No Kubernetes runs here: the pods' environments and ``/etc/hosts`` are TYPED from the
controller's and the kubelet's code (kubernetes/kubernetes):

- ``JOB_COMPLETION_INDEX``: pkg/controller/job/indexed_job_utils.go
  ``addCompletionIndexEnvVariable`` (a fieldRef to the completion-index label/annotation;
  skipped when the container's env already names it: a user-set value wins);
- ``HOSTNAME`` = ``<job>-<index>``: pkg/controller/job/job_controller.go ``manageJob``
  (``template.Spec.Hostname = fmt.Sprintf("%s-%d", job.Name, completionIndex)``);
- ``/etc/hosts``: pkg/kubelet/kubelet_pods.go ``managedHostsFileContent`` (the kubelet's
  header, localhost lines, then ``<podIP>\\t<hostname>.<subdomain>.<ns>.svc.<domain>\\t
  <hostname>`` when the template sets ``subdomain``);
- ``KUBERNETES_SERVICE_HOST``: the kubelet's service env (pkg/kubelet/kubelet_pods.go
  ``getServiceEnvVarMap``), set in every pod.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.errors import TopologyError
from derive_env.sources import BY_NAME, seen_sources
from derive_env.sources.managers import jobset
from derive_env.sources.report import Report
from derive_env.topology import Node
from support.k8s import etc_hosts
from support.k8s import indexed_job_pod as pod

LINE = BY_NAME["kubernetes-indexed-job"]


def read(environ: dict[str, str], hosts: str | None = None) -> Report:
    files = {jobset.HOSTS_FILE: hosts} if jobset.files_needed(environ, LINE.name) \
        else None
    return jobset.read(environ, LINE, files)


def error(environ: dict[str, str], hosts: str | None = None) -> str:
    with pytest.raises(TopologyError) as caught:
        read(environ, hosts)
    return str(caught.value)


def test_a_pod_with_the_count_and_the_kubelets_fqdn() -> None:
    env = pod("train", 2, 3)
    report = read(env, etc_hosts("train-2", "train-2.train.default.svc.cluster.local"))
    hosts = tuple(Node(f"train-{i}.train.default.svc.cluster.local") for i in range(3))
    assert (report.nodes, report.node_rank, report.master, report.job) == (
        hosts, 2, None, ("kubernetes-indexed-job", hosts[0].host, "3"))
    assert report.inputs["nodes"] == ("HOSTNAME", "DERIVE_ENV_NNODES", "/etc/hosts")
    assert report.inputs["node_rank"] == ("JOB_COMPLETION_INDEX",)


def test_the_subdomain_variable_wins_and_no_file_is_read() -> None:
    env = pod("train", 0, 2, "svc")
    assert jobset.files_needed(env, LINE.name) == ()
    report = read(env)
    assert [n.host for n in report.nodes] == ["train-0.svc", "train-1.svc"]
    assert report.inputs["master"] == ("HOSTNAME", "DERIVE_ENV_SUBDOMAIN")


@pytest.mark.parametrize("index", [0, 1, 5])
def test_without_the_count_every_index_is_refused_alike(index: int) -> None:
    text = error(pod("bert", index), etc_hosts(f"bert-{index}", f"bert-{index}.bert.ns.svc.x"))
    assert text == (
        "DERIVE_ENV_NNODES='': expected the Job's spec.completions, set in the pod template's "
        "container env: `- name: DERIVE_ENV_NNODES` `value: \"<spec.completions of bert>\"` "
        "(a Kubernetes Indexed Job does not put its pod count in the pod's environment)")


@pytest.mark.parametrize("index", [0, 3])
@pytest.mark.parametrize("hosts", [None, "127.0.0.1\tlocalhost\n", "10.0.0.1\tbert-{i}\n"])
def test_without_a_subdomain_every_index_is_refused_alike(index: int, hosts: str | None
                                                          ) -> None:
    text = error(pod("bert", index, 4), hosts and hosts.format(i=index))
    assert text == (
        f"DERIVE_ENV_SUBDOMAIN='': expected set, or a line naming bert-{index}.<subdomain>... "
        "in /etc/hosts: node 0 (bert-0) has a DNS name only with a subdomain and a headless "
        "Service; add to the Job's pod template (spec.template.spec): `subdomain: bert` and "
        "create the headless Service it names (kind: Service, metadata.name: bert, "
        "spec.clusterIP: None, spec.selector: batch.kubernetes.io/job-name: bert); the kubelet "
        "then writes the pod's name into /etc/hosts. With hostNetwork or without a readable "
        "/etc/hosts, also set in the container's env: `- name: DERIVE_ENV_SUBDOMAIN` `value: "
        "\"bert\"`")


def test_a_user_set_index_is_checked_against_the_hostname() -> None:
    """addCompletionIndexEnvVariable returns when the name is already in container.Env."""
    env = pod("train", 2, 4, "train", JOB_COMPLETION_INDEX="0")
    assert error(env) == (
        "JOB_COMPLETION_INDEX='0': expected 2, the index in this pod's hostname "
        "HOSTNAME='train-2' (the Job controller names the pod's host <job>-<index> "
        "(kubernetes/kubernetes pkg/controller/job/job_controller.go, manageJob)): a "
        "JOB_COMPLETION_INDEX set in the pod template's env wins over the controller's "
        "(indexed_job_utils.go, addCompletionIndexEnvVariable); remove it")


def test_a_63_character_hostname_is_read_and_64_is_not() -> None:
    job = "j" * 61  # hostname j...j-7: 63 characters, the DNS label limit
    report = read(pod(job, 7, 8, "s"))
    assert (report.nodes[7].host, report.node_rank) == (f"{job}-7.s", 7)
    env = pod(job + "x", 7, 8, "s")
    assert error(env).startswith(
        f"HOSTNAME='{job}x-7': expected at most 63 characters (a pod hostname is one DNS "
        "label, pkg/apis/batch/validation): ")


def test_a_host_network_pod_is_refused() -> None:
    assert error(pod("train", 1, 2, "train", HOSTNAME="gpu-node-a")).startswith(
        "HOSTNAME='gpu-node-a': expected <job>-<JOB_COMPLETION_INDEX>: the Job controller "
        "names the pod's host <job>-<index> ")


@pytest.mark.parametrize(("name", "value", "shown"), [
    ("DERIVE_ENV_NNODES", "0", "an integer >= 1: the Job's spec.completions"),
    ("DERIVE_ENV_NNODES", "2", "more than JOB_COMPLETION_INDEX=2 (indexes run "
                               "0..completions-1): the Job's spec.completions"),
    ("JOB_COMPLETION_INDEX", "-1", "an integer >= 0 (the pod's completion index"),
    ("DERIVE_ENV_SUBDOMAIN", "a_b", "the pod template's subdomain (the headless Service's "
                                    "name), so that train-0.<it> is a host name"),
])
def test_bad_values_name_the_variable(name: str, value: str, shown: str) -> None:
    env = {**pod("train", 2, 4, "train"), name: value}
    assert error(env).startswith(f"{name}={value!r}: expected {shown}")


@pytest.mark.parametrize("count", [100_001, 100_000_000])
def test_more_pods_than_kubernetes_allows_is_refused_before_the_list(count: int) -> None:
    """An Indexed Job runs at most 100000 pods at once (pkg/apis/batch/validation,
    maxParallelismForIndexedJob): a larger count is refused at once (it took minutes and
    gigabytes to build the node list), exit 3."""
    with pytest.raises(TopologyError) as err:
        read(pod("train", 2, count, "train"))
    assert err.value.exit_code == 3
    assert str(err.value) == (
        f"DERIVE_ENV_NNODES='{count}': expected at most 100000 pods: Kubernetes caps an "
        "Indexed Job's parallelism at 100000 (pkg/apis/batch/validation, "
        "maxParallelismForIndexedJob), and every pod of a training job runs at once; the "
        "Job's spec.completions, set in the pod template's container env: `- name: "
        "DERIVE_ENV_NNODES` `value: \"<spec.completions of train>\"` (a Kubernetes Indexed "
        "Job does not put its pod count in the pod's environment)")


def test_the_largest_indexed_job_is_read() -> None:
    report = read(pod("t", 99_999, 100_000, "t"))
    assert (len(report.nodes), report.node_rank, report.nodes[-1].host) == (
        100_000, 99_999, "t-99999.t")


@pytest.mark.parametrize("other", ["LWS_WORKER_INDEX", "VC_TASK_INDEX", "PET_NNODES",
                                   "JAX_PROCESS_ID", "DMLC_TASK_ID", "TPU_WORKER_ID"])
def test_the_more_specific_kubernetes_pods_are_not_this_source(other: str) -> None:
    names = [s.name for s in seen_sources({**pod("t", 0, 2, "t"), other: "0"})]
    assert "kubernetes-indexed-job" not in names


def test_torchrun_inside_an_indexed_job_is_torchrun_alone() -> None:
    env = {**pod("t", 1, 2, "t"), "TORCHELASTIC_RUN_ID": "r", "RANK": "2", "LOCAL_RANK": "0",
           "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
           "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "t-0.t", "MASTER_PORT": "29500"}
    assert [s.name for s in seen_sources(env)] == ["torchrun"]


def test_the_inputs_are_not_labels() -> None:
    from derive_env.labels import session_labels

    assert session_labels(pod("t", 0, 2, "t")) == ({}, [])


# -- properties ---------------------------------------------------------------------------

JOB = st.from_regex(r"[a-z]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True)


@settings(max_examples=100, deadline=None)
@given(job=JOB, count=st.integers(1, 40), fqdn=st.booleans())
def test_every_pod_of_a_job_derives_one_job(job: str, count: int, fqdn: bool) -> None:
    from derive_env.digest import digest_of, facts_of
    from derive_env.pipeline import derive

    digests, ranks = set(), []
    for index in range(count):
        env = pod(job, index, count, None if fqdn else job)
        hosts = etc_hosts(f"{job}-{index}", f"{job}-{index}.{job}.default.svc.cluster.local")
        report = read(env, hosts if fqdn else None)
        ranks.append(report.node_rank)
        assert report.nodes[0].host.startswith(f"{job}-0.")
        derivation = derive(env, {"ai.backend.distributed.frameworks": "pytorch"},
                            files=lambda paths, h=hosts: {p: h for p in paths})
        assert derivation is not None
        digests.add(digest_of(facts_of(derivation.topology, derivation)))
    assert ranks == list(range(count))
    assert len(digests) == 1


TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["0", "1", "2", "-1", "01", "t-0", "t-1", "t", "99999999999999999999", ""])


@settings(max_examples=300, deadline=None)
@given(values=st.fixed_dictionaries(
    {n: TEXT for n in ("JOB_COMPLETION_INDEX", "HOSTNAME", "DERIVE_ENV_NNODES",
                       "DERIVE_ENV_SUBDOMAIN")}), hosts=TEXT)
def test_arbitrary_text_gives_a_report_or_a_topology_error(values: dict[str, str],
                                                           hosts: str) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", **values}
    try:
        report = read(env, hosts)
    except TopologyError as exc:
        assert str(exc).split("=", 1)[0] in values
        return
    assert 0 <= report.node_rank < len(report.nodes)
