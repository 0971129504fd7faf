"""TensorFlow: ``TF_CONFIG``, the cluster spec and this container's task.

Rules followed (tensorflow/python/distribute/multi_worker_util.py,
cluster_resolver/tfconfig_cluster_resolver.py):

* ``TF_CONFIG = {"cluster": {type: ["host:port", ...]}, "task": {"type": t, "index": i}}``;
  task types chief, worker, ps, evaluator; indices per type from 0; at most one chief and
  one evaluator (``_validate_cluster_spec`` raises otherwise); without a chief, worker 0
  acts as chief.
* The evaluator is left out of every ``cluster`` (its own TF_CONFIG included) and gets
  ``{"type": "evaluator", "index": 0}``: TensorFlow treats it as independent of the training
  cluster (``is_chief`` docstring; ``_validate_cluster_spec`` allows it to be missing from
  the spec), and a training task whose spec listed it would count it in collective groups
  and try to reach it.
* Only for more than one node: a single container trains locally without TF_CONFIG.
* Built as a :class:`derive_env.tf_config.TFConfig`, serialised compactly; IPv6 hosts
  bracketed (``[2001:db8::1]:2222``).

Role mapping: label ``ai.backend.distributed.tensorflow-roles`` maps the cluster manager's
roles to task types (``main:chief,sub:worker``); default every node a ``worker``. Nodes are
numbered per task type in canonical node order.

One task per process, when a launcher started several processes on a node (the topology's
process layer, e.g. ``srun --ntasks-per-node=2``): every process is a TensorFlow task of its
node's type, listening on ``tensorflow-port + local rank`` (distinct ports on one host);
the cluster lists the tasks node by node in node order, each node's in local-rank order, so
a process's index is ``sum(processes of the nodes before it) + local rank``: every process
computes the same list from the processes per node (``SLURM_STEP_TASKS_PER_NODE``), whatever
the launcher's rank order. Without the processes per node of every node (an MPI launcher
states only its own node's) TF_CONFIG cannot be built: an error says so.
"""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING

from derive_env.errors import LabelError, TopologyError, describe
from derive_env.frameworks.context import (
    JSON,
    NODE,
    Context,
    Contribution,
    framework_port,
    node_rank_of,
    port_label,
    variable,
)
from derive_env.hosts import host_port
from derive_env.labels import PREFIX, VARIABLE_PREFIX
from derive_env.topology import ClusterTopology

if TYPE_CHECKING:
    from derive_env.tf_config import TFConfig

ROLES_LABEL = PREFIX + "tensorflow-roles"
#: key order of ``cluster`` in the emitted JSON.
_CLUSTER_ORDER = ("chief", "worker", "ps")

var = variable("tensorflow")


def task_types(topology: ClusterTopology, roles: tuple[tuple[str, str], ...] | None,
               given: str = f"label {ROLES_LABEL}") -> list[str]:
    """The TF task type of each node, in canonical order.

    :param roles: the parsed ``tensorflow-roles`` label, or ``None`` for all workers; role
        ``*`` maps every role not listed (docs/behaviour.md section 9).
    :param given: where the label came from (``label ...`` or ``variable
        DERIVE_ENV_TENSORFLOW_ROLES``), for messages.
    :raises LabelError: a node's role is not mapped (the message gives the line that maps
        it), more than one chief or evaluator, or no chief and no worker left to train.
    """
    if roles is None:
        return ["worker"] * topology.num_nodes
    shown = ",".join(f"{r}:{t}" for r, t in roles)
    mapping = dict(roles)
    other = mapping.get("*")
    types: list[str] = []
    for node in topology.nodes:
        task_type = mapping.get(node.role or "", other)
        if task_type is None:
            mapped = f"{shown},{node.role}:worker"
            raise LabelError(describe(
                given, shown,
                f"a task type for every role of the Backend.AI session; role {node.role!r} "
                f"(host {node.host}) has none. Map it, e.g. "
                f"{VARIABLE_PREFIX}TENSORFLOW_ROLES={mapped} (or the label "
                f"{ROLES_LABEL}={mapped}); the role * maps every role not listed "
                f"({shown},*:worker)",
            ))
        types.append(task_type)
    for single in ("chief", "evaluator"):
        hosts = [n.host for n, t in zip(topology.nodes, types, strict=True) if t == single]
        if len(hosts) > 1:
            raise LabelError(describe(
                f"label {ROLES_LABEL}", shown,
                f"at most one {single} node (TensorFlow rejects more); {len(hosts)} nodes "
                f"map to {single}: {', '.join(hosts[:5])}{', ...' if len(hosts) > 5 else ''}",
            ))
    if not any(t in ("chief", "worker") for t in types):
        raise LabelError(describe(
            f"label {ROLES_LABEL}", shown, "at least one node mapped to chief or worker"
        ))
    return types


def tf_config(
    topology: ClusterTopology, types: list[str], port: int, node_rank: int | None = None
) -> TFConfig:
    """The TF_CONFIG of this container or process.

    :param types: task type per node in canonical order (see :func:`task_types`).
    :param port: the TensorFlow server port (TCP) on every node; with several processes
        per node, process ``l`` of a node listens on ``port + l`` (module docstring).
    :param node_rank: this node's rank (default: the topology's).
    :raises LabelError: as :func:`_per_process_cluster`.
    """
    from derive_env.tf_config import Task, TFConfig  # only when a TF_CONFIG is built

    if node_rank is None:
        node_rank = topology.node_rank or 0
    layout = topology.processes
    own_type = types[node_rank]
    if topology.per_process and layout is not None and layout.tasks_per_node:
        cluster, index = _per_process_cluster(topology, types, port, node_rank)
    else:
        cluster, index = _cluster(topology, types, port), types[:node_rank].count(own_type)
    return TFConfig(cluster=cluster, task=Task(type=own_type, index=index))


def _cluster(topology: ClusterTopology, types: list[str], port: int) -> dict[str, list[str]]:
    """One task per node: ``host:port`` per type, in node order, the evaluator left out."""
    suffix = f":{port}"
    # Once per node at every container start (4096 nodes benchmarked): one string per host,
    # a call only for an IPv6 literal (host_port brackets it); Node is a named tuple, 0 host.
    addresses = [host + suffix if ":" not in host else host_port(host, port)
                 for host in map(itemgetter(0), topology.nodes)]
    members: dict[str, list[str]] = {t: [] for t in _CLUSTER_ORDER}
    if types.count("worker") == len(types):  # the default: every node a worker
        members["worker"] = addresses
    else:
        for address, task_type in zip(addresses, types, strict=True):
            if task_type in members:  # not the evaluator
                members[task_type].append(address)
    return {t: hosts for t, hosts in members.items() if hosts}


def _per_process_cluster(
    topology: ClusterTopology, types: list[str], port: int, node_rank: int,
) -> tuple[dict[str, list[str]], int]:
    """One TF task per process (module docstring): ``host:port+l`` node by node, as many
    as the launcher states on each (``processes.tasks_per_node``); the cluster and this
    process's index.

    :raises LabelError: the ports of a node's processes go past 65535; a chief or evaluator
        node runs more than one process.
    """
    layout = topology.processes
    assert layout is not None and layout.tasks_per_node
    tasks = layout.tasks_per_node
    if port + max(tasks) - 1 > 65535:
        raise LabelError(describe(
            f"label {port_label('tensorflow')}", str(port),
            f"a port that leaves {max(tasks)} consecutive ports (one per process of a node) "
            "below 65536"))
    members: dict[str, list[str]] = {t: [] for t in _CLUSTER_ORDER}
    own_type = types[node_rank]
    index = 0
    for rank, (node, task_type, count) in enumerate(
            zip(topology.nodes, types, tasks, strict=True)):
        if rank == node_rank:
            index = len(members.get(own_type, ())) + layout.local_rank
        if task_type in members:
            members[task_type] += [host_port(node.host, port + k) for k in range(count)]
    for single in ("chief", "evaluator"):
        if types.count(single) and tasks[types.index(single)] > 1:
            raise LabelError(describe(
                f"label {ROLES_LABEL}", ",".join(sorted(set(types))),
                f"at most one {single} task: its node runs {tasks[types.index(single)]} "
                "processes, each a task of the node's type"))
    return {t: hosts for t, hosts in members.items() if hosts}, index


def _width(topo: ClusterTopology) -> int:
    """TensorFlow's ports per host: the most processes a node runs (one per node: 1)."""
    layout = topo.processes
    return max(layout.tasks_per_node) if (
        topo.per_process and layout is not None and layout.tasks_per_node) else 1


def _port(ctx: Context, out: Contribution) -> tuple[int, str]:
    """TensorFlow's first port and its provenance; a warning when the step's reserved ports
    do not cover all of this node's TensorFlow ports."""
    topo = ctx.topology
    port, port_src = framework_port(ctx, "tensorflow")  # clear of the others' (Context.ports)
    width = _width(topo)
    unreserved = [p for p in range(port, port + width) if p not in topo.reserved_ports]
    if topo.reserved_ports and port in topo.reserved_ports and unreserved:
        out.warnings.append(
            f"TensorFlow's port(s) {', '.join(map(str, unreserved))} (one per process of a "
            f"node, from {port}) are not among the step's reserved ports "
            f"({topo.inputs_of('ports')}: {', '.join(map(str, topo.reserved_ports))}): another "
            "step on the node may hold them; reserve more (srun --resv-ports) or set label "
            f"{port_label('tensorflow')}")
    return port, port_src


def _unbuildable(topo: ClusterTopology) -> TopologyError | None:
    """Why TF_CONFIG cannot be built: no source states every node's host, or, with a
    process per task, every node's processes."""
    layout = topo.processes
    if topo.nodes and not (topo.per_process and not (layout and layout.tasks_per_node)):
        return None
    what = ("the processes of every node (the launcher states only this node's: "
            f"{topo.inputs_of('processes')})" if topo.nodes else "the hosts of every node")
    return TopologyError(
        f"TF_CONFIG cannot be built: it lists every task's host:port, and no source "
        f"states {what}. Run the job under a launcher that states every node's processes "
        "(srun: SLURM_STEP_TASKS_PER_NODE), or set TF_CONFIG yourself")


def derive(ctx: Context) -> Contribution:
    """``TF_CONFIG`` for this container, when the session has more than one node.

    :raises TopologyError: TF_CONFIG cannot be built (:func:`_unbuildable`), or TensorFlow's
        ports fit nowhere or hold a set master port (:attr:`Context.ports`).
    :raises LabelError: bad ``tensorflow-roles`` or ``tensorflow-port`` labels, or ports two
        labels put on one port.
    """
    topo, policy = ctx.topology, ctx.policy
    out = Contribution()
    if not topo.multi_node and not topo.per_process:
        out.notes.append(
            "TF_CONFIG kept as set (a single node: derive-env derives none, and "
            "TensorFlow reads the one set)" if ctx.environ.get("TF_CONFIG") else
            "TF_CONFIG not set: a single node (TensorFlow trains locally)")
        return out
    if "TF_CONFIG" in topo.preset:  # the manager's own (sources/tfconfig.py): never rewritten
        out.notes.append(f"TF_CONFIG kept as set by {topo.source} (derive-env derives none)")
        return out
    error = _unbuildable(topo)
    if error is not None:
        raise error
    node_rank, rank_src = node_rank_of(topo)
    roles_src = policy.label_or_default("tensorflow_roles")
    types = task_types(topo, policy.tensorflow_roles,
                       roles_src if roles_src != "default" else f"label {ROLES_LABEL}")
    port, port_src = _port(ctx, out)
    config = tf_config(topo, types, port, node_rank)
    per = (f"; one task per process, port + local rank ({topo.inputs_of('local_rank')})"
           if topo.per_process else "")
    provenance = (
        f"nodes: {topo.inputs_of('nodes')} in canonical order; this task: node rank from "
        f"{rank_src}{per}; port {port} from {port_src}; roles from "
        f"{roles_src if roles_src != 'default' else 'default (every node a worker)'}"
    )
    out.variables.append(var("TF_CONFIG", config.to_json(), provenance, scope=NODE,
                             compare=JSON, what="this node's TF_CONFIG"))
    out.notes += _task_notes(topo, types, node_rank, config.task.index)
    return out


def _task_notes(
    topo: ClusterTopology, types: list[str], node_rank: int, own_index: int
) -> list[str]:
    """The ``--explain`` table of roles -> tasks (beyond 16 nodes, the first node of each
    type and this one: a 4096-node table helps nobody)."""
    notes = ["TensorFlow roles -> tasks:"]
    if topo.num_nodes <= 16:
        shown = range(topo.num_nodes)
    else:
        firsts = {types.index(t) for t in set(types)}
        shown = sorted(firsts | {node_rank})
    layout = topo.processes
    tasks = layout.tasks_per_node if topo.per_process and layout is not None else None
    for rank in shown:
        node, task_type = topo.nodes[rank], types[rank]
        aside = " (left out of cluster)" if task_type == "evaluator" else ""
        if tasks:  # one task per process: this node's tasks are a range of indices
            first = sum(c for t, c in zip(types[:rank], tasks, strict=False) if t == task_type)
            index = f"{first}-{first + tasks[rank] - 1}" if tasks[rank] > 1 else str(first)
            mark = f"  <- this process: {task_type} {own_index}" if rank == node_rank else ""
        else:
            index = str(types[:rank].count(task_type))
            mark = "  <- this container" if rank == node_rank else ""
        notes.append(f"  {node.role or '-'}: {node.host} -> {task_type} {index}{aside}{mark}")
    return notes
