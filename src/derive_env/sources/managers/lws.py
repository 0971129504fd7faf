"""The LeaderWorkerSet source: one group of a LeaderWorkerSet (kubernetes-sigs/lws).

Table line ``lws`` (docs/sources/kubernetes.md). What the controller sets, read from
kubernetes-sigs/lws@060ab4d:

- ``pkg/utils/pod/pod_utils.go`` ``AddLWSVariables``, in every container and init container:
  ``LWS_LEADER_ADDRESS = <lws>-<group>.<subdomain>.<namespace>`` (the leader pod's name, its
  subdomain, the namespace; no ``.svc.<domain>``), ``LWS_GROUP_SIZE`` = the ``size``
  annotation = ``leaderWorkerTemplate.size`` (the leader included), ``LWS_WORKER_INDEX`` = the
  ``worker-index`` label: 0 for the leader, 1..size-1 for workers. ``addEnvVarsIfNotExists``
  puts them first and drops user entries of the same names (LWS wins over the user).
- ``pkg/webhooks/pod_webhook.go`` ``Default``: a worker's index is the StatefulSet ordinal of
  its pod name; the leader pod is ``<lws>-<group>`` (the leader StatefulSet's ordinal is the
  group), with subdomain policy ``UniquePerReplica`` its subdomain is its own name.
- ``pkg/controllers/pod_controller.go`` ``constructWorkerStatefulSetApplyConfiguration``: the
  workers of a group are the StatefulSet named after the leader pod (pods
  ``<leader>-1`` ... ``<leader>-<size-1>``) with the leader's service as its ``serviceName``
  (the set's name under ``Shared``, the leader pod's under ``UniquePerReplica``), so every
  worker's DNS name is ``<leader>-<i>.<subdomain>.<namespace>``, the leader address's domain
  (the controller builds the same names for a TPU group's ``TPU_WORKER_HOSTNAMES``:
  ``pkg/utils/accelerators/tpu.go``, ``AddTPUVariables``).

So one group is one job: node rank = ``LWS_WORKER_INDEX``, nodes = ``LWS_GROUP_SIZE``,
master = the leader. The host list is built exactly from that scheme (the names are the
controller's own, not a guess), so TensorFlow's ``TF_CONFIG`` can be built too. Groups are
separate jobs (each its own leader): the number of groups is not read. The controller's
variables may be re-used by hand in another manifest (docs/sources/kubernetes.md), so the
pod's ``HOSTNAME`` (its pod name) is checked against the scheme: ``<leader>`` for index 0,
``<leader>-<i>`` for worker ``i`` (a name longer than 63 characters cut to 63 as the kubelet
cuts a hostname, ``GeneratePodHostNameAndDomain``).
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
    """A TPU group's ``TPU_WORKER_HOSTNAMES`` / ``TPU_WORKER_ID`` (lws
    ``pkg/utils/accelerators/tpu.go``, ``AddTPUVariables``) must be the group's pods and this
    pod's index: JAX reads them itself (jax ``_src/clusters/cloud_tpu_cluster.py``), and a
    node layer that counts other hosts would contradict it. Reached only with ``--source
    lws``: a pod with ``TPU_WORKER_ID`` is the ``gke-tpu`` source's (sources/managers/tpu.py)."""
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
    """What a LeaderWorkerSet pod's environment says: its group, as one job.

    :param environ: the pod's environment; ``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE`` and
        ``LWS_WORKER_INDEX`` are set (the table line); ``HOSTNAME`` is cross-checked when set.
    :returns: ``nodes``: the leader address, then ``<leader>-<i>.<subdomain>.<namespace>``
        for i = 1 .. ``LWS_GROUP_SIZE`` - 1 (module docstring); ``node_rank`` =
        ``LWS_WORKER_INDEX``; ``job`` = ``("lws", LWS_LEADER_ADDRESS, LWS_GROUP_SIZE)``,
        the same in every pod of the group (for the port policy). No GPU count, no port.
    :raises TopologyError: ``LWS_GROUP_SIZE`` is not an integer >= 1, ``LWS_WORKER_INDEX``
        not one in 0 .. size - 1, ``LWS_LEADER_ADDRESS`` not ``<lws>-<group>.<domain>``, or
        ``HOSTNAME`` is not this pod's name in the scheme, or a TPU group's
        ``TPU_WORKER_HOSTNAMES`` / ``TPU_WORKER_ID`` are not the group's pods and this
        pod's index (:func:`_check_tpu`); the message names the variable,
        its value and the fix.
    """
    got = numbers(environ, line.roles)
    size, index = got["num_nodes"], got["node_rank"]
    # LWS states no limit (its size is an int32): numbers() bounds it (MAX_COUNTED_NODES)
    # before the names are built.
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
