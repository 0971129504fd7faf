"""The TF_CONFIG sources: a manager's ``TF_CONFIG`` (line ``tf-config``, a fallback) and Vertex
AI's ``CLUSTER_SPEC`` (line ``vertex``), read as the node layer (docs/sources/kubernetes.md).

TFJob's form: kubeflow/trainer ``pkg/controller.v1/tensorflow/tensorflow.go``
(``genTFConfigJSONStr``, ``genClusterSpec``; its sparse form, ``enableDynamicWorker``, refused:
``convertClusterSpecToSparseClusterSpec``); Vertex AI's: its "cluster-spec-format" page. Nodes:
the chief (TFJob's ``master``, ``workerpool0``), then the workers by index; ps and evaluator
tasks are refused. ``TF_CONFIG`` is ``preset``: kept as set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe
from derive_env.hosts import host_problem
from derive_env.sources.report import Report
from derive_env.topology import nodes_of

if TYPE_CHECKING:
    from derive_env.sources import Source
    from derive_env.tf_config import GivenTFConfig

#: The task types TF_CONFIG's readers know (tensorflow multi_worker_util; TFJob's Master).
HEAD, WORKER, OTHERS = ("chief", "master"), "worker", ("ps", "evaluator")
#: Vertex AI's pools by position, as its TF_CONFIG maps them.
VERTEX_POOLS = {"workerpool0": "chief", "workerpool1": "worker", "workerpool2": "ps",
                "workerpool3": "evaluator"}
_RUN_TF = ("TensorFlow reads the TF_CONFIG itself: run this replica's command without "
           "derive-env")
#: What each variable must hold.
_EXPECTED = {"CLUSTER_SPEC": "Vertex AI's cluster spec, JSON {\"cluster\": {\"workerpool0\": "
             "[\"host:port\"], ...}, \"task\": {\"type\": \"workerpoolN\", \"index\": i}}",
             "TF_CONFIG": "a TF_CONFIG, JSON {\"cluster\": {type: [\"host:port\", ...]}, "
             "\"task\": {\"type\": type, \"index\": i}} (tensorflow tfconfig_cluster_resolver.py)"}
#: TFJob's sparse form (kubeflow/trainer tensorflow.go, convertClusterSpecToSparseClusterSpec).
_SPARSE = ("a cluster that lists every task. This one is sparse (TFJob enableDynamicWorker: "
           "sparseCluster names only this worker, kubeflow/trainer tensorflow.go "
           "convertClusterSpecToSparseClusterSpec), so it states neither the node count "
           f"nor the chief. Set enableDynamicWorker: false, or {_RUN_TF}")


def _parse(environ: Mapping[str, str], variable: str) -> GivenTFConfig:
    from derive_env.tf_config import GivenTFConfig  # the source is seen: pydantic is needed

    found = GivenTFConfig.parse(environ[variable])
    if found is None:
        raise TopologyError(describe(variable, environ[variable], _EXPECTED[variable]))
    return found


def _host(variable: str, shown: str, address: str) -> str:
    """The host of one task's ``host:port`` (an IPv6 host bracketed)."""
    if address.startswith("["):
        host, _, port = address[1:].partition("]")
        port = port[1:] if port.startswith(":") else ""
    else:
        host, _, port = address.rpartition(":")
    problem = host_problem(host) if host else "a host"
    if problem or not (port.isascii() and port.isdigit()):
        raise TopologyError(describe(
            variable, shown, f"every task as host:port, not {address!r} "
            f"({problem or 'a port number'})"))
    return host


def _cluster(config: GivenTFConfig, variable: str, shown: str) -> tuple[str, dict]:
    """The task type of this task and the cluster, Vertex AI's pools renamed."""
    cluster = dict(config.cluster or {})
    own = config.task.type
    if variable == "CLUSTER_SPEC":
        unknown = sorted(set(cluster) - set(VERTEX_POOLS))
        if unknown or own not in VERTEX_POOLS:
            raise TopologyError(describe(
                variable, shown, f"pools workerpool0 .. workerpool3 only, not "
                f"{', '.join(unknown or [own])} (Vertex AI's cluster-spec format)"))
        cluster = {VERTEX_POOLS[pool]: hosts for pool, hosts in cluster.items()}
        own = VERTEX_POOLS[own]
    known = (*HEAD, WORKER, *OTHERS)
    unknown = sorted(set(cluster) - set(known))
    if unknown or own not in known:
        raise TopologyError(describe(
            variable, shown, f"task types {', '.join(known)} only, not "
            f"{', '.join(unknown or [own])}"))
    return own, cluster


def _nodes(cluster: dict, variable: str, shown: str) -> tuple[list[str], list[str]]:
    """The training nodes' addresses and types: the chief, then the workers."""
    heads = [(t, a) for t in HEAD for a in cluster.get(t, ())]
    if len(heads) > 1:
        raise TopologyError(describe(
            variable, shown, "at most one chief (or master) task: node rank 0, the master"))
    members = heads + [(WORKER, a) for a in cluster.get(WORKER, ())]
    if not members:
        raise TopologyError(describe(
            variable, shown, "a cluster with a chief or a worker: the training nodes for "
            "PyTorch and JAX (ps and evaluator tasks are not)"))
    return [a for _, a in members], [t for t, _ in members]


#: What Vertex AI's PyTorch containers also set, node-level (docs: RANK the node's index,
#: WORLD_SIZE the nodes, MASTER_ADDR workerpool0's host; docs/sources/kubernetes.md).
VERTEX_TORCH = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
#: Set by torchrun's agent for each worker (torch/distributed/run.py, config_from_args):
#: in a torchrun worker, Vertex AI's node-level variables were overwritten by torchrun's.
TORCHRUN = "TORCHELASTIC_RUN_ID"


def _vertex_torch(environ: Mapping[str, str], hosts: list[str], rank: int) -> int | None:
    """Vertex AI's PyTorch variables, when set, checked against the cluster spec (node
    values); ``MASTER_PORT`` as the master port. Not in a torchrun worker: its agent
    overwrote them (local_elastic_agent.py ``_start_workers``)."""
    from derive_env.sources.roles import parsed
    from derive_env.validation import parse_port

    if environ.get(TORCHRUN):
        return None
    for name, expected in (("RANK", str(rank)), ("WORLD_SIZE", str(len(hosts))),
                           ("MASTER_ADDR", hosts[0])):
        value = environ.get(name)
        if value and value.strip().lower() != expected.lower():
            raise TopologyError(describe(
                name, value, f"{expected!r}: Vertex AI sets it per node from CLUSTER_SPEC "
                f"(node {rank} of {len(hosts)}, master {hosts[0]}); it is not Vertex AI's, "
                "unset it"))
    if not environ.get("MASTER_PORT"):
        return None
    return parsed(environ, "MASTER_PORT", parse_port)


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """The node layer of ``TF_CONFIG`` or ``CLUSTER_SPEC`` (the line's): the chief then the
    workers, role = task type, index 1-based within it; ``job`` = ``(line, node 0's
    host:port, node count)``; ``preset``: ``TF_CONFIG``. TopologyError: not such a JSON
    document, an unknown task type or pool, several chiefs, no chief or worker, a task index
    outside its list, a bad ``host:port``, a ps or evaluator task, the sparse form."""
    variable = "CLUSTER_SPEC" if line.name == "vertex" else "TF_CONFIG"
    shown = environ[variable]  # describe() shortens it
    config = _parse(environ, variable)
    if config.sparse is not None:
        raise TopologyError(describe(variable, shown, _SPARSE))
    own, cluster = _cluster(config, variable, shown)
    if config.task.index >= len(cluster.get(own, ())):
        raise TopologyError(describe(
            variable, shown, f"a task index below the {len(cluster.get(own, ()))} "
            f"task(s) of type {own!r} in its cluster, not {config.task.index}"))
    if own in OTHERS:
        raise TopologyError(describe(
            variable, shown, f"a chief or worker task: {'an' if own[0] in 'aeiou' else 'a'} "
            f"{own} task is not a training node for PyTorch or JAX (parameter servers and "
            f"evaluators are not in their node layer); {_RUN_TF}"))
    addresses, types = _nodes(cluster, variable, shown)
    hosts = [_host(variable, shown, a) for a in addresses]
    head = types[0] in HEAD
    rank = 0 if own in HEAD else config.task.index + head
    indices = [1] * head + list(range(1, len(types) - head + 1))
    kept = "; TF_CONFIG kept as set" if environ.get("TF_CONFIG") else ""
    pools = " (Vertex AI's workerpool0, workerpool1)" if variable == "CLUSTER_SPEC" else ""
    port = _vertex_torch(environ, hosts, rank) if variable == "CLUSTER_SPEC" else None
    return Report(
        source=line.name,
        title=line.title,
        nodes=nodes_of(hosts, types, indices),
        node_rank=rank,
        job=(line.name, addresses[0], str(len(hosts))),
        master_port=port,
        preset=frozenset(n for n in ("TF_CONFIG", *(VERTEX_TORCH if variable == "CLUSTER_SPEC"
                                                    and not environ.get(TORCHRUN) else ()))
                         if environ.get(n)),
        inputs={"nodes": (variable,), "node_rank": (variable,), "num_nodes": (variable,),
                "master": (variable,), "ports": (variable,)},
        order=f"the chief, then the workers in index order{pools}",
        notes=(f"task {own} {config.task.index} ({variable}): node {rank} of {len(hosts)}; "
               f"ps and evaluator tasks are not training nodes{kept}",),
    )
