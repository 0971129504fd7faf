"""A Ray Train worker (line ``ray-train``, docs/sources/launchers.md), from ray 2.60.0
``python/ray/train/``: ``torch/config.py`` ``_TorchBackend.on_start`` sets ``MASTER_*`` (worker
0's node IP, a free port: ``_internal/utils.py``) with ``TorchConfig(init_method="env")``, the
default, ``_set_torch_distributed_env_vars`` the rest of :data:`WORKER_VARIABLES` (kept:
``preset``); the raylet sets ``RAY_RAYLET_PID``, ``RAY_JOB_ID`` (recorded: ray-train-2workers);
``v2/_internal/execution/worker_group/worker_group.py`` ``_assign_worker_ranks`` sorts by
node, then GPU: rank 0 on node rank 0. No variable counts the nodes.
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


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """Ray's values, kept as set; one node when every worker is on this one; ``renumbers``.

    :raises TopologyError: what the roles refuse, a variable unset, ``NODE_RANK`` above
        ``RANK - LOCAL_RANK`` (or not 0 on one node), a bad master; naming the variable.
    """
    unset = next((n for n in ("LOCAL_RANK", "LOCAL_WORLD_SIZE") if not environ.get(n)), None)
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
    unset = next((n for n in ("MASTER_ADDR", "MASTER_PORT") if not environ.get(n)), None)
    if unset:  # init_method="tcp"
        raise TopologyError(describe(
            unset, environ.get(unset, ""),
            "the master Ray Train sets with TorchConfig(init_method=\"env\"), the default "
            "(_TorchBackend.on_start); with init_method=\"tcp\" Ray sets none: use "
            "init_method=\"env\" for the workers that run derive-env"))
    master, port = checked_master(environ, "MASTER_ADDR", "MASTER_PORT", FIX)
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
                "ports": ("RAY_JOB_ID" if job_id else "MASTER_ADDR", "MASTER_PORT")},
        order="Ray Train's worker order (NODE_RANK: nodes as its workers are sorted)",
        notes=(f"Ray Train set RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, "
               f"MASTER_ADDR and MASTER_PORT in this worker (ray/train/torch/config.py): kept "
               f"as they are; worker {rank} on node {node_rank}, {counted}",))
