"""The Kubernetes Indexed Job source: one pod per completion index, one node per pod.

Table line ``kubernetes-indexed-job``, docs/sources/kubernetes.md. From kubernetes/kubernetes:
``JOB_COMPLETION_INDEX`` unless the env names it (``pkg/controller/job/indexed_job_utils.go``
``addCompletionIndexEnvVariable``: a user's value wins, so the hostname checks it); the
hostname ``<job>-<index>`` (``job_controller.go`` ``manageJob``); the ``/etc/hosts`` FQDN line
with a ``subdomain`` (``pkg/kubelet/kubelet_pods.go`` ``managedHostsFileContent``). The count
is :data:`NNODES`, the subdomain that line or :data:`SUBDOMAIN`: missing, every index is
refused alike with the manifest lines. Node i is ``<job>-<i>.<subdomain...>``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe, shorten
from derive_env.hosts import host_problem
from derive_env.sources.lists import HOSTS_FILE, MAX_HOSTNAME, SUBDOMAIN, fqdn_suffix, pod_files
from derive_env.sources.report import Report
from derive_env.topology import Node
from derive_env.validation import variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source

#: The pod count, set in the manifest to ``spec.completions`` (not a label: labels.NOT_LABELS).
NNODES = "DERIVE_ENV_NNODES"
#: Kubernetes caps an Indexed Job's parallelism (kubernetes/kubernetes
#: ``pkg/apis/batch/validation/validation.go``, ``maxParallelismForIndexedJob``); the pods of
#: a training job all run at once, so its completions are at most its parallelism.
MAX_PARALLELISM = 100_000

_HOSTNAME = re.compile(r"(?P<job>[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)-(?P<index>0|[1-9][0-9]*)")
_CONTROLLER = ("the Job controller names the pod's host <job>-<index> (kubernetes/kubernetes "
               "pkg/controller/job/job_controller.go, manageJob)")


#: ``/etc/hosts`` unless the subdomain is given (sources/lists.py).
files_needed = pod_files


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
    if len(host) > MAX_HOSTNAME:
        raise TopologyError(describe(
            "HOSTNAME", host, f"at most {MAX_HOSTNAME} characters (a pod hostname is one DNS "
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
    """:data:`NNODES`, >= 1, above ``index`` and at most :data:`MAX_PARALLELISM` (checked
    before the node list is built); unset: the refusal with the manifest lines."""
    value = environ.get(NNODES, "")
    fix = (f"the Job's spec.completions, set in the pod template's container env: `- name: "
           f"{NNODES}` `value: \"<spec.completions of {job}>\"` (a Kubernetes Indexed Job "
           "does not put its pod count in the pod's environment)")
    if not value:
        raise TopologyError(describe(NNODES, value, fix))
    count = variable_int(environ, NNODES, 1, f": {fix}")
    if index >= count:
        raise TopologyError(describe(
            NNODES, value, f"more than JOB_COMPLETION_INDEX={index} (indexes run 0.."
            f"completions-1): {fix}"))
    if count > MAX_PARALLELISM:
        raise TopologyError(describe(
            NNODES, value, f"at most {MAX_PARALLELISM} pods: Kubernetes caps an Indexed "
            f"Job's parallelism at {MAX_PARALLELISM} (pkg/apis/batch/validation, "
            "maxParallelismForIndexedJob), and every pod of a training job runs at once; "
            + fix))
    return count


def _suffix(environ: Mapping[str, str], files: Mapping[str, str | None] | None, job: str,
            host: str) -> tuple[str, tuple[str, ...]]:
    """The name suffix of every pod, and what it came from."""
    given = environ.get(SUBDOMAIN, "")
    if given:
        problem = host_problem(f"{job}-0.{given}")
        if problem is not None or given.startswith("."):
            raise TopologyError(describe(
                SUBDOMAIN, given, f"the pod template's subdomain (the headless Service's "
                f"name), so that {job}-0.<it> is {problem or 'a host name'}"))
        return given, (SUBDOMAIN,)
    suffix = fqdn_suffix((files or {}).get(HOSTS_FILE), host)
    if suffix is None or host_problem(f"{job}-0.{suffix}") is not None:
        raise TopologyError(describe(
            SUBDOMAIN, given, f"set, or a line naming {host}.<subdomain>... in {HOSTS_FILE}: "
            f"node 0 ({job}-0) has a DNS name only with a subdomain and a headless Service; "
            + _manifest(job)))
    return suffix, (HOSTS_FILE,)


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """An Indexed Job pod's environment and ``/etc/hosts`` (when :data:`SUBDOMAIN` is unset).

    :returns: the nodes ``<job>-<i>.<suffix>``, i < :data:`NNODES`, ``node_rank`` =
        ``JOB_COMPLETION_INDEX``, ``job`` = (line name, node 0's name, n); no port.
    :raises TopologyError: the count or the subdomain missing (with the manifest lines, the
        same on every index), an index the hostname contradicts, or a malformed value.
    """
    index, job, host = _index_and_job(environ)
    count = _count(environ, job, index)
    suffix, where = _suffix(environ, files, job, host)
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
