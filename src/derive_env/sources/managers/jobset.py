"""The Kubernetes Job sources: a JobSet's pods (line ``jobset``) and an Indexed Job's (line
``kubernetes-indexed-job``), one node per pod (docs/sources/kubernetes.md). Rules from:

* Indexed Job (kubernetes/kubernetes): ``JOB_COMPLETION_INDEX``, a user's value wins
  (``pkg/controller/job/indexed_job_utils.go`` ``addCompletionIndexEnvVariable``); hostname
  ``<job>-<index>`` (``job_controller.go`` ``manageJob``); the ``/etc/hosts`` FQDN line
  (``pkg/kubelet/kubelet_pods.go`` ``managedHostsFileContent``).
* JobSet (kubernetes-sigs/jobset@08dfbdf): labels (``pkg/controllers/jobset_controller.go``
  ``labelAndAnnotateObject``, ``CoordinatorEndpoint``); child Jobs (``pkg/util/placement/
  placement.go`` ``GenJobName``), Indexed (``pkg/webhooks/jobset_webhook.go`` ``Default``),
  pods ``<job>-<podIndex>`` (kubernetes-sigs/jobset#408) in ``GetSubdomain``'s subdomain.
  Node rank = pods of the jobs before + completion index; master node 0 or the coordinator.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from derive_env.errors import TopologyError, describe, shorten
from derive_env.hosts import host_problem
from derive_env.sources.lists import HOSTS_FILE, MAX_HOSTNAME, SUBDOMAIN, fqdn_suffix, pod_files
from derive_env.sources.lists import MAX_COUNTED_NODES as MAX_NODES  # a typing error beyond
from derive_env.sources.report import Report
from derive_env.topology import Node
from derive_env.validation import at_most, parse_int, variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source

NAME = "JOBSET_NAME"
RJOB = "JOBSET_REPLICATED_JOB_NAME"
RJOB_REPLICAS = "JOBSET_REPLICATED_JOB_REPLICAS"
JOB_INDEX = "JOBSET_JOB_INDEX"
GLOBAL_INDEX = "JOBSET_JOB_GLOBAL_INDEX"
GLOBAL_REPLICAS = "JOBSET_GLOBAL_REPLICAS"
COORDINATOR = "JOBSET_COORDINATOR"
#: The variable -> the pod label the downward API passes in it (jobset_types.go constants).
LABELS = {NAME: "jobset.sigs.k8s.io/jobset-name",
          RJOB: "jobset.sigs.k8s.io/replicatedjob-name",
          JOB_INDEX: "jobset.sigs.k8s.io/job-index",
          RJOB_REPLICAS: "jobset.sigs.k8s.io/replicatedjob-replicas",
          GLOBAL_INDEX: "jobset.sigs.k8s.io/job-global-index",
          GLOBAL_REPLICAS: "jobset.sigs.k8s.io/global-replicas",
          COORDINATOR: "jobset.sigs.k8s.io/coordinator"}
#: Every replicated job, in spec order: ``<rjob>:<replicas>x<pods per job>``, comma-separated
#: (not a label: labels.NOT_LABELS).
LAYOUT = "DERIVE_ENV_REPLICATED_JOBS"

_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # a DNS-1035 label (the webhook's check)
_ENTRY = re.compile(r"(?P<name>[^:]+):(?P<replicas>[0-9]+)x(?P<pods>[0-9]+)")
_POD = re.compile(r"(?P<rjob>.+)-(?P<job>0|[1-9][0-9]*)-(?P<pod>0|[1-9][0-9]*)")
_NO_ENV = ("JobSet sets labels, no environment variable (kubernetes-sigs/jobset "
           "pkg/controllers/jobset_controller.go, labelAndAnnotateObject)")


class Group(NamedTuple):
    """One replicated job of :data:`LAYOUT`: its name, its jobs, the pods of each job."""

    name: str
    replicas: int
    pods: int


#: ``/etc/hosts`` unless the subdomain is given (sources/lists.py), for both lines.
files_needed = pod_files


def downward(variable: str) -> str:
    """The container env entry that passes ``variable``'s label (flow-style YAML)."""
    return (f"`- {{name: {variable}, valueFrom: {{fieldRef: {{fieldPath: \"metadata.labels"
            f"['{LABELS[variable]}']\"}}}}}}`")


def _layout_fix(environ: Mapping[str, str], js: str, rjob: str | None) -> str:
    """What :data:`LAYOUT` must hold, its example built from this pod's own replicated job
    ``rjob`` (and its replicas, when the label is passed), not from another JobSet's."""
    replicas = environ.get(RJOB_REPLICAS, "").strip()
    replicas = replicas if replicas.isascii() and replicas.isdigit() else "<replicas>"
    example = f"{rjob or '<name>'}:{replicas}x<completions>"
    total = environ.get(GLOBAL_REPLICAS, "").strip()
    others = ""
    if total.isascii() and total.isdigit() and replicas.isdigit():
        more = int(total) - int(replicas)
        others = (f", then the other replicated jobs in spec order ({GLOBAL_REPLICAS}={total}: "
                  f"{more} more job{'s' if more > 1 else ''})") if more > 0 else ""
    elif rjob:
        others = ", with the JobSet's other replicated jobs, if any, in spec order"
    return (f"every replicated job of JobSet {shorten(js, 80)} in spec.replicatedJobs order, "
            "`<name>:<replicas>x<pods per job>` comma-separated (pods per job: the template's "
            "completions, equal to its parallelism), the same value in every replicated "
            f"job's container env: `- {{name: {LAYOUT}, value: \"{shorten(example, 120)}\"}}`"
            f"{others} (the pods of a child Job are on no label)")


def _identity(environ: Mapping[str, str]) -> tuple[str, str, int, tuple[str, ...]]:
    """``(jobset, replicated job, job index, their inputs)``: the labels, else ``HOSTNAME``
    ``<jobset>-<rjob>-<jobIndex>-<podIndex>``."""
    js, host = environ[NAME], environ.get("HOSTNAME", "")
    at_most("HOSTNAME", host, len(host), (MAX_HOSTNAME, "characters (a pod hostname is one DNS "
            "label, pkg/apis/batch/validation, kubernetes-sigs/jobset#408): the Job controller "
            "names the pod's host <jobset>-<rjob>-<jobIndex>-<index>"))
    if not _LABEL.fullmatch(js):
        raise TopologyError(describe(NAME, js, f"a DNS-1035 label, the pod label "
                                     f"{LABELS[NAME]}: {downward(NAME)}"))
    parsed = _POD.fullmatch(host[len(js) + 1:]) if host.startswith(js + "-") else None
    missing = [v for v in (RJOB, JOB_INDEX) if not environ.get(v)]
    if missing and parsed is None:
        lines = " ".join(downward(v) for v in missing)
        raise TopologyError(describe(
            "HOSTNAME", host, f"{js}-<replicated job>-<job index>-<pod index> (the Job "
            f"controller's name for a pod of JobSet {shorten(js, 80)}, {NAME}), or, with "
            f"hostNetwork, the pod labels in every replicated job's container env: {lines}. "
            f"{_NO_ENV}"))
    rjob = environ.get(RJOB) or (parsed["rjob"] if parsed else "")
    if not _LABEL.fullmatch(rjob):
        raise TopologyError(describe(
            RJOB, rjob, f"a DNS-1035 label, the pod label {LABELS[RJOB]}: {downward(RJOB)}"))
    job = _number(environ, JOB_INDEX, 0) if environ.get(JOB_INDEX) else int(parsed["job"])
    inputs = tuple(v for v in (RJOB, JOB_INDEX) if environ.get(v)) or ("HOSTNAME",)
    return js, rjob, job, inputs


def _number(environ: Mapping[str, str], variable: str, minimum: int) -> int:
    return variable_int(environ, variable, minimum, f", the pod label {LABELS[variable]}: "
                        f"{downward(variable)}; do not set it by hand")


def layout(environ: Mapping[str, str], js: str, rjob: str | None = None) -> tuple[Group, ...]:
    """:data:`LAYOUT`'s replicated jobs (``rjob``: this pod's, for the fix); TopologyError:
    unset, malformed, a name twice or not a DNS-1035 label, no pod, more than
    :data:`MAX_NODES` pods, or a pod hostname longer than 63 characters."""
    value = environ.get(LAYOUT, "")
    fix = _layout_fix(environ, js, rjob)
    groups: list[Group] = []
    for entry in value.split(",") if value else ():
        found = _ENTRY.fullmatch(entry.strip())
        if found is None or not _LABEL.fullmatch(found["name"]):
            raise TopologyError(describe(LAYOUT, value, f"{fix}; "
                                         f"{shorten(entry.strip(), 80)!r} is not one"))
        try:
            replicas = parse_int(found["replicas"], minimum=0)
            pods = parse_int(found["pods"], minimum=1, what="pods per job >= 1")
        except ValueError as exc:
            raise TopologyError(describe(LAYOUT, value, f"{exc}: {fix}")) from None
        groups.append(Group(found["name"], replicas, pods))
    if not groups:
        raise TopologyError(describe(LAYOUT, value, fix))
    names = [g.name for g in groups]
    total = sum(g.replicas * g.pods for g in groups)
    twice = [n for n in names if names.count(n) > 1]
    problem = (f"{twice[0]!r} once" if twice else
               f"at most {MAX_NODES} pods in all, not {total}" if total > MAX_NODES else None)
    for group in groups:
        longest = f"{js}-{group.name}-{group.replicas - 1}-{group.pods - 1}"
        if group.replicas and len(longest) > MAX_HOSTNAME and problem is None:
            problem = (f"pod hostnames of at most {MAX_HOSTNAME} characters, not {longest} "
                       "(the Job API refuses it: pkg/apis/batch/validation, kubernetes-sigs/"
                       "jobset#408), so a size is wrong")
    if problem is not None:
        raise TopologyError(describe(LAYOUT, value, f"each replicated job {problem}: {fix}"))
    return tuple(groups)


def _place(environ: Mapping[str, str], groups: tuple[Group, ...], rjob: str,
           job: int) -> tuple[Group, int]:
    """This pod's group and the jobs before its job, checked against the optional labels."""
    names = [g.name for g in groups]
    fix = _layout_fix(environ, environ[NAME], rjob)
    if rjob not in names:
        raise TopologyError(describe(
            LAYOUT, environ[LAYOUT], f"a list naming this pod's replicated job {rjob!r}: "
            f"{fix}"))
    at = names.index(rjob)
    group, before = groups[at], sum(g.replicas for g in groups[:at])
    checks = ((RJOB_REPLICAS, group.replicas, f"the replicas of {rjob} in {LAYOUT}"),
              (GLOBAL_REPLICAS, sum(g.replicas for g in groups),
               f"the sum of the replicas in {LAYOUT} (globalReplicas)"),
              (GLOBAL_INDEX, before + job, f"the replicas before {rjob} in {LAYOUT} plus "
               f"{JOB_INDEX}={job} (globalJobIndex)"))
    for variable, expected, what in checks:
        if environ.get(variable) and _number(environ, variable, 0) != expected:
            raise TopologyError(describe(
                variable, environ[variable], f"{expected}, {what}: the label and "
                f"{LAYOUT}={shorten(environ[LAYOUT], 120)!r} disagree; " + fix))
    if job >= group.replicas:
        raise TopologyError(describe(
            JOB_INDEX if environ.get(JOB_INDEX) else "HOSTNAME",
            environ.get(JOB_INDEX) or environ.get("HOSTNAME", ""), f"a job index below "
            f"{group.replicas}, the replicas of {rjob} in {LAYOUT}: {fix}"))
    return group, before


def _index(environ: Mapping[str, str], js: str, group: Group, job: int) -> tuple[int, str]:
    """``(completion index, hostname)``, the index checked against the hostname and the
    pods per job (a user-set ``JOB_COMPLETION_INDEX`` wins over the controller's)."""
    raw, host = environ["JOB_COMPLETION_INDEX"], environ.get("HOSTNAME", "")
    index = variable_int(environ, "JOB_COMPLETION_INDEX", 0,
                         " (the pod's completion index in its Job, 0-based)")
    job_name = f"{js}-{group.name}-{job}"
    controller = (f"the Job controller names the pod's host <job>-<index>, the job {job_name} "
                  "(kubernetes/kubernetes job_controller.go, manageJob; jobset placement.go, "
                  "GenJobName)")
    tail = host[len(job_name) + 1:] if host.startswith(job_name + "-") else ""
    if not re.fullmatch(r"0|[1-9][0-9]*", tail):
        raise TopologyError(describe(
            "HOSTNAME", host, f"{job_name}-{raw}: {controller}, after {NAME}, {RJOB} and "
            f"{JOB_INDEX}; they are another pod's or set by hand, or the pod has hostNetwork "
            "(the node's hostname)"))
    if int(tail) != index:
        raise TopologyError(describe(
            "JOB_COMPLETION_INDEX", raw, f"{tail}, the index in this pod's hostname "
            f"HOSTNAME={host!r} ({controller}): a JOB_COMPLETION_INDEX set in the pod "
            "template's env wins over the controller's (indexed_job_utils.go, "
            "addCompletionIndexEnvVariable); remove it"))
    if index >= group.pods:
        raise TopologyError(describe(
            "JOB_COMPLETION_INDEX", raw, f"an index below {group.pods}, the pods per job of "
            f"{group.name} in {LAYOUT}: {_layout_fix(environ, js, group.name)}"))
    return index, host


def _suffix(environ: Mapping[str, str], files: Mapping[str, str | None] | None, host: str,
            first: str, what: str, fix: str) -> tuple[str, tuple[str, ...]]:
    """Every pod's name suffix and its inputs: :data:`SUBDOMAIN`, else the kubelet's
    ``/etc/hosts`` line for ``host``; never the coordinator label's, set even where no pod
    has a DNS name (``GetSubdomain``). TopologyError: a bad :data:`SUBDOMAIN`, or neither."""
    given = environ.get(SUBDOMAIN, "")
    if given:
        problem = host_problem(f"{first}.{given}")
        if problem is not None or given.startswith("."):
            raise TopologyError(describe(
                SUBDOMAIN, given, f"{what}, so that {first}.<it> is {problem or 'a host name'}"))
        return given, (SUBDOMAIN,)
    found = fqdn_suffix((files or {}).get(HOSTS_FILE), host)
    if found is not None and host_problem(f"{first}.{found}") is None:
        return found, (HOSTS_FILE,)
    raise TopologyError(describe(
        SUBDOMAIN, given, f"set, or a line naming {host}.<subdomain>... in {HOSTS_FILE}: {fix}"))


def _coordinator(environ: Mapping[str, str], js: str, groups: tuple[Group, ...],
                 suffix: str) -> int | None:
    """The node rank (canonical order) of the pod ``spec.coordinator`` names, or ``None``."""
    value = environ.get(COORDINATOR, "")
    if not value:
        return None
    pod, _, subdomain = value.partition(".")
    found = _POD.fullmatch(pod[len(js) + 1:]) if pod.startswith(js + "-") else None
    names = [g.name for g in groups]
    rank, where = None, f"{LAYOUT}={shorten(environ[LAYOUT], 120)!r}"
    if found is not None and found["rjob"] in names:
        at = names.index(found["rjob"])
        group, job, index = groups[at], int(found["job"]), int(found["pod"])
        if job < group.replicas and index < group.pods:
            rank = sum(g.replicas * g.pods for g in groups[:at]) + job * group.pods + index
    if rank is None or subdomain != suffix.partition(".")[0]:
        raise TopologyError(describe(
            COORDINATOR, value, f"{js}-<rjob>-<jobIndex>-<podIndex>.<subdomain>, a pod of "
            f"{where} in the subdomain {suffix.partition('.')[0]!r} (the label "
            f"{LABELS[COORDINATOR]}: jobset_controller.go, CoordinatorEndpoint); "
            f"{downward(COORDINATOR)}"))
    return rank


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """Every pod ``<jobset>-<rjob>-<j>-<i>.<suffix>`` in canonical order, the coordinator as
    master when not node 0, ``job`` = (``jobset``, node 0's name, the pod count); the other
    line: :func:`_indexed`. TopologyError: a label or :data:`LAYOUT` missing (with the
    manifest lines), malformed or disagreeing, a hostname not this pod's."""
    if line.name != "jobset":
        return _indexed(environ, line, files)
    js, rjob, job, placed = _identity(environ)
    groups = layout(environ, js, rjob)
    group, before = _place(environ, groups, rjob, job)
    index, host = _index(environ, js, group, job)
    suffix, where = _suffix(
        environ, files, host, host, f"the JobSet's spec.network.subdomain, or its name {js!r} "
        "when unset (GetSubdomain)", "the pods' DNS names need the JobSet's subdomain, which "
        "the kubelet writes there when spec.network.enableDNSHostnames is true (JobSet's "
        f"default). With hostNetwork or without a readable {HOSTS_FILE}, set in every "
        f"replicated job's container env: `- {{name: {SUBDOMAIN}, value: \"{js}\"}}` "
        "(spec.network.subdomain, or the JobSet's name when unset: jobset_controller.go, "
        "GetSubdomain)")
    offset = sum(g.replicas * g.pods for g in groups[:groups.index(group)])
    rank = offset + job * group.pods + index
    nodes = tuple(Node(f"{js}-{g.name}-{j}-{i}.{suffix}", g.name, j * g.pods + i + 1)
                  for g in groups for j in range(g.replicas) for i in range(g.pods))
    coordinator = _coordinator(environ, js, groups, suffix)
    checked = [v for v in (RJOB_REPLICAS, GLOBAL_REPLICAS, GLOBAL_INDEX) if environ.get(v)]
    spread = (NAME, LAYOUT, *where)
    return Report(
        source=line.name,
        title=line.title,
        nodes=nodes,
        node_rank=rank,
        master=nodes[coordinator].host if coordinator else None,
        job=(line.name, nodes[0].host, str(len(nodes))),
        inputs={"nodes": spread, "num_nodes": (LAYOUT,),
                "node_rank": (*placed, "JOB_COMPLETION_INDEX", LAYOUT),
                "master": (COORDINATOR, *spread) if coordinator is not None else spread,
                "ports": spread},
        order="the replicated jobs in spec order, their jobs by index, each job's pods by "
              "completion index",
        notes=(f"pod {index} of job {job} of replicated job {shorten(rjob, 80)} (job "
               f"{before + job} of the JobSet; {', '.join(placed)}, JOB_COMPLETION_INDEX, "
               f"{LAYOUT}); labels checked: {', '.join(checked) or 'none set'}",),
    )


#: The pod count, set in the manifest to ``spec.completions`` (not a label: labels.NOT_LABELS).
NNODES = "DERIVE_ENV_NNODES"
#: Kubernetes caps an Indexed Job's parallelism (``pkg/apis/batch/validation/validation.go``,
#: ``maxParallelismForIndexedJob``), and a training job's pods all run at once.
MAX_PARALLELISM = 100_000

_HOSTNAME = re.compile(r"(?P<job>[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)-(?P<index>0|[1-9][0-9]*)")
_CONTROLLER = ("the Job controller names the pod's host <job>-<index> (kubernetes/kubernetes "
               "pkg/controller/job/job_controller.go, manageJob)")


def _manifest(job: str) -> str:
    return (f"add to the Job's pod template (spec.template.spec): `subdomain: {job}` and create "
            f"the headless Service it names (kind: Service, metadata.name: {job}, spec.clusterIP:"
            f" None, spec.selector: batch.kubernetes.io/job-name: {job}); the kubelet then writes"
            f" the pod's name into {HOSTS_FILE}. With hostNetwork or without a readable "
            f"{HOSTS_FILE}, also set in the container's env: `- name: {SUBDOMAIN}` `value: "
            f"\"{job}\"`")


def _index_and_job(environ: Mapping[str, str]) -> tuple[int, str, str]:
    """``(index, job name, hostname)`` from ``JOB_COMPLETION_INDEX`` and ``HOSTNAME``."""
    raw = environ["JOB_COMPLETION_INDEX"]
    index = variable_int(environ, "JOB_COMPLETION_INDEX", 0, " (the pod's completion index, "
                         "0-based: indexed_job_utils.go); do not set it in the pod template's env")
    host = environ.get("HOSTNAME", "")
    at_most("HOSTNAME", host, len(host), (MAX_HOSTNAME, "characters (a pod hostname is one DNS "
            f"label, pkg/apis/batch/validation): {_CONTROLLER}"))
    found = _HOSTNAME.fullmatch(host)
    if found is None:
        raise TopologyError(describe(
            "HOSTNAME", host, f"<job>-<JOB_COMPLETION_INDEX>: {_CONTROLLER}; a pod with "
            "hostNetwork has the node's hostname, and an Indexed Job without its pod "
            "hostnames cannot name node 0"))
    if int(found["index"]) != index:
        raise TopologyError(describe(
            "JOB_COMPLETION_INDEX", raw,
            f"{found['index']}, the index in this pod's hostname HOSTNAME={host!r} "
            f"({_CONTROLLER}): a JOB_COMPLETION_INDEX set in the pod template's env wins over "
            "the controller's (indexed_job_utils.go, addCompletionIndexEnvVariable); remove it"))
    return index, found["job"], host


def _count(environ: Mapping[str, str], job: str, index: int) -> int:
    """:data:`NNODES`, >= 1, at most :data:`MAX_PARALLELISM` (before the node list is built),
    above ``index``; unset: the refusal with the manifest lines."""
    value = environ.get(NNODES, "")
    fix = (f"the Job's spec.completions, set in the pod template's container env: `- name: "
           f"{NNODES}` `value: \"<spec.completions of {job}>\"` (a Kubernetes Indexed Job "
           "does not put its pod count in the pod's environment)")
    if not value:
        raise TopologyError(describe(NNODES, value, fix))
    count = variable_int(environ, NNODES, 1, f": {fix}", (MAX_PARALLELISM, (
        f"pods: Kubernetes caps an Indexed Job's parallelism at {MAX_PARALLELISM} (pkg/apis/"
        "batch/validation, maxParallelismForIndexedJob), and every pod of a training job runs "
        f"at once; {fix}")))
    if index >= count:
        raise TopologyError(describe(
            NNODES, value, f"more than JOB_COMPLETION_INDEX={index} (indexes run 0.."
            f"completions-1): {fix}"))
    return count


def _indexed(environ: Mapping[str, str], line: Source,
              files: Mapping[str, str | None] | None) -> Report:
    """An Indexed Job pod's nodes ``<job>-<i>.<suffix>``, i < :data:`NNODES`, ``node_rank``
    = ``JOB_COMPLETION_INDEX``, ``job`` = (line name, node 0's name, n). TopologyError: the
    count or subdomain missing (with the manifest lines), an index the hostname contradicts,
    a malformed value."""
    index, job, host = _index_and_job(environ)
    count = _count(environ, job, index)
    suffix, where = _suffix(
        environ, files, host, f"{job}-0", "the pod template's subdomain (the headless "
        "Service's name)", f"node 0 ({job}-0) has a DNS name only with a subdomain and a "
        f"headless Service; {_manifest(job)}")
    nodes = tuple(Node(f"{job}-{i}.{suffix}") for i in range(count))
    return Report(
        source=line.name,
        title=line.title,
        nodes=nodes,
        node_rank=index,
        job=(line.name, nodes[0].host, str(count)),
        inputs={"nodes": ("HOSTNAME", NNODES, *where), "node_rank": ("JOB_COMPLETION_INDEX",),
                "num_nodes": (NNODES,), "master": ("HOSTNAME", *where),
                "ports": ("HOSTNAME", *where, NNODES)},
        order="the Job completion index (pod <job>-<i> is node i)",
        notes=(f"pod {index} of {count} (JOB_COMPLETION_INDEX, {NNODES}); node i is "
               f"{shorten(job, 80)}-<i>.{shorten(suffix, 80)} (HOSTNAME, "
               f"{' '.join(where)})",),
    )
