"""The Ray Train source: a worker process that Ray Train already set up for torch.

Table line ``ray-train`` (docs/sources/launchers.md). Ray Train's torch backend sets every
torch variable in each worker actor's own process, after any container entrypoint (read
from ray 2.60.0, ``python/ray/train/torch/config.py``):

- ``_TorchBackend.on_start``: ``master_addr, master_port = worker_group.execute_single(0,
  get_address_and_port)`` (worker 0's node IP, ``ray.util.get_node_ip_address()``, and a free
  port found there: ``ray/train/_internal/utils.py``), then, with ``TorchConfig(init_method=
  "env")`` (the default), ``MASTER_ADDR`` and ``MASTER_PORT`` in every worker; with
  ``init_method="tcp"`` neither is set.
- ``_set_torch_distributed_env_vars`` (from ``on_start`` and ``on_training_start``):
  ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``NODE_RANK``, ``RANK``, ``WORLD_SIZE`` from the
  train context, and ``ACCELERATE_TORCH_DEVICE`` (``str(get_device())``: ``cpu``,
  ``cuda:0``).
- The ranks (``ray/train/v2/_internal/execution/worker_group/worker_group.py``,
  ``_assign_worker_ranks``): workers sorted by node, then GPU id; ``NODE_RANK`` = the node's
  place among the nodes in that order, so rank 0 is on node rank 0, whose IP is
  ``MASTER_ADDR``. No variable counts the nodes: only a job whose every worker is on this
  node (``WORLD_SIZE == LOCAL_WORLD_SIZE``) is known to be of one node.
- The marker: the raylet starts every worker process with ``RAY_RAYLET_PID`` (and
  ``RAY_JOB_ID``; recorded, tests/fixtures/recorded/ray-train-2workers/), which a plain
  environment does not have; with Ray Train's ``ACCELERATE_TORCH_DEVICE`` and ``NODE_RANK``.

Every one of these is passed through: reported as ``preset``, so derived values are
compared with Ray's and never exported over them. The frameworks derive the rest from
them (JAX's process id = ``RANK``, its count = ``WORLD_SIZE``, its coordinator on
``MASTER_ADDR``); TensorFlow's ``TF_CONFIG`` cannot be built (no host list).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe
from derive_env.sources import BY_NAME
from derive_env.sources.report import Report
from derive_env.sources.roles import checked_master
from derive_env.sources.roles import read as read_roles

if TYPE_CHECKING:
    from derive_env.sources import Source

#: What Ray Train sets in a worker (config.py, module docstring), all kept as they are.
WORKER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK",
                    "MASTER_ADDR", "MASTER_PORT", "ACCELERATE_TORCH_DEVICE")
FIX = BY_NAME["ray-train"].roles["why"]


def _master(environ: Mapping[str, str]) -> tuple[str, int]:
    """``MASTER_ADDR`` and ``MASTER_PORT`` as Ray set them with ``init_method="env"``."""
    addr, port = environ.get("MASTER_ADDR", ""), environ.get("MASTER_PORT", "")
    if not addr or not port:
        name = "MASTER_ADDR" if not addr else "MASTER_PORT"
        raise TopologyError(describe(
            name, environ.get(name, ""),
            "the master Ray Train sets with TorchConfig(init_method=\"env\"), the default "
            "(_TorchBackend.on_start); with init_method=\"tcp\" Ray sets none: use "
            "init_method=\"env\" for the workers that run derive-env"))
    return checked_master(environ, "MASTER_ADDR", "MASTER_PORT", FIX)


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """What a Ray Train worker's environment says: Ray's values, passed through.

    :returns: the process layer (``RANK`` ...), ``node_rank`` = ``NODE_RANK``, ``num_nodes``
        = 1 only when every worker is on this node (else unknown), ``master`` =
        ``MASTER_ADDR``, ``master_port`` = ``MASTER_PORT``, ``job`` = ``("ray-train",
        RAY_JOB_ID, MASTER_PORT)``, ``preset`` = every variable of :data:`WORKER_VARIABLES`,
        ``renumbers`` = True (Ray orders the nodes itself).
    :raises TopologyError: a variable missing or not a number, a rank not below its size, a
        node rank on a job of one node that is not 0; ``MASTER_ADDR``/``MASTER_PORT`` unset
        (``init_method="tcp"``) or bad. The message names the variable and the fix.
    """
    unset = next((name for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE") if not environ.get(name)),
                 None)
    if unset:
        raise TopologyError(describe(unset, "", f"set: {FIX}"))
    base = read_roles(environ, line)
    rank, local_rank, world, local_world, _ = base.processes
    node_rank = base.node_rank
    one_node = world == local_world
    if node_rank > rank - local_rank or (one_node and node_rank):
        raise TopologyError(describe(
            "NODE_RANK", environ["NODE_RANK"],
            f"at most RANK - LOCAL_RANK = {rank - local_rank} (Ray groups each node's workers "
            "after the earlier nodes', each of at least one worker: _assign_worker_ranks)"
            f"{', and 0 when every worker is on this node' if one_node else ''}; {FIX}"))
    master, port = _master(environ)
    job_id = environ.get("RAY_JOB_ID") or None
    counted = (f"{world} worker(s), all on this node: one node" if one_node else
               f"{world} workers, {local_world} on this node: the node count is not stated")
    return base._replace(
        num_nodes=1 if one_node else None, master=master, master_port=port,
        job=("ray-train", job_id or master, str(port)), session_id=job_id,
        preset=frozenset(n for n in WORKER_VARIABLES if n in environ), renumbers=True,
        inputs={**base.inputs,
                **({"num_nodes": ("WORLD_SIZE", "LOCAL_WORLD_SIZE")} if one_node else {}),
                "master": ("MASTER_ADDR",), "master_port": ("MASTER_PORT",),
                "ports": ("RAY_JOB_ID", "MASTER_PORT") if job_id else ("MASTER_ADDR",
                                                                       "MASTER_PORT")},
        order="Ray Train's worker order (NODE_RANK: nodes as its workers are sorted)",
        notes=(f"Ray Train set RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, "
               f"MASTER_ADDR and MASTER_PORT in this worker (ray/train/torch/config.py): kept "
               f"as they are; worker {rank} on node {node_rank}, {counted}",))
