"""DeepSpeed's launcher: a process ``deepspeed`` started (line ``deepspeed``, whose roles read
both layers; docs/sources/launchers.md). deepspeedai/DeepSpeed ``deepspeed/launcher/runner.py``
starts ``launch.py`` per node, whose ``main`` sets :data:`VARIABLES` (``RANK`` host-major in
hostfile order; no host list), kept as set. ``accelerate launch`` runs it (accelerate
``utils/launch.py`` ``prepare_deepspeed_cmd_env``): the title then names accelerate.
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


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """The line's roles, the master and port, every variable launch.py set as ``preset``.

    :raises TopologyError: as :func:`roles.read`, or a master that is no host or port.
    """
    report = roles.read(environ, line)
    master, port = roles.checked_master(environ, "MASTER_ADDR", "MASTER_PORT", FIX)
    inputs = {**report.inputs, "master": ("MASTER_ADDR",), "master_port": ("MASTER_PORT",)}
    return report._replace(
        title=f"accelerate launch ({line.title})" if environ.get(ACCELERATE) else line.title,
        master=master, master_port=port,
        preset=frozenset(VARIABLES), inputs=inputs,
        notes=(*report.notes, "DeepSpeed's launcher set the process's variables "
               "(deepspeed/launcher/launch.py): kept as they are"))
