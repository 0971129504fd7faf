"""The Kubeflow JAX and XGBoost sources (docs/sources/kubeflow.md): one process per pod, the
controller's variables kept (``preset``), the other frameworks' derived from the same facts.

- ``kubeflow-jax`` (kubeflow/trainer ``pkg/runtime/framework/plugins/jax/jax.go``
  ``EnforceMLPolicy``): ``JAX_PROCESS_ID`` = the Job completion index,
  ``JAX_COORDINATOR_ADDRESS`` = ``<trainjob>-node-0-0.<trainjob>:29500``.
- ``kubeflow-jaxjob`` (kubeflow/trainer@ee11629 ``pkg/controller.v1/jax/envvar.go``
  ``setPodEnv``): ``COORDINATOR_ADDRESS`` = ``<job>-worker-0``, ``PROCESS_ID`` = its index.
- ``kubeflow-xgboost`` (``plugins/xgboost/xgboost.go``): ``DMLC_TASK_ID`` = the completion
  index; ``DMLC_NUM_WORKER`` = nodes x workers per node, so nodes from ``DERIVE_ENV_NNODES``.

The coordinator's or tracker's port, which the job's Service opens, is JAX's coordinator
(``server_ports``) or XGBoost's tracker on node 0, never PyTorch's master port.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe
from derive_env.hosts import host_problem, is_loopback
from derive_env.sources.lists import pod_hostname
from derive_env.sources.report import Report
from derive_env.sources.roles import checked_master, numbers
from derive_env.validation import parse_port, variable_index, variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source

#: The variable that gives an XGBoost TrainJob's node count (spec.trainer.numNodes).
NNODES = "DERIVE_ENV_NNODES"


def _host(environ: Mapping[str, str], given: tuple[str, str], nodes: int | None,
          fix: str) -> str:
    """``given`` = ``(variable, host)``: a host, not loopback in a job of several nodes."""
    name, value = given
    problem = host_problem(value)
    if problem is None and (nodes is None or nodes > 1) and is_loopback(value):
        problem = ("the host of node 0, which every node reaches (a loopback address makes "
                   "every node wait at itself)")
    if problem:
        raise TopologyError(describe(name, environ[name], f"{problem}; {fix}"))
    return value


def _host_port(environ: Mapping[str, str], name: str, nodes: int, fix: str) -> tuple[str, int]:
    """``host:port`` (IPv6 bracketed), as jax.distributed.initialize reads it."""
    value = environ[name]
    host, sep, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        if not sep or not host:
            raise ValueError
        number = parse_port(port)
    except ValueError:
        raise TopologyError(describe(
            name, value, f"host:port (jax.py: '<trainjob>-node-0-0.<trainjob>:29500'); "
            f"{fix}")) from None
    return _host(environ, (name, host), nodes, fix), number


def _completion(environ: Mapping[str, str], name: str, index: int, fix: str) -> int:
    """``index`` (of variable ``name``), which must equal ``JOB_COMPLETION_INDEX`` when set."""
    completion = environ.get("JOB_COMPLETION_INDEX")
    if completion and completion.strip() != str(index):
        raise TopologyError(describe(
            name, environ[name], f"JOB_COMPLETION_INDEX={completion!r}: the controller sets "
            f"{name} to the pod's Job completion index; {fix}"))
    return index


def _jax_v2(environ: Mapping[str, str], line: Source) -> Report:
    fix, got = line.roles["why"], numbers(environ, line.roles)
    nodes = got["num_nodes"]
    rank = _completion(environ, "JAX_PROCESS_ID", got["node_rank"], fix)
    host, port = _host_port(environ, "JAX_COORDINATOR_ADDRESS", nodes, fix)
    return Report(
        source=line.name, title=line.title, node_rank=rank, num_nodes=nodes, master=host,
        job=(line.name, environ["JAX_COORDINATOR_ADDRESS"], str(nodes)),
        server_ports=(("jax", port, "JAX_COORDINATOR_ADDRESS"),),
        # JAX_PROCESS_ID: the trainer's, never checked; the job-wide two are kept as set.
        preset=frozenset(("JAX_PROCESS_ID",)),
        inputs={"node_rank": ("JAX_PROCESS_ID",), "num_nodes": ("JAX_NUM_PROCESSES",),
                "master": ("JAX_COORDINATOR_ADDRESS",),
                "ports": ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES")},
        order="the Job completion index (JAX_PROCESS_ID)",
        notes=(f"node {rank} of {nodes} (JAX_PROCESS_ID, JAX_NUM_PROCESSES: one JAX process "
               "per node); the trainer's JAX_* are kept as they are",
               f"port {port} of JAX_COORDINATOR_ADDRESS is JAX's coordinator on node 0: not "
               "PyTorch's master port"),
    )


def _jaxjob(environ: Mapping[str, str], line: Source) -> Report:
    fix, got = line.roles["why"], numbers(environ, line.roles)
    nodes = got["num_nodes"]
    rank = _completion(environ, "PROCESS_ID", got["node_rank"], fix)
    host, port = checked_master(environ, "COORDINATOR_ADDRESS", "COORDINATOR_PORT", fix)
    _host(environ, ("COORDINATOR_ADDRESS", host), nodes, fix)
    job, worker, zero = host.rpartition("-worker-")
    hostname = environ.get("HOSTNAME", "")
    # The kubelet cuts a long pod name: compare with the name cut the same way.
    own = pod_hostname(f"{job}-worker-{rank}")
    if worker and zero == "0" and hostname and hostname != own:
        raise TopologyError(describe(
            "PROCESS_ID", environ["PROCESS_ID"], f"the index of this pod's hostname "
            f"{hostname!r} ({job}-worker-<PROCESS_ID>, envvar.go setPodEnv); {fix}"))
    return Report(
        source=line.name, title=line.title, node_rank=rank, num_nodes=nodes, master=host,
        job=(line.name, host, str(port)), server_ports=(("jax", port, "COORDINATOR_PORT"),),
        preset=frozenset(("COORDINATOR_ADDRESS", "COORDINATOR_PORT", "NUM_PROCESSES",
                          "PROCESS_ID")),
        inputs={"node_rank": ("PROCESS_ID",), "num_nodes": ("NUM_PROCESSES",),
                "master": ("COORDINATOR_ADDRESS",),
                "ports": ("COORDINATOR_ADDRESS", "COORDINATOR_PORT")},
        order="the operator's replica index (PROCESS_ID)",
        notes=(f"pod {rank} of {nodes} (PROCESS_ID, NUM_PROCESSES); JAX does not read these "
               "names: derive-env sets JAX_* from them",),
    )


def _xgboost(environ: Mapping[str, str], line: Source) -> Report:
    fix = line.roles["why"]
    workers = variable_int(environ, "DMLC_NUM_WORKER", 1, f"; {fix}")
    nodes = None
    if environ.get(NNODES):
        nodes = variable_int(environ, NNODES, 1, " (spec.trainer.numNodes of the TrainJob)")
        if workers % nodes:
            raise TopologyError(describe(
                NNODES, environ[NNODES], f"a divisor of DMLC_NUM_WORKER={workers} (nodes x "
                "workers per node, xgboost.go): the TrainJob's spec.trainer.numNodes"))
    rank = _completion(environ, "DMLC_TASK_ID", variable_index(environ, "DMLC_TASK_ID", NNODES, fix)
                       if nodes else variable_int(environ, "DMLC_TASK_ID", 0, f"; {fix}"), fix)
    host, port = checked_master(environ, "DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", fix)
    _host(environ, ("DMLC_TRACKER_URI", host), nodes, fix)
    size = (f"node {rank} of {nodes} ({NNODES}; DMLC_NUM_WORKER={workers} counts the "
            "workers of every node)" if nodes is not None else
            f"node {rank} (DMLC_TASK_ID) of a job of unknown size: DMLC_NUM_WORKER={workers} "
            f"is nodes x workers per node (GPUs); set {NNODES} to spec.trainer.numNodes for "
            "the node count")
    inputs = {"node_rank": ("DMLC_TASK_ID",), "master": ("DMLC_TRACKER_URI",),
              "num_nodes": (NNODES,), "ports": ("DMLC_TRACKER_URI", "DMLC_TRACKER_PORT")}
    return Report(
        source=line.name, title=line.title, node_rank=rank, num_nodes=nodes, master=host,
        job=(line.name, host, str(port)),
        preset=frozenset(("DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID",
                          "DMLC_NUM_WORKER")),
        inputs=inputs, order="the Job completion index (DMLC_TASK_ID)",
        notes=(size, f"DMLC_TRACKER_PORT={port} is XGBoost's tracker on node 0: not "
               "PyTorch's master port; the trainer's DMLC_* are kept as they are"),
    )


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """The node rank (process or task id), ``num_nodes`` (XGBoost without
    ``DERIVE_ENV_NNODES``: None), the coordinator's or tracker's host as the master, ``job``.

    :raises TopologyError: a malformed variable, an index not below its count or not
        ``JOB_COMPLETION_INDEX`` (v2) or the hostname's (v1), a loopback coordinator of
        several nodes, or ``DERIVE_ENV_NNODES`` not dividing ``DMLC_NUM_WORKER``.
    """
    readers = {"kubeflow-jax": _jax_v2, "kubeflow-jaxjob": _jaxjob}
    return readers.get(line.name, _xgboost)(environ, line)
