"""The JobSet source (sources/managers/jobset.py): every pod of a JobSet, replicated jobs as
node groups.

No Kubernetes runs here: the pods are TYPED from the controllers' code and tests
(kubernetes-sigs/jobset@08dfbdf, kubernetes/kubernetes):

- the labels: ``pkg/controllers/jobset_controller.go`` ``labelAndAnnotateObject`` (jobset-name,
  replicatedjob-name, replicatedjob-replicas, job-index, job-global-index from
  ``globalJobIndex``, global-replicas from ``globalReplicas``; coordinator from
  ``CoordinatorEndpoint`` when ``spec.coordinator`` is set), passed into the container as env
  by the downward API under the names of docs/sources/kubernetes.md (``jobset.LABELS``);
- the child Job ``<jobset>-<rjob>-<jobIndex>`` (``pkg/util/placement/placement.go``
  ``GenJobName``), an Indexed Job: ``JOB_COMPLETION_INDEX`` (kubernetes
  ``indexed_job_utils.go`` ``addCompletionIndexEnvVariable``) and the hostname
  ``<job>-<index>`` (``job_controller.go`` ``manageJob``);
- the subdomain: ``GetSubdomain`` (``network.subdomain`` or the JobSet's name); the kubelet's
  ``/etc/hosts`` line (``kubelet_pods.go`` ``managedHostsFileContent``).
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
from derive_env.sources.managers import jobset
from derive_env.sources.report import Report
from support.k8s import etc_hosts, manifest

LINE = BY_NAME["jobset"]
Groups = list[tuple[str, int, int]]


def layout(groups: Groups) -> str:
    return ",".join(f"{name}:{replicas}x{pods}" for name, replicas, pods in groups)


def pod(js: str, groups: Groups, rjob: str, job: int, index: int, *,
        subdomain: str | None = None, coordinator: str | None = None, checks: bool = True,
        **extra: str) -> dict[str, str]:
    """Pod ``index`` of job ``job`` of replicated job ``rjob`` of JobSet ``js`` (``groups``:
    its replicated jobs in spec order, ``(name, replicas, pods per job)``): the labels
    labelAndAnnotateObject puts on it, as the docs' downward-API env passes them, the Job
    controller's index and hostname, and the manifest's DERIVE_ENV_REPLICATED_JOBS."""
    names = [g[0] for g in groups]
    before = sum(g[1] for g in groups[:names.index(rjob)])
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "JOB_COMPLETION_INDEX": str(index),
           "HOSTNAME": f"{js}-{rjob}-{job}-{index}", "JOBSET_NAME": js,
           "JOBSET_REPLICATED_JOB_NAME": rjob, "JOBSET_JOB_INDEX": str(job),
           "DERIVE_ENV_REPLICATED_JOBS": layout(groups)}
    if checks:
        env.update({"JOBSET_REPLICATED_JOB_REPLICAS": str(groups[names.index(rjob)][1]),
                    "JOBSET_GLOBAL_REPLICAS": str(sum(g[1] for g in groups)),
                    "JOBSET_JOB_GLOBAL_INDEX": str(before + job)})
    if coordinator is not None:
        env["JOBSET_COORDINATOR"] = coordinator
    if subdomain is not None:
        env["DERIVE_ENV_SUBDOMAIN"] = subdomain
    return {**env, **extra}


def pods(js: str, groups: Groups, **kwargs: str) -> list[dict[str, str]]:
    """Every pod of the JobSet, in spec order."""
    return [pod(js, groups, name, j, i, **kwargs) for name, replicas, count in groups
            for j in range(replicas) for i in range(count)]


def read(environ: dict[str, str], hosts: str | None = None) -> Report:
    files = {jobset.HOSTS_FILE: hosts} if jobset.files_needed(environ, LINE.name) else None
    return jobset.read(environ, LINE, files)


def error(environ: dict[str, str], hosts: str | None = None) -> str:
    with pytest.raises(TopologyError) as caught:
        read(environ, hosts)
    return str(caught.value)


# jobset_controller_test.go TestConstructJobsFromTemplate "all jobs created": JobSet
# test-jobset, replicated job "replicated-job" of 2 replicas (jobs -0 and -1); 3 pods per job.
TWO_JOBS: Groups = [("replicated-job", 2, 3)]


def test_the_controllers_two_jobs_of_one_replicated_job() -> None:
    reports = [read(env) for env in pods("test-jobset", TWO_JOBS, subdomain="test-jobset")]
    hosts = [f"test-jobset-replicated-job-{j}-{i}.test-jobset" for j in (0, 1) for i in (0, 1, 2)]
    assert [r.node_rank for r in reports] == list(range(6))
    assert {tuple(n.host for n in r.nodes) for r in reports} == {tuple(hosts)}
    assert {(r.master, r.job) for r in reports} == {
        (None, ("jobset", "test-jobset-replicated-job-0-0.test-jobset", "6"))}
    assert reports[4].nodes[4] == ("test-jobset-replicated-job-1-1.test-jobset",
                                   "replicated-job", 5)
    assert reports[4].inputs["node_rank"] == (
        "JOBSET_REPLICATED_JOB_NAME", "JOBSET_JOB_INDEX", "JOB_COMPLETION_INDEX",
        "DERIVE_ENV_REPLICATED_JOBS")


# jobset_controller_test.go TestGlobalJobIndex "multiple replicated jobs": rjob1 x2, rjob2 x4,
# rjob3 x1; job 3 of rjob2 has job-global-index 5 (globalJobIndex). 2 pods per job here.
THREE: Groups = [("rjob1", 2, 2), ("rjob2", 4, 2), ("rjob3", 1, 2)]


def test_global_job_index_places_the_job_after_the_earlier_replicated_jobs() -> None:
    env = pod("js", THREE, "rjob2", 3, 1, subdomain="js")
    assert env["JOBSET_JOB_GLOBAL_INDEX"] == "5"
    assert env["JOBSET_GLOBAL_REPLICAS"] == "7"  # TestGlobalReplicas: the sum
    report = read(env)
    assert (report.node_rank, len(report.nodes)) == (11, 14)  # 2x2 + 3x2 + 1
    assert report.nodes[11].host == "js-rjob2-3-1.js"
    assert report.notes == (
        "pod 1 of job 3 of replicated job rjob2 (job 5 of the JobSet; "
        "JOBSET_REPLICATED_JOB_NAME, JOBSET_JOB_INDEX, JOB_COMPLETION_INDEX, "
        "DERIVE_ENV_REPLICATED_JOBS); labels checked: JOBSET_REPLICATED_JOB_REPLICAS, "
        "JOBSET_GLOBAL_REPLICAS, JOBSET_JOB_GLOBAL_INDEX",)


# site/static/examples/simple/coordinator.yaml: workers (1 job of 4 pods) then driver (1 of
# 1), spec.coordinator driver/0/0: the label coordinator-example-driver-0-0.coordinator-example.
COORD: Groups = [("workers", 1, 4), ("driver", 1, 1)]
COORD_LABEL = "coordinator-example-driver-0-0.coordinator-example"


def test_the_coordinator_is_the_master_and_node_rank_0_on_every_pod() -> None:
    envs = pods("coordinator-example", COORD, coordinator=COORD_LABEL,
                subdomain="coordinator-example")
    report = read(envs[2])
    assert (report.master, report.node_rank) == (COORD_LABEL, 2)
    assert report.inputs["master"] == ("JOBSET_COORDINATOR", "JOBSET_NAME",
                                       "DERIVE_ENV_REPLICATED_JOBS", "DERIVE_ENV_SUBDOMAIN")
    derived = [derive(env, {PREFIX + "frameworks": "pytorch"}) for env in envs]
    assert [d.topology.node_rank for d in derived] == [1, 2, 3, 4, 0]
    assert {d.changes()["MASTER_ADDR"] for d in derived} == {COORD_LABEL}
    assert len({digest_of(facts_of(d.topology, d)) for d in derived}) == 1


def test_a_coordinator_at_node_0_changes_nothing() -> None:
    """TestConstructJobsFromTemplate's coordinatorKeyValue: <js>-<rjob>-0-0.<js>."""
    env = pod("test-jobset", TWO_JOBS, "replicated-job", 1, 2, subdomain="test-jobset",
              coordinator="test-jobset-replicated-job-0-0.test-jobset")
    report = read(env)
    assert (report.master, report.node_rank, report.nodes[0].host) == (
        None, 5, "test-jobset-replicated-job-0-0.test-jobset")


@pytest.mark.parametrize("value", [
    "coordinator-example-driver-1-0.coordinator-example",  # no job 1
    "coordinator-example-leader-0-0.coordinator-example",  # no such replicated job
    "other-driver-0-0.coordinator-example",  # another JobSet
    "coordinator-example-driver-0-0.elsewhere"])  # another subdomain than /etc/hosts'
def test_a_coordinator_outside_the_layout_is_refused(value: str) -> None:
    env = pod("coordinator-example", COORD, "workers", 0, 1, coordinator=value)
    hosts = etc_hosts("coordinator-example-workers-0-1",
                      "coordinator-example-workers-0-1.coordinator-example.ml.svc.cluster.local")
    assert error(env, hosts) == (
        f"JOBSET_COORDINATOR={value!r}: expected coordinator-example-<rjob>-<jobIndex>-"
        "<podIndex>.<subdomain>, a pod of DERIVE_ENV_REPLICATED_JOBS='workers:1x4,driver:1x1' "
        "in the subdomain 'coordinator-example' (the label jobset.sigs.k8s.io/coordinator: "
        "jobset_controller.go, CoordinatorEndpoint); `- {name: JOBSET_COORDINATOR, valueFrom: "
        "{fieldRef: {fieldPath: \"metadata.labels['jobset.sigs.k8s.io/coordinator']\"}}}`")


def test_the_kubelets_fqdn_gives_the_subdomain() -> None:
    """TestCreateHeadlessSvcIfNecessary "subdomain set": network.subdomain test-subdomain."""
    env = pod("test-jobset", TWO_JOBS, "replicated-job", 0, 1)
    fqdn = "test-jobset-replicated-job-0-1.test-subdomain.default.svc.cluster.local"
    report = read(env, etc_hosts("test-jobset-replicated-job-0-1", fqdn))
    assert report.nodes[0].host == (
        "test-jobset-replicated-job-0-0.test-subdomain.default.svc.cluster.local")
    assert report.inputs["nodes"] == ("JOBSET_NAME", "DERIVE_ENV_REPLICATED_JOBS",
                                      "/etc/hosts")


def test_without_a_subdomain_every_pod_is_refused_alike() -> None:
    texts = {error(env, etc_hosts(env["HOSTNAME"], None)).replace(env["HOSTNAME"], "<pod>")
             for env in pods("train", [("workers", 2, 2)])}
    assert texts == {
        "DERIVE_ENV_SUBDOMAIN='': expected set, or a line naming <pod>.<subdomain>... in "
        "/etc/hosts: the pods' DNS names need the JobSet's subdomain, which the kubelet "
        "writes there when spec.network.enableDNSHostnames is true (JobSet's default). With "
        "hostNetwork or without a readable /etc/hosts, set in every replicated job's "
        "container env: `- {name: DERIVE_ENV_SUBDOMAIN, value: \"train\"}` "
        "(spec.network.subdomain, or the JobSet's name when unset: jobset_controller.go, "
        "GetSubdomain)"}


def test_the_coordinators_subdomain_is_no_subdomain_of_the_pods() -> None:
    """GetSubdomain names the JobSet even with enableDNSHostnames: false (no pod DNS name, no
    /etc/hosts line): the label is checked against the suffix, never its source."""
    env = pod("coordinator-example", COORD, "workers", 0, 1, coordinator=COORD_LABEL)
    for hosts in (None, etc_hosts(env["HOSTNAME"], None)):
        assert error(env, hosts).startswith(
            "DERIVE_ENV_SUBDOMAIN='': expected set, or a line naming "
            "coordinator-example-workers-0-1.<subdomain>... in /etc/hosts: ")


def test_without_the_downward_api_lines_the_hostname_places_every_pod() -> None:
    """Issue 25: JOBSET_NAME and the layout suffice: the Job controller's hostname
    <jobset>-<rjob>-<jobIndex>-<podIndex> gives the replicated job and the job index."""
    groups = [("driver", 1, 1), ("workers", 2, 2)]
    full = [read(env) for env in pods("train", groups, subdomain="train")]
    light = []
    for env in pods("train", groups, subdomain="train", checks=False):
        for name in ("JOBSET_REPLICATED_JOB_NAME", "JOBSET_JOB_INDEX"):
            del env[name]
        light.append(read(env))
    assert [(r.node_rank, r.nodes, r.master, r.job) for r in light] == [
        (r.node_rank, r.nodes, r.master, r.job) for r in full]
    assert [r.node_rank for r in light] == [0, 1, 2, 3, 4]
    assert light[3].inputs["node_rank"] == (
        "HOSTNAME", "JOB_COMPLETION_INDEX", "DERIVE_ENV_REPLICATED_JOBS")
    assert light[3].notes == (
        "pod 0 of job 1 of replicated job workers (job 2 of the JobSet; HOSTNAME, "
        "JOB_COMPLETION_INDEX, DERIVE_ENV_REPLICATED_JOBS); labels checked: none set",)


def test_a_hostname_of_no_jobset_pod_asks_for_the_labels() -> None:
    """hostNetwork: the node's hostname; then the two labels are needed."""
    env = pod("train", [("workers", 2, 2)], "workers", 1, 1, subdomain="train",
              HOSTNAME="gpu-node-a")
    for name in ("JOBSET_REPLICATED_JOB_NAME", "JOBSET_JOB_INDEX"):
        del env[name]
    assert error(env) == (
        "HOSTNAME='gpu-node-a': expected train-<replicated job>-<job index>-<pod index> (the "
        "Job controller's name for a pod of JobSet train, JOBSET_NAME), or, with hostNetwork, "
        "the pod labels in every replicated job's container env: `- {name: "
        "JOBSET_REPLICATED_JOB_NAME, valueFrom: {fieldRef: {fieldPath: \"metadata.labels["
        "'jobset.sigs.k8s.io/replicatedjob-name']\"}}}` `- {name: JOBSET_JOB_INDEX, "
        "valueFrom: {fieldRef: {fieldPath: \"metadata.labels['jobset.sigs.k8s.io/job-index']"
        "\"}}}`. JobSet sets labels, no environment variable (kubernetes-sigs/jobset "
        "pkg/controllers/jobset_controller.go, labelAndAnnotateObject)")


def layout_fix(example: str, others: str = "") -> str:
    """The fix of a bad DERIVE_ENV_REPLICATED_JOBS of JobSet train: its example is the pod's
    own replicated job (issue 25: never another JobSet's ``workers:2x4``)."""
    return (
        "every replicated job of JobSet train in spec.replicatedJobs order, "
        "`<name>:<replicas>x<pods per job>` comma-separated (pods per job: the template's "
        "completions, equal to its parallelism), the same value in every replicated job's "
        f"container env: `- {{name: DERIVE_ENV_REPLICATED_JOBS, value: \"{example}\"}}`"
        f"{others} (the pods of a child Job are on no label)")


LAYOUT_FIX = layout_fix("workers:2x<completions>")


def test_without_the_layout_every_pod_is_refused_naming_its_own_group() -> None:
    groups = [("driver", 1, 1), ("trainers", 2, 2)]
    for env in pods("train", groups, subdomain="train"):
        del env["DERIVE_ENV_REPLICATED_JOBS"]
        rjob, replicas = env["JOBSET_REPLICATED_JOB_NAME"], env["JOBSET_REPLICATED_JOB_REPLICAS"]
        more = 3 - int(replicas)
        assert error(env) == "DERIVE_ENV_REPLICATED_JOBS='': expected " + layout_fix(
            f"{rjob}:{replicas}x<completions>", ", then the other replicated jobs in spec "
            f"order (JOBSET_GLOBAL_REPLICAS=3: {more} more job{'s' if more > 1 else ''})")
    # without the optional labels: the group's name from the hostname, the rest to fill in
    env = pod("train", groups, "trainers", 1, 0, subdomain="train", checks=False)
    for name in ("DERIVE_ENV_REPLICATED_JOBS", "JOBSET_REPLICATED_JOB_NAME", "JOBSET_JOB_INDEX"):
        del env[name]
    assert error(env) == "DERIVE_ENV_REPLICATED_JOBS='': expected " + layout_fix(
        "trainers:<replicas>x<completions>",
        ", with the JobSet's other replicated jobs, if any, in spec order")


@pytest.mark.parametrize(("value", "shown"), [
    ("workers", f"{LAYOUT_FIX}; 'workers' is not one"),
    ("workers:2x0", f"pods per job >= 1: {LAYOUT_FIX}"),
    ("Workers:2x2", f"{LAYOUT_FIX}; 'Workers:2x2' is not one"),
    ("workers:2x2,driver:1x1,driver:1x1", f"each replicated job 'driver' once: {LAYOUT_FIX}"),
    ("workers:300x300", f"each replicated job at most 65536 pods in all, not 90000: "
                        f"{LAYOUT_FIX}"),
    ("driver:1x1", f"a list naming this pod's replicated job 'workers': {LAYOUT_FIX}"),
])
def test_a_bad_layout_is_refused(value: str, shown: str) -> None:
    env = pod("train", [("workers", 2, 2)], "workers", 1, 1, subdomain="train",
              DERIVE_ENV_REPLICATED_JOBS=value)
    assert error(env) == f"DERIVE_ENV_REPLICATED_JOBS={value!r}: expected {shown}"


@pytest.mark.parametrize(("name", "value", "shown", "fix"), [
    ("JOBSET_REPLICATED_JOB_REPLICAS", "3", "2, the replicas of workers in "
     "DERIVE_ENV_REPLICATED_JOBS", layout_fix("workers:3x<completions>")),
    ("JOBSET_GLOBAL_REPLICAS", "4", "3, the sum of the replicas in DERIVE_ENV_REPLICATED_JOBS "
     "(globalReplicas)", layout_fix("workers:2x<completions>", ", then the other replicated "
                                    "jobs in spec order (JOBSET_GLOBAL_REPLICAS=4: 2 more jobs)")),
    ("JOBSET_JOB_GLOBAL_INDEX", "1", "2, the replicas before workers in "
     "DERIVE_ENV_REPLICATED_JOBS plus JOBSET_JOB_INDEX=1 (globalJobIndex)",
     layout_fix("workers:2x<completions>", ", then the other replicated jobs in spec order "
                "(JOBSET_GLOBAL_REPLICAS=3: 1 more job)")),
])
def test_a_label_that_disagrees_with_the_layout_is_refused(name: str, value: str,
                                                           shown: str, fix: str) -> None:
    """A layout typed in another order, or with other sizes, than spec.replicatedJobs."""
    env = pod("train", [("driver", 1, 1), ("workers", 2, 2)], "workers", 1, 0,
              subdomain="train", **{name: value})
    assert error(env) == (
        f"{name}={value!r}: expected {shown}: the label and DERIVE_ENV_REPLICATED_JOBS="
        f"'driver:1x1,workers:2x2' disagree; {fix}")


def test_the_checks_are_optional() -> None:
    env = pod("train", [("driver", 1, 1), ("workers", 2, 2)], "workers", 1, 0,
              subdomain="train", checks=False)
    report = read(env)
    assert report.node_rank == 3
    assert report.notes[0].endswith("labels checked: none set")


def test_a_user_set_index_is_checked_against_the_hostname() -> None:
    """addCompletionIndexEnvVariable returns when the name is already in container.Env."""
    env = pod("train", [("workers", 2, 4)], "workers", 1, 3, subdomain="train",
              JOB_COMPLETION_INDEX="0")
    assert error(env) == (
        "JOB_COMPLETION_INDEX='0': expected 3, the index in this pod's hostname "
        "HOSTNAME='train-workers-1-3' (the Job controller names the pod's host <job>-<index>, "
        "the job train-workers-1 (kubernetes/kubernetes job_controller.go, manageJob; jobset "
        "placement.go, GenJobName)): a JOB_COMPLETION_INDEX set in the pod template's env "
        "wins over the controller's (indexed_job_utils.go, addCompletionIndexEnvVariable); "
        "remove it")


@pytest.mark.parametrize("hostname", ["train-workers-0-3", "gpu-node-a", ""])
def test_the_labels_of_another_pod_or_host_network_are_refused(hostname: str) -> None:
    env = pod("train", [("workers", 2, 4)], "workers", 1, 3, subdomain="train",
              HOSTNAME=hostname)
    assert error(env) == (
        f"HOSTNAME={hostname!r}: expected train-workers-1-3: the Job controller names the "
        "pod's host <job>-<index>, the job train-workers-1 (kubernetes/kubernetes "
        "job_controller.go, manageJob; jobset placement.go, GenJobName), after JOBSET_NAME, "
        "JOBSET_REPLICATED_JOB_NAME and JOBSET_JOB_INDEX; they are another pod's or set by "
        "hand, or the pod has hostNetwork (the node's hostname)")


def test_an_index_beyond_the_pods_per_job_is_refused() -> None:
    env = pod("train", [("workers", 2, 4)], "workers", 1, 3, subdomain="train",
              DERIVE_ENV_REPLICATED_JOBS="workers:2x3")
    assert error(env) == (
        "JOB_COMPLETION_INDEX='3': expected an index below 3, the pods per job of workers in "
        f"DERIVE_ENV_REPLICATED_JOBS: {LAYOUT_FIX}")


def test_a_63_character_hostname_is_read_and_longer_is_not() -> None:
    """kubernetes-sigs/jobset#408: a pod hostname is one DNS label (<= 63 characters)."""
    js = "j" * 51  # j...j-workers-1-3: 63 characters
    env = pod(js, [("workers", 2, 4)], "workers", 1, 3, subdomain="s")
    assert len(env["HOSTNAME"]) == 63
    report = read(env)
    assert (report.nodes[7].host, report.node_rank) == (f"{js}-workers-1-3.s", 7)
    longer = pod(js + "x", [("workers", 2, 4)], "workers", 1, 3, subdomain="s")
    assert error(longer).startswith(
        f"HOSTNAME='{js}x-workers-1-3': expected at most 63 characters (a pod hostname is one "
        "DNS label, pkg/apis/batch/validation, kubernetes-sigs/jobset#408): ")
    # a replicated job whose last pod's hostname would be 64 characters cannot exist
    wide = pod(js, [("workers", 2, 4)], "workers", 1, 3, subdomain="s",
               DERIVE_ENV_REPLICATED_JOBS="workers:2x11")
    assert error(wide).startswith(
        "DERIVE_ENV_REPLICATED_JOBS='workers:2x11': expected each replicated job pod "
        f"hostnames of at most 63 characters, not {js}-workers-1-10 (the Job API refuses it")


@pytest.mark.parametrize(("name", "value", "shown"), [
    ("JOBSET_JOB_INDEX", "-1", "an integer >= 0, the pod label jobset.sigs.k8s.io/job-index"),
    ("JOBSET_JOB_INDEX", "2", "a job index below 2, the replicas of workers in "
                              "DERIVE_ENV_REPLICATED_JOBS"),
    ("JOBSET_NAME", "Train", "a DNS-1035 label, the pod label jobset.sigs.k8s.io/jobset-name"),
    ("JOB_COMPLETION_INDEX", "x", "an integer >= 0 (the pod's completion index"),
    ("DERIVE_ENV_SUBDOMAIN", "a_b", "the JobSet's spec.network.subdomain, or its name 'train' "
                                    "when unset (GetSubdomain)"),
])
def test_bad_values_name_the_variable(name: str, value: str, shown: str) -> None:
    env = pod("train", [("workers", 2, 4)], "workers", 1, 3, subdomain="train", checks=False,
              **{name: value})
    assert error(env).startswith(f"{name}={value!r}: expected {shown}")


def test_a_jobset_pod_is_this_source_not_the_indexed_job() -> None:
    env = pod("t", [("w", 1, 2)], "w", 0, 1, subdomain="t")
    assert [s.name for s in seen_sources(env)] == ["jobset"]
    without = {k: v for k, v in env.items() if k != "JOBSET_NAME"}
    assert [s.name for s in seen_sources(without)] == ["kubernetes-indexed-job"]


def test_torchrun_inside_a_jobset_pod_is_torchrun_alone() -> None:
    env = {**pod("t", [("w", 1, 2)], "w", 0, 1, subdomain="t"), "TORCHELASTIC_RUN_ID": "r",
           "RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
           "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "t-w-0-0.t",
           "MASTER_PORT": "29500"}
    assert [s.name for s in seen_sources(env)] == ["torchrun"]


def test_source_none_in_a_jobset_pod_warns() -> None:
    """--source none wins, but not silently (contract section 11)."""
    from derive_env.sources.compose import topology_from

    env = pod("t", [("w", 2, 2)], "w", 1, 0, subdomain="t")
    assert topology_from(env, "none").warnings == (
        "source none chosen (--source or DERIVE_ENV_SOURCE): the variables of jobset are set "
        "and ignored; if they describe this job, every process may derive another job than "
        "its launcher started",)


def test_the_inputs_are_not_labels() -> None:
    from derive_env.labels import session_labels

    assert session_labels(pod("t", [("w", 1, 2)], "w", 0, 0, subdomain="t")) == ({}, [])


# kubernetes-sigs/jobset@08dfbdf api/jobset/v1alpha2/jobset_types.go: the json tags of
# JobSetSpec, ReplicatedJob, Network and Coordinator.
JOBSET_SPEC = {"replicatedJobs", "network", "successPolicy", "failurePolicy", "startupPolicy",
               "suspend", "coordinator", "managedBy", "ttlSecondsAfterFinished",
               "volumeClaimPolicies"}
REPLICATED_JOB = {"name", "groupName", "template", "replicas", "dependsOn"}
NETWORK = {"enableDNSHostnames", "subdomain", "publishNotReadyAddresses"}
COORDINATOR = {"replicatedJob", "jobIndex", "podIndex"}


def test_the_docs_manifest_names_only_the_apis_fields_and_is_what_the_tests_type() -> None:
    found = manifest("JobSet", "pt")
    assert found["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    spec = found["spec"]
    assert set(spec) <= JOBSET_SPEC
    assert set(spec.get("network", {})) <= NETWORK
    assert set(spec.get("coordinator", {})) <= COORDINATOR
    expected = layout([(r["name"], r.get("replicas", 1), r["template"]["spec"]["completions"])
                       for r in spec["replicatedJobs"]])
    for rjob in spec["replicatedJobs"]:
        assert set(rjob) <= REPLICATED_JOB
        job = rjob["template"]["spec"]
        assert job["completions"] == job["parallelism"]
        pod = job["template"]["spec"]
        containers = pod["containers"] + pod.get("initContainers", [])
        envs = [{e["name"]: e for e in c["env"]} for c in containers]
        assert all(env == envs[0] for env in envs)  # the init container's too
        env = envs[0]
        assert env["DERIVE_ENV_REPLICATED_JOBS"]["value"] == expected
        assert env["DERIVE_ENV_FRAMEWORKS"]["value"] == "pytorch"
        # issue 25: the name, and the coordinator with spec.coordinator; nothing more
        assert {v for v in jobset.LABELS if v in env} == {"JOBSET_NAME", "JOBSET_COORDINATOR"}
        for variable, label in jobset.LABELS.items():
            if variable in env:
                assert env[variable]["valueFrom"] == {
                    "fieldRef": {"fieldPath": f"metadata.labels['{label}']"}}


# -- properties ---------------------------------------------------------------------------

NAME = st.from_regex(r"[a-z]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)


@st.composite
def jobsets(draw: st.DrawFn) -> tuple[str, Groups, str | None]:
    """A JobSet: its name, replicated jobs (distinct names, 0-3 replicas, 1-4 pods per job,
    at least one pod), and a coordinator label or none."""
    names = draw(st.lists(NAME, min_size=1, max_size=4, unique=True))
    groups = [(n, draw(st.integers(0, 3)), draw(st.integers(1, 4))) for n in names]
    if not any(r for _, r, _ in groups):
        groups[0] = (groups[0][0], 1, groups[0][2])
    js = draw(NAME)
    coordinator = None
    if draw(st.booleans()):
        name, replicas, count = draw(st.sampled_from([g for g in groups if g[1]]))
        job, index = draw(st.integers(0, replicas - 1)), draw(st.integers(0, count - 1))
        coordinator = f"{js}-{name}-{job}-{index}.{js}"
    return js, groups, coordinator


@settings(max_examples=60, deadline=None)
@given(job=jobsets(), frameworks=st.sampled_from(["pytorch", "jax", "pytorch,jax,tensorflow"]),
       fqdn=st.booleans())
def test_every_pod_of_a_jobset_derives_one_job(job: tuple[str, Groups, str | None],
                                               frameworks: str, fqdn: bool) -> None:
    js, groups, coordinator = job
    envs = pods(js, groups, subdomain=None if fqdn else js, coordinator=coordinator)
    derivations = []
    for env in envs:
        hosts = etc_hosts(env["HOSTNAME"], f"{env['HOSTNAME']}.{js}.ns.svc.cluster.local")
        derivation = derive(env, {PREFIX + "frameworks": frameworks},
                            files=lambda paths, h=hosts: {p: h for p in paths})
        assert derivation is not None
        derivations.append(derivation)
    topologies = [d.topology for d in derivations]
    assert sorted(t.node_rank for t in topologies) == list(range(len(envs)))
    masters = {t.nodes[0].host.partition(".")[0] for t in topologies}
    first = next(f"{js}-{n}-0-0" for n, r, _ in groups if r)
    assert masters == {coordinator.partition(".")[0] if coordinator else first}
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1
    ports = {tuple(v.value for v in d.variables if v.name.endswith("PORT")) for d in derivations}
    assert len(ports) == 1
    if len(envs) > 1:
        assert all(t.num_nodes == len(envs) for t in topologies)


TEXT = st.text(st.characters(codec="utf-8"), max_size=14) | st.sampled_from(
    ["0", "1", "2", "-1", "01", "t", "w", "t-w-0-1", "t-w-1-0", "w:1x2", "w:2x2,v:1x1",
     "t-w-0-0.t", "99999999999999999999", ""])
NAMES = ["JOB_COMPLETION_INDEX", "HOSTNAME", *jobset.LABELS, "DERIVE_ENV_REPLICATED_JOBS",
         "DERIVE_ENV_SUBDOMAIN"]


@settings(max_examples=300, deadline=None)
@given(values=st.fixed_dictionaries({n: TEXT for n in NAMES}), hosts=TEXT)
def test_arbitrary_text_gives_a_report_or_a_topology_error(values: dict[str, str],
                                                           hosts: str) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", **values}
    try:
        report = read(env, hosts)
    except TopologyError as exc:
        assert str(exc).split("=", 1)[0] in values
        return
    assert 0 <= report.node_rank < len(report.nodes)


@settings(max_examples=40, deadline=None)
@given(job=jobsets())
def test_no_pod_of_a_larger_jobset_derives_a_single_node(job: tuple[str, Groups, str | None]
                                                         ) -> None:
    js, groups, coordinator = job
    for env in pods(js, groups, subdomain=js, coordinator=coordinator):
        for dropped in ("DERIVE_ENV_REPLICATED_JOBS", "DERIVE_ENV_SUBDOMAIN",
                        "JOBSET_JOB_INDEX"):
            partial = {k: v for k, v in env.items() if k != dropped}
            try:
                derivation = derive(partial, {PREFIX + "frameworks": "pytorch"})
            except TopologyError:
                continue
            assert derivation.topology.num_nodes == len(pods(js, groups))


def test_an_image_that_did_not_opt_in_is_told_of_the_larger_job() -> None:
    """The table's states and counts (sources/sizes.py larger_job), no module imported."""
    from derive_env.sources.sizes import larger_job

    first = pod("t", [("w", 2, 2)], "w", 0, 0, subdomain="t")
    assert larger_job(first) == ("a JobSet states a job of more than one pod "
                                 "(JOBSET_GLOBAL_REPLICAS='2')")
    assert larger_job(pod("t", [("w", 1, 1)], "w", 0, 0, subdomain="t")) is None


def test_each_child_job_alone_when_the_indexed_job_source_is_chosen() -> None:
    """docs/sources/kubernetes.md JobSet rule 6: one JAX cluster per Job."""
    from derive_env.sources.compose import topology_from

    env = pod("t", [("w", 2, 2)], "w", 1, 1, subdomain="t", DERIVE_ENV_NNODES="2")
    topology = topology_from(env, "kubernetes-indexed-job")
    assert (topology.source, [n.host for n in topology.nodes], topology.node_rank) == (
        "kubernetes-indexed-job", ["t-w-1-0.t", "t-w-1-1.t"], 1)
