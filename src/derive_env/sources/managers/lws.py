"""The LeaderWorkerSet source: one group of a LeaderWorkerSet (kubernetes-sigs/lws), one job.

Table line ``lws``, docs/sources/kubernetes.md. From kubernetes-sigs/lws@060ab4d:
``pkg/utils/pod/pod_utils.go`` ``AddLWSVariables`` sets ``LWS_LEADER_ADDRESS =
<lws>-<group>.<subdomain>.<namespace>``, ``LWS_GROUP_SIZE``, ``LWS_WORKER_INDEX`` (the leader
0); the leader pod is ``<lws>-<group>`` (``pkg/webhooks/pod_webhook.go`` ``Default``), the
workers ``<leader>-<i>`` in its subdomain (``pkg/controllers/pod_controller.go``
``constructWorkerStatefulSetApplyConfiguration``), as ``HOSTNAME`` (cut to 63 characters:
the kubelet's ``GeneratePodHostNameAndDomain``) must be.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe
from derive_env.hosts import host_problem
from derive_env.sources import BY_NAME
from derive_env.sources.lists import pod_hostname
from derive_env.sources.report import Report
from derive_env.sources.roles import numbers
from derive_env.topology import nodes_of

if TYPE_CHECKING:
    from derive_env.sources import Source

_FIX = BY_NAME["lws"].roles["why"]


def _leader(environ: Mapping[str, str]) -> tuple[str, str]:
    """The leader pod's name and the group's DNS domain (``<subdomain>.<namespace>``)."""
    address = environ["LWS_LEADER_ADDRESS"]
    problem = host_problem(address)
    if problem:
        raise TopologyError(describe("LWS_LEADER_ADDRESS", address, f"{problem}; {_FIX}"))
    pod, _, domain = address.partition(".")
    group = pod.rpartition("-")[2]
    if not domain or "-" not in pod or not (group.isascii() and group.isdigit()):
        raise TopologyError(describe(
            "LWS_LEADER_ADDRESS", address,
            f"<lws>-<group>.<subdomain>.<namespace>, the leader pod's DNS name (pod_utils.go, "
            f"AddLWSVariables); {_FIX}"))
    return pod, domain


def _check_hostname(environ: Mapping[str, str], own: str, index: int) -> None:
    """The pod's ``HOSTNAME`` is ``own`` (the kubelet's 63-character cut of it)."""
    hostname = environ.get("HOSTNAME", "")
    if not hostname:
        return
    expected = {own.lower(), pod_hostname(own).lower()}
    if hostname.partition(".")[0].lower() not in expected:
        who = "the leader (LWS_WORKER_INDEX=0)" if index == 0 else (
            f"worker LWS_WORKER_INDEX={index} of the group, <leader>-<index>")
        raise TopologyError(describe(
            "HOSTNAME", hostname,
            f"{own!r}: a LeaderWorkerSet names {who} (pod_webhook.go, pod_controller.go) "
            f"after LWS_LEADER_ADDRESS={environ['LWS_LEADER_ADDRESS']!r}; the LWS_* "
            "variables here are another pod's or set by hand: remove them from the "
            "manifest, or choose the source (--source)"))


def _check_tpu(environ: Mapping[str, str], size: int, index: int) -> None:
    """A TPU group's ``TPU_WORKER_*`` (lws tpu.go, AddTPUVariables) are the group's, as JAX
    reads them (``_src/clusters/cloud_tpu_cluster.py``); only with ``--source lws``."""
    hosts = environ.get("TPU_WORKER_HOSTNAMES", "")
    if not hosts:
        return
    count = len(hosts.split(","))
    if count != size:
        why = ("the leader requests no TPU, so the TPU workers are the other pods, their ids "
               "shifted by one" if count == size - 1 else "a subGroupPolicy makes each "
               "subgroup its own TPU slice (addTPUVariablesSubGroup)")
        raise TopologyError(describe(
            "TPU_WORKER_HOSTNAMES", hosts,
            f"{size} hosts, the group's pods (LWS_GROUP_SIZE): it lists {count}: {why} "
            "(lws tpu.go, AddTPUVariables), and JAX, which reads TPU_WORKER_* itself, would "
            "count other processes than the group's nodes. Request the TPU in the leader "
            "too, or run the command without derive-env"))
    worker = environ.get("TPU_WORKER_ID", "")
    if worker and worker != str(index):
        raise TopologyError(describe(
            "TPU_WORKER_ID", worker,
            f"{index}, LWS_WORKER_INDEX (the leader requests a TPU, so the TPU ids are the "
            "worker indices: lws tpu.go, AddTPUVariables)"))


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """A LeaderWorkerSet pod's group as one job: the leader address, then ``<leader>-<i>.
    <subdomain>.<namespace>``, i < size; ``job`` = ``("lws", LWS_LEADER_ADDRESS,
    LWS_GROUP_SIZE)``. No GPU count, no port. TopologyError: a size or index, a leader
    address not ``<lws>-<group>.<domain>``, a ``HOSTNAME`` not this pod's, a TPU group unlike
    the group."""
    got = numbers(environ, line.roles)
    size, index = got["num_nodes"], got["node_rank"]
    # LWS states no limit (an int32): numbers() bounds it before the names are built.
    pod, domain = _leader(environ)
    names = [pod] + [f"{pod}-{i}" for i in range(1, size)]
    _check_hostname(environ, names[index], index)
    _check_tpu(environ, size, index)
    hosts = [environ["LWS_LEADER_ADDRESS"]] + [f"{name}.{domain}" for name in names[1:]]
    role = "the leader" if index == 0 else f"worker {index}"
    return Report(
        source=line.name,
        title=line.title,
        nodes=nodes_of(hosts),
        node_rank=index,
        job=("lws", environ["LWS_LEADER_ADDRESS"], str(size)),
        inputs={"nodes": ("LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE"),
                "node_rank": ("LWS_WORKER_INDEX",), "num_nodes": ("LWS_GROUP_SIZE",),
                "master": ("LWS_LEADER_ADDRESS",),
                "ports": ("LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE")},
        order="the LWS worker index (the leader 0, worker i: <leader>-<i> in the leader's "
              "subdomain, pod_controller.go)",
        notes=(f"pod {index} of a group of {size} ({role}; LWS_WORKER_INDEX, LWS_GROUP_SIZE); "
               "one group is one job, the other groups are other jobs",),
    )
