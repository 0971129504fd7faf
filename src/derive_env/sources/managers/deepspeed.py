"""DeepSpeed's launcher: a worker that ``deepspeed`` (its per-node ``launch.py``) started.

Table line ``deepspeed``. DeepSpeed's runner (deepspeedai/DeepSpeed
``deepspeed/launcher/runner.py``) starts ``deepspeed.launcher.launch`` once per node (over
pdsh, or directly on one node) with the world info (every node's devices, in hostfile
order) and this node's rank; ``launch.py`` ``main`` sets, for each process it starts:
``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE`` (every node's processes), ``CROSS_RANK``
(this node's rank), ``CROSS_SIZE`` (the nodes), ``LOCAL_SIZE`` (this node's processes), then
``RANK`` (host-major in hostfile order) and ``LOCAL_RANK`` (``RANK % LOCAL_SIZE``). So, like
torchrun, it states the process layer, the node count and rank and the master, but no host
list: all are read and kept (``preset``: never rewritten, never "removed"). With
``--enable_elastic_training`` it runs torch's elastic agent instead, whose workers are
torchrun's (line ``torchrun``). ``accelerate launch`` with DeepSpeed on several machines
runs this launcher (accelerate ``utils/launch.py`` ``prepare_deepspeed_cmd_env``) and adds
its ``ACCELERATE_*`` configuration: the report then names accelerate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.sources import roles
from derive_env.sources.report import Report

if TYPE_CHECKING:
    from derive_env.sources import Source

#: What launch.py sets for each process (``main``): kept as set.
VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "CROSS_RANK", "CROSS_SIZE",
             "LOCAL_SIZE", "RANK", "LOCAL_RANK")
#: Set by ``accelerate launch`` for the processes it starts (utils/launch.py).
ACCELERATE = "ACCELERATE_MIXED_PRECISION"
FIX = ("DeepSpeed's launcher sets it for every process (deepspeed/launcher/launch.py); "
       "something changed it after the launcher started this process: do not set it yourself")


def launcher_title(environ: Mapping[str, str], title: str) -> str:
    """``title``, naming ``accelerate launch`` when it started the launcher."""
    return f"accelerate launch ({title})" if environ.get(ACCELERATE) else title


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """What DeepSpeed's launcher set for this process (module docstring).

    :returns: the process layer (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_SIZE``),
        the node count and rank (``CROSS_SIZE``, ``CROSS_RANK``), the master
        (``MASTER_ADDR``) and port; every variable it set as ``preset``.
    :raises TopologyError: as the roles' reader (an index not below its size ...), or a
        master that is no host name or port; the message names the variable.
    """
    report = roles.read(environ, line)
    master, port = roles.checked_master(environ, "MASTER_ADDR", "MASTER_PORT", FIX)
    inputs = {**report.inputs, "master": ("MASTER_ADDR",), "master_port": ("MASTER_PORT",)}
    return report._replace(
        title=launcher_title(environ, line.title), master=master, master_port=port,
        preset=frozenset(VARIABLES), inputs=inputs,
        notes=(*report.notes, "DeepSpeed's launcher set the process's variables "
               "(deepspeed/launcher/launch.py): kept as they are"))
