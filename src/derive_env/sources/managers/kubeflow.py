"""The Kubeflow PyTorch sources (docs/sources/kubeflow.md): torchrun's ``PET_*`` defaults per
pod, read and kept (``preset``); torchrun, started in the pod, runs the workers.

- ``kubeflow-pytorchjob`` (kubeflow/training-operator ``pkg/controller.v1/pytorch/envvar.go``
  ``setPodEnv``, ``master.go``, ``elastic.go``): ``MASTER_ADDR`` = ``<job>-master-0``
  (``localhost`` on the master pod up to v1.3, ``pytorch.go``), ``RANK`` = ``PET_NODE_RANK``
  = the pod's rank, ``WORLD_SIZE`` = pods x nproc (pods when not an integer,
  ``getNprocPerNodeInt``), ``PET_NNODES`` = pods or ``MIN:MAX``; ``RANK``/``WORLD_SIZE`` are
  a process's only with nproc 1 (training-operator#1790).
- ``kubeflow-trainjob`` (kubeflow/trainer ``pkg/runtime/framework/plugins/torch/torch.go``
  ``EnforceMLPolicy``): ``PET_NODE_RANK`` = the Job completion index, ``PET_MASTER_*``.
- nproc per node: an integer or ``auto``/``cpu``/``gpu``/``xpu`` (torch/distributed/run.py,
  ``determine_local_world_size``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe
from derive_env.hosts import is_loopback
from derive_env.sources.lists import MAX_HOSTNAME
from derive_env.sources.report import Processes, Report
from derive_env.sources.roles import checked_master
from derive_env.validation import parse_int, variable_index, variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source

#: Words torchrun accepts for --nproc-per-node besides an integer (run.py).
NPROC_WORDS = ("auto", "cpu", "gpu", "xpu")

_FIX = {
    "kubeflow-pytorchjob": "the training operator sets it for every pod (kubeflow/"
    "training-operator pkg/controller.v1/pytorch/envvar.go); do not set it in the pod "
    "template's env",
    "kubeflow-trainjob": "the trainer sets it for every node (kubeflow/trainer pkg/runtime/"
    "framework/plugins/torch/torch.go); do not set it in the TrainJob's or runtime's env",
}


def _nproc(environ: Mapping[str, str], fix: str) -> int | None:
    """``PET_NPROC_PER_NODE``: the integer, or None for torchrun's words (its decision)."""
    value = environ["PET_NPROC_PER_NODE"]
    if value in NPROC_WORDS:
        return None
    try:
        return parse_int(value, minimum=1)
    except ValueError:
        raise TopologyError(describe(
            "PET_NPROC_PER_NODE", value,
            f"an integer >= 1 or one of {', '.join(NPROC_WORDS)} (torchrun's "
            f"--nproc-per-node, torch/distributed/run.py); {fix}")) from None


def _nnodes(environ: Mapping[str, str], fix: str, elastic: bool) -> int | None:
    """``PET_NNODES``: the node count; None for an elastic ``MIN:MAX`` (elastic.go)."""
    value = environ["PET_NNODES"]
    low, sep, high = value.partition(":")
    expected = "an integer >= 1" + (" or MIN:MAX with 1 <= MIN <= MAX" if elastic else "")
    try:
        if sep and not elastic:
            raise ValueError
        low_n = parse_int(low, minimum=1)
        high_n = parse_int(high, minimum=low_n) if sep else low_n
    except ValueError:
        raise TopologyError(describe("PET_NNODES", value, f"{expected}; {fix}")) from None
    return low_n if low_n == high_n else None


def _node_rank(environ: Mapping[str, str], nodes: int | None, fix: str) -> int:
    """``PET_NODE_RANK``, below ``PET_NNODES`` unless that is an elastic range."""
    if nodes is None:
        return variable_int(environ, "PET_NODE_RANK", 0, f"; {fix}")
    return variable_index(environ, "PET_NODE_RANK", (nodes, f"PET_NNODES="
                                                     f"{environ['PET_NNODES']!r}"), fix)


def _pytorchjob(environ: Mapping[str, str], line: Source) -> Report:
    fix = _FIX[line.name]
    nodes = _nnodes(environ, fix, elastic=True)
    node_rank = _node_rank(environ, nodes, fix)
    pod_rank = variable_int(environ, "RANK", 0, f"; {fix}")
    if pod_rank != node_rank:
        raise TopologyError(describe(
            "RANK", environ["RANK"],
            f"PET_NODE_RANK={environ['PET_NODE_RANK']!r}: a PyTorchJob sets both to the pod's "
            f"rank (envvar.go, setPodEnv); {fix}"))
    nproc = _nproc(environ, fix)
    world = variable_int(environ, "WORLD_SIZE", 1, f"; {fix}")
    if nodes is not None and world != nodes * (nproc or 1):  # envvar.go: pods for a word
        per = (f"x PET_NPROC_PER_NODE={environ['PET_NPROC_PER_NODE']!r} = {nodes * nproc}"
               if nproc else f"(pods; PET_NPROC_PER_NODE={environ['PET_NPROC_PER_NODE']!r} is "
               "not a number)")
        raise TopologyError(describe(
            "WORLD_SIZE", environ["WORLD_SIZE"],
            f"PET_NNODES={environ['PET_NNODES']!r} {per} (envvar.go, setPodEnv); {fix}"))
    master, port, named = _pod_master(environ, node_rank, "PET_NODE_RANK", fix)
    for pet, name in (("PET_MASTER_ADDR", "MASTER_ADDR"), ("PET_MASTER_PORT", "MASTER_PORT")):
        if environ.get(pet) and environ[pet] != environ[name]:
            raise TopologyError(describe(
                pet, environ[pet],
                f"{name}={environ[name]!r}: the operator sets both to the same value "
                f"(master.go); {fix}"))
    one = nproc == 1  # only then are RANK / WORLD_SIZE this process's (training-operator#1790)
    inputs = {"node_rank": ("PET_NODE_RANK",), "num_nodes": ("PET_NNODES",),
              "master": named, "master_port": ("MASTER_PORT",),
              "ports": ("MASTER_PORT", "PET_NNODES")}
    if one:
        inputs.update(processes=("RANK", "WORLD_SIZE", "PET_NPROC_PER_NODE"), rank=("RANK",),
                      world_size=("WORLD_SIZE",), local_rank=("PET_NPROC_PER_NODE",),
                      local_world_size=("PET_NPROC_PER_NODE",))
    return Report(
        source=line.name,
        title=line.title,
        node_rank=node_rank,
        num_nodes=nodes,
        processes=Processes(pod_rank, 0, world, 1) if one else None,
        master=master,
        master_port=port,
        # Not MASTER_ADDR: the master pod's is localhost. Every pod has its own address,
        # so the ports need only agree within the job.
        job=("kubeflow-pytorchjob", str(port), environ["PET_NNODES"]),
        preset=frozenset(["MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"]
                         + [n for n in environ if n.startswith("PET_")]),
        inputs=inputs,
        order="the operator's pod rank (master 0, worker i: i + 1)",
        notes=(f"pod {node_rank} (PET_NODE_RANK; RANK is the pod's rank too)",
               *_pod_notes(environ, nodes, master, one)),
    )


def _pod_master(environ: Mapping[str, str], pod: int, rank_name: str,
                fix: str) -> tuple[str, int, tuple[str, ...]]:
    """A v1 pod's checked master (:func:`master_service`), port and the master's variables;
    a loopback ``MASTER_ADDR`` only on pod 0."""
    master, port = checked_master(environ, "MASTER_ADDR", "MASTER_PORT", fix)
    if pod != 0 and is_loopback(master):
        raise TopologyError(describe(
            "MASTER_ADDR", master,
            f"the master's service or address on pod {pod} ({rank_name}): only the "
            f"master pod (rank 0) reaches the master at a loopback address; {fix}"))
    service = master_service(environ, master)
    return service, port, ("MASTER_ADDR",) if service == master else ("MASTER_ADDR", "HOSTNAME")


def master_service(environ: Mapping[str, str], master: str) -> str:
    """A loopback ``master`` as other pods name it: ``HOSTNAME`` = ``<job>-master-0``
    (kubeflow/common ``GenGeneralName``), else ``master`` (also when 63 characters, perhaps
    cut: kubelet_pods.go ``truncatePodHostnameIfNeeded``)."""
    if not is_loopback(master):
        return master
    hostname = environ.get("HOSTNAME", "")
    job, sep, index = hostname.rpartition("-master-")
    if sep and job and index == "0" and len(hostname) < MAX_HOSTNAME:
        return hostname
    return master


def _master_pod_note(environ: Mapping[str, str], master: str) -> tuple[str, ...]:
    """The note of a master pod whose ``MASTER_ADDR`` is loopback (:func:`master_service`)."""
    given = environ["MASTER_ADDR"]
    if not is_loopback(given):
        return ()
    pod = (f"MASTER_ADDR={given!r}: this is the master pod (the operator gives it localhost, "
           "the other pods its service name)")
    if master != given:
        return (f"{pod}: the master is {master} (HOSTNAME) for every pod, and "
                f"MASTER_ADDR={given!r} is kept",)
    return (f"{pod}, but HOSTNAME is not <job>-master-0: this pod's job digest names the "
            "master as localhost, not as the other pods do",)


def _pod_notes(environ: Mapping[str, str], nodes: int | None, master: str,
               one: bool) -> tuple[str, ...]:
    """A PyTorchJob pod's notes: the master pod's, an elastic range's, RANK and WORLD_SIZE's."""
    notes = list(_master_pod_note(environ, master))
    if nodes is None:
        notes.append(f"PET_NNODES={environ['PET_NNODES']!r} is an elastic range: torchrun's "
                     "rendezvous decides the node count")
    if not one:
        notes.append("RANK and WORLD_SIZE are the pod's rank and the job's process count, not "
                     "this process's: torchrun sets each worker's")
    return tuple(notes)


def _trainjob(environ: Mapping[str, str], line: Source) -> Report:
    fix = _FIX[line.name]
    nodes = _nnodes(environ, fix, elastic=False)
    node_rank = _node_rank(environ, nodes, fix)
    _nproc(environ, fix)
    master, port = checked_master(environ, "PET_MASTER_ADDR", "PET_MASTER_PORT", fix)
    if nodes > 1 and is_loopback(master):
        # The trainer gives every node the same headless-service name: a loopback value is
        # someone else's, wrong on every node but the master.
        raise TopologyError(describe(
            "PET_MASTER_ADDR", master,
            f"the master node's service name or address (a job of {nodes} nodes): a "
            f"loopback address makes every node wait at itself; {fix}"))
    for user, pet in (("MASTER_ADDR", "PET_MASTER_ADDR"), ("MASTER_PORT", "PET_MASTER_PORT")):
        if environ.get(user) and environ[user] != environ[pet]:
            raise TopologyError(describe(
                user, environ[user],
                f"unset or {pet}={environ[pet]!r}: torchrun meets at {pet}, and "
                f"init_process_group and JAX would use {user}; {fix}"))
    return Report(
        source=line.name,
        title=line.title,
        node_rank=node_rank,
        num_nodes=nodes,
        master=master,
        master_port=port,
        job=("kubeflow-trainjob", master, str(port)),
        preset=frozenset(n for n in environ if n.startswith("PET_")),
        inputs={"node_rank": ("PET_NODE_RANK",), "num_nodes": ("PET_NNODES",),
                "master": ("PET_MASTER_ADDR",), "master_port": ("PET_MASTER_PORT",),
                "ports": ("PET_MASTER_ADDR", "PET_MASTER_PORT")},
        order="the Job completion index (PET_NODE_RANK)",
        notes=(f"node {node_rank} of {nodes} (PET_NODE_RANK, PET_NNODES); the PET_* are "
               "torchrun's defaults, kept as they are",),
    )


def _classic(environ: Mapping[str, str], line: Source) -> Report:
    """The v1 set without ``PET_*``: ``RANK`` = the pod's rank, ``WORLD_SIZE`` = the pods."""
    fix = _FIX["kubeflow-pytorchjob"]
    world = variable_int(environ, "WORLD_SIZE", 1, f"; {fix}")
    rank = variable_index(environ, "RANK", "WORLD_SIZE", fix)  # master 0, worker i: i + 1
    master, port, named = _pod_master(environ, rank, "RANK", fix)
    warnings = () if environ.get("KUBERNETES_SERVICE_HOST") else (
        f"RANK={environ['RANK']!r} and WORLD_SIZE={environ['WORLD_SIZE']!r} without a "
        "launcher's marker (LOCAL_RANK, TORCHELASTIC_RUN_ID) nor a Kubernetes pod's: read "
        "as a node's rank and the node count, one process per node (a Kubeflow PyTorchJob's "
        "meaning); if they count processes, start the command from their launcher instead",)
    names = ("RANK", "WORLD_SIZE")
    return Report(
        source=line.name, title=line.title, node_rank=rank, num_nodes=world,
        processes=Processes(rank, 0, world, 1), master=master, master_port=port,
        job=("kubeflow-pytorchjob", str(port), str(world)),
        preset=frozenset(("MASTER_ADDR", "MASTER_PORT", *names)),
        inputs={"node_rank": ("RANK",), "num_nodes": ("WORLD_SIZE",),
                "master": named, "master_port": ("MASTER_PORT",),
                "ports": ("MASTER_PORT", "WORLD_SIZE"), "processes": names, "rank": ("RANK",),
                "world_size": ("WORLD_SIZE",)},
        order="the operator's pod rank (master 0, worker i: i + 1)",
        notes=(f"pod {rank} of {world} (RANK, WORLD_SIZE: the operator's pod rank and pod "
               "count, one process per pod; no PET_*)", *_master_pod_note(environ, master)),
        warnings=warnings,
    )


#: The fix of an elastic pod whose index its hostname does not give.
_ELASTIC_FIX = ("run derive-env in each worker torchrun starts (torchrun ... --no-python "
                "derive-env -- python train.py): the torchrun source reads what its "
                "rendezvous gave")


def _elastic(environ: Mapping[str, str], line: Source) -> Report:
    """An elastic PyTorchJob without a Master (elastic.go ``Generate``): the node rank from
    ``HOSTNAME`` ``<job>-worker-<i>`` (common ``GenGeneralName``), pod 0 the master."""
    fix = _FIX["kubeflow-pytorchjob"]
    nodes = _nnodes(environ, fix, elastic=True)
    hostname = environ.get("HOSTNAME", "")
    job, sep, index = hostname.rpartition("-worker-")
    if not (sep and job and index.isascii() and index.isdigit()):
        raise TopologyError(describe(
            "HOSTNAME", hostname, f"<job>-worker-<index>, the pod's name (the operator names "
            f"an elastic PyTorchJob's pods so): without it this pod's index is unknown; "
            f"{_ELASTIC_FIX}"))
    pod = int(index)
    if len(hostname) >= MAX_HOSTNAME:
        # kubelet_pods.go truncatePodHostnameIfNeeded: "-worker-12" may be "-worker-1" now.
        raise TopologyError(describe(
            "HOSTNAME", hostname, f"a pod name under {MAX_HOSTNAME} characters: the kubelet "
            f"cuts longer ones, so the index at its end may be cut too (give the PyTorchJob a "
            f"shorter name); {_ELASTIC_FIX}"))
    if nodes is not None and pod >= nodes:
        raise TopologyError(describe(
            "HOSTNAME", hostname, f"a worker index below PET_NNODES={environ['PET_NNODES']!r}; "
            f"{fix}"))
    endpoint = environ["PET_RDZV_ENDPOINT"]
    return Report(
        source=line.name, title=line.title, node_rank=pod, num_nodes=nodes,
        master=f"{job}-worker-0", renumbers=True,
        job=("kubeflow-pytorchjob", endpoint, environ["PET_NNODES"]),
        # PET_NNODES is job-wide (kept as set, and every pod's view shows it); the others
        # are torchrun's authority: never added (frameworks/pytorch.py), never checked.
        preset=frozenset([n for n in environ if n.startswith("PET_") and n != "PET_NNODES"]
                         + ["PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"]),
        inputs={"node_rank": ("HOSTNAME",), "num_nodes": ("PET_NNODES",),
                "master": ("HOSTNAME",), "ports": ("PET_RDZV_ENDPOINT", "PET_NNODES")},
        order="the pod's index in its name (<job>-worker-<i>); torchrun's rendezvous numbers "
              "its own nodes",
        notes=(f"torchrun's own rendezvous (PET_RDZV_BACKEND={environ['PET_RDZV_BACKEND']!r} "
               f"at PET_RDZV_ENDPOINT={endpoint!r}) numbers the nodes: nothing of torchrun's "
               "(PET_*) is rewritten or added",
               f"pod {pod} (HOSTNAME {hostname}): the node rank of the frameworks torchrun "
               f"does not start; pod 0 ({job}-worker-0) is their master"),
    )


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """A Kubeflow pod's node layer, master, port, ``job`` (v1: ``MASTER_PORT``,
    ``PET_NNODES``); v1 with nproc 1 or without ``PET_*``: one process per pod. No host list.
    TopologyError: a malformed variable, or two that contradict the operator's rules."""
    readers = {"kubeflow-trainjob": _trainjob, "kubeflow-pytorchjob-classic": _classic,
               "kubeflow-elastic": _elastic}
    return readers.get(line.name, _pytorchjob)(environ, line)
