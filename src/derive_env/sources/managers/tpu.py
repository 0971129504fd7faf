"""A host of a multi-host TPU slice or of several: line ``gke-tpu``, docs/sources/kubernetes.md.
``TPU_WORKER_ID``, ``TPU_WORKER_HOSTNAMES`` come from the GKE TPU webhook (closed; GKE's
docs), LeaderWorkerSet (kubernetes-sigs/lws ``pkg/utils/accelerators/tpu.go``
``AddTPUVariables``, ``addTPUVariablesSubGroup``) or KubeRay (GoogleCloudPlatform/ai-on-gke
``ray-on-gke/tpu/kuberay-tpu-webhook/main.go`` ``genDNSHostnames``); ``MEGASCALE_*`` from the
manifest. Read as JAX does (:data:`_JAX` ``GkeTpuCluster``; PyTorch/XLA's
``torch_xla/_internal/tpu.py`` alike): the workers ``TPU_PROCESS_ADDRESSES`` else
``TPU_WORKER_HOSTNAMES``, the coordinator ``MEGASCALE_COORDINATOR_ADDRESS`` else the first
worker (each cut at ``:``), the id ``TPU_WORKER_ID`` + ``MEGASCALE_SLICE_ID`` x workers; what
JAX would read otherwise is refused, never guessed. No GPU count (the chips are libtpu's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe
from derive_env.hosts import check_hosts, host_problem, is_ip, repeated_host
from derive_env.sources.lists import NODE_COUNT
from derive_env.sources.report import Report
from derive_env.topology import nodes_of
from derive_env.validation import variable_index, variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source

_FIX = ("the TPU webhook (GKE, LeaderWorkerSet or KubeRay) sets it in the container that "
        "requests google.com/tpu; do not set it in the manifest's env")
_JAX = "jax _src/clusters/cloud_tpu_cluster.py"


def _label(host: str) -> str:
    return host.partition(".")[0].lower()


def _hosts(environ: Mapping[str, str]) -> list[str]:
    """``TPU_WORKER_HOSTNAMES`` as JAX splits it, each entry a host, without port, once."""
    text = environ["TPU_WORKER_HOSTNAMES"]
    hosts = text.split(",")
    bad = next(((i, h, "a host name or IPv4 address without ':' (JAX cuts an entry at its "
                 "first ':')") for i, h in enumerate(hosts, 1) if ":" in h), None)
    bad = bad or check_hosts(hosts)
    if bad is not None:
        raise TopologyError(describe("TPU_WORKER_HOSTNAMES", text, (
            f"the slice's hosts joined by ',': entry {bad[0]} ({bad[1]!r}) is not {bad[2]}; "
            f"{_FIX}")))
    twice = repeated_host(hosts)
    if twice is not None:
        raise TopologyError(describe("TPU_WORKER_HOSTNAMES", text, (
            f"each host once: {twice!r} is listed twice (one entry per TPU container: "
            "several JAX processes per host, which JAX counts as processes and derive-env "
            "would count as nodes); request google.com/tpu in one container per pod, or run "
            "the command without derive-env")))
    addresses = environ.get("TPU_PROCESS_ADDRESSES", "")
    if addresses and [a.split(":")[0] for a in addresses.split(",")] != hosts:
        raise TopologyError(describe("TPU_PROCESS_ADDRESSES", addresses, (
            f"one <host>:<port> per host of TPU_WORKER_HOSTNAMES={text!r}, in its order: JAX "
            f"reads TPU_PROCESS_ADDRESSES first ({_JAX}, GkeTpuCluster), so its hosts are "
            "the job's processes; several per host (or other hosts) are not one process per "
            "node: run the command without derive-env")))
    return hosts


#: Each slice is one host or more: at most lists.MAX_COUNTED_NODES of them.
_SLICES = (NODE_COUNT[0], "slices (each of one host or more; " + NODE_COUNT[1] + ")")


def _slices(environ: Mapping[str, str]) -> tuple[int, int, str | None]:
    """``(slices, this slice's id, the coordinator host)`` as JAX reads them
    (``_get_num_slices``, ``_get_slice_id``, ``get_coordinator_address``)."""
    slices = (variable_int(environ, "MEGASCALE_NUM_SLICES", 1, maximum=_SLICES)
              if environ.get("MEGASCALE_NUM_SLICES") else 1)
    slice_id = (variable_int(environ, "MEGASCALE_SLICE_ID", 0)
                if environ.get("MEGASCALE_SLICE_ID") else 0)
    if slice_id >= slices:
        raise TopologyError(describe("MEGASCALE_SLICE_ID", environ["MEGASCALE_SLICE_ID"], (
            f"a slice id below MEGASCALE_NUM_SLICES={str(slices)!r} (slices are numbered "
            "from 0)")))
    need = [n for n in ("MEGASCALE_SLICE_ID", "MEGASCALE_COORDINATOR_ADDRESS")
            if not environ.get(n)]
    if slices > 1 and need:
        raise TopologyError(describe("MEGASCALE_NUM_SLICES", environ["MEGASCALE_NUM_SLICES"], (
            f"{need[0]} beside it: JAX reads a missing slice id as 0 and a missing "
            "coordinator as this slice's first host, so the slices would number their hosts "
            "alike or start one coordinator each; set MEGASCALE_SLICE_ID (JobSet: the "
            "jobset.sigs.k8s.io/job-index label) and MEGASCALE_COORDINATOR_ADDRESS (the host "
            "of slice 0's worker 0) on every host")))
    address = environ.get("MEGASCALE_COORDINATOR_ADDRESS", "")
    if not address:
        return slices, slice_id, None
    host = address.split(":")[0]
    problem = host_problem(host)
    if problem:
        raise TopologyError(describe("MEGASCALE_COORDINATOR_ADDRESS", address, (
            f"<host> or <host>:<port>, the host of slice 0's worker 0 (JAX takes the part "
            f"before the first ':', {_JAX}): {host!r} is not {problem}")))
    return slices, slice_id, host


def _check_hostname(environ: Mapping[str, str], hosts: list[str], worker: int) -> None:
    """The pod's ``HOSTNAME``, when the list holds pod names (KubeRay's ``<group>-<replica>-
    <id>``), is the entry ``TPU_WORKER_ID`` points at (pitfall 6: a user's ``TPU_WORKER_ID``)."""
    hostname = _label(environ.get("HOSTNAME", ""))
    if not hostname:
        return
    cut = len(hostname)
    found = [i for i, h in enumerate(hosts) if h[:cut].lower() == hostname
             and h[cut:cut + 1] in ("", ".") and not is_ip(h)]
    if len(found) == 1 and found[0] != worker:  # else addresses, or not this pod's name
        raise TopologyError(describe("TPU_WORKER_ID", environ["TPU_WORKER_ID"], (
            f"{found[0]}: this pod's HOSTNAME={environ['HOSTNAME']!r} is entry {found[0]} of "
            "TPU_WORKER_HOSTNAMES (0-based), and the webhooks number a slice's hosts in that "
            "order (JAX and PyTorch/XLA take the list's entry TPU_WORKER_ID as this host); "
            "remove TPU_WORKER_ID from the manifest's env")))


def _lws(environ: Mapping[str, str], count: int, worker: int) -> list[str]:
    """A LeaderWorkerSet TPU group's warnings: its TPU ids are the worker indices, shifted by
    one when the leader requests no TPU (lws tpu.go); each subgroup is a slice of its own."""
    if not (environ.get("LWS_GROUP_SIZE") and environ.get("LWS_WORKER_INDEX")):
        return []
    size = variable_int(environ, "LWS_GROUP_SIZE", 1)
    index = variable_int(environ, "LWS_WORKER_INDEX", 0)
    if count not in (size, size - 1):
        return []  # subgroups (addTPUVariablesSubGroup): each subgroup its own slice
    shift = size - count
    if worker != index - shift:
        raise TopologyError(describe("TPU_WORKER_ID", environ["TPU_WORKER_ID"], (
            f"{index - shift}, LWS_WORKER_INDEX={environ['LWS_WORKER_INDEX']!r}"
            f"{' - 1' if shift else ''} (lws tpu.go, AddTPUVariables: the TPU ids are the "
            f"worker indices{', shifted by one: the leader requests no TPU' if shift else ''})"
            "; remove TPU_WORKER_ID from the manifest's env")))
    if not shift:
        return []
    return [f"the slice is the {count} TPU workers of this LeaderWorkerSet group of {size} "
            "(TPU_WORKER_HOSTNAMES): its leader requests no TPU and is not in it (JAX's view, "
            "followed here); run the leader's command with --source none (or without "
            "derive-env), or request the TPU in the leader too"]


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """This host's slices as JAX reads them (module docstring); the job ``("gke-tpu",
    master, "<slices>x<hosts>")``. TopologyError: what JAX would read otherwise, with a fix."""
    hosts = _hosts(environ)
    worker = variable_index(environ, "TPU_WORKER_ID",
                   (len(hosts), f"the {len(hosts)} hosts of TPU_WORKER_HOSTNAMES"), _FIX)
    _check_hostname(environ, hosts, worker)
    slices, slice_id, coordinator = _slices(environ)
    if slices * len(hosts) > NODE_COUNT[0]:  # the job's hosts, not the slices alone
        raise TopologyError(describe("MEGASCALE_NUM_SLICES", environ["MEGASCALE_NUM_SLICES"], (
            f"at most {NODE_COUNT[0] // len(hosts)} slices of {len(hosts)} hosts "
            f"(TPU_WORKER_HOSTNAMES): at most {NODE_COUNT[0]} {NODE_COUNT[1]}")))
    warnings = _lws(environ, len(hosts), worker)
    master = coordinator or hosts[0]
    if coordinator and slice_id == 0 and _label(coordinator) != _label(hosts[0]) and not (
            is_ip(coordinator) or is_ip(hosts[0])):
        warnings.append(
            f"MEGASCALE_COORDINATOR_ADDRESS names {coordinator!r}, and this slice 0's first "
            f"host is {hosts[0]!r}: JAX takes the coordinator's (followed here); it must be "
            "the host of TPU_WORKER_ID=0 in slice 0")
    listed = ("TPU_WORKER_HOSTNAMES",)
    inputs = {"nodes": listed, "node_rank": ("TPU_WORKER_ID",), "num_nodes": listed,
              "master": ("MEGASCALE_COORDINATOR_ADDRESS",) if coordinator else listed,
              "ports": listed}
    notes = [f"host {worker} of a slice of {len(hosts)} (TPU_WORKER_ID, TPU_WORKER_HOSTNAMES);"
             " no GPU count: a TPU host's chips are libtpu's (nproc_per_node is not derived "
             "from them)"]
    rank, count = worker, len(hosts)
    if slices > 1:
        rank, count = slice_id * len(hosts) + worker, slices * len(hosts)
        inputs["node_rank"] = ("TPU_WORKER_ID", "MEGASCALE_SLICE_ID")
        inputs["num_nodes"] = ("TPU_WORKER_HOSTNAMES", "MEGASCALE_NUM_SLICES")
        inputs["ports"] = ("MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES",
                           "TPU_WORKER_HOSTNAMES")
        notes.append(f"slice {slice_id} of {slices} (MEGASCALE_SLICE_ID, MEGASCALE_NUM_SLICES):"
                     f" node {rank} of {count}, slice-major; the other slices' hosts are in "
                     "no variable")
    return Report(
        source=line.name, title=line.title, nodes=nodes_of(hosts) if slices == 1 else (),
        node_rank=rank, num_nodes=None if slices == 1 else count, master=coordinator,
        job=(line.name, master, f"{slices}x{len(hosts)}"), inputs=inputs,
        order=("the order of TPU_WORKER_HOSTNAMES (node rank = TPU_WORKER_ID)" if slices == 1
               else "slice-major: MEGASCALE_SLICE_ID x hosts per slice + TPU_WORKER_ID")
        + f", the order of JAX's process ids ({_JAX})",
        notes=tuple(notes), warnings=tuple(warnings))
