"""The Flux source: a task the Flux job shell started (a partial topology, as for MPI).

Table line ``flux``, docs/sources/schedulers.md. From flux-framework/flux-core@4a5e79f:
``src/shell/shell.c`` ``shell_setup_environment`` (``FLUX_JOB_*``), ``src/shell/task.c``
``shell_task_create`` (``FLUX_TASK_*``), ``src/shell/pmi/pmi.c`` ``shell_pmi_task_init``
(``PMI_RANK``, ``PMI_SIZE``, which must agree). No host list, no tasks per node: a process
layer on one node or with one task per node only, else :attr:`Report.problem`. The job id is
decoded (``src/common/libutil/fluid.c``) so that every locale derives the same ports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe, shorten
from derive_env.sources.lists import NODE_COUNT
from derive_env.sources.report import Processes, Report
from derive_env.validation import parse_int, variable_index, variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source

#: Bitcoin's base58 alphabet, as fluid.c's ``b58digits``.
_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B58_VALUE = {char: value for value, char in enumerate(_B58)}
#: fluid.c ``f58_prefix`` / ``f58_alt_prefix``; ``MAX_B58_STRLEN``.
_PREFIXES, _MAX_B58 = ("\u0192", "f"), 12
#: What to do when the tasks per node are unknown.
_FIX = ("start one task per node: flux run -N <nodes> --tasks-per-node=1 derive-env -- "
        "torchrun --nproc-per-node=<GPUs> ..., or the ranks with an MPI launcher "
        "derive-env reads")
#: The node count's bound (lists.NODE_COUNT), with Flux's rule.
_NODES = (NODE_COUNT[0], f"{NODE_COUNT[1]}; the Flux shell sets it for every task "
          "(src/shell/shell.c): it was exported by hand or inherited")


def job_integer(value: str) -> int:
    """A Flux job id as its integer: F58 with either prefix, decimal, or ``0x`` hex;
    ValueError: none of these, or a value beyond 64 bits."""
    text = value.strip()
    prefix = next((p for p in _PREFIXES if text.startswith(p)), None)
    if prefix is not None:
        digits = text[len(prefix):]
        if not digits or len(digits) > _MAX_B58 or any(c not in _B58_VALUE for c in digits):
            raise ValueError("an F58 job id (ƒ or f, then base58 digits)")
        number = 0
        for char in digits:
            number = number * 58 + _B58_VALUE[char]
    elif text.startswith("0x"):
        try:
            number = int(text[2:], 16) if text[2:].isalnum() and text.isascii() else -1
        except ValueError:
            number = -1
    else:
        number = parse_int(text, minimum=0, what="a Flux job id") if text else -1
    if not 0 <= number < 1 << 64:
        raise ValueError("a Flux job id: F58 (ƒ or f, then base58 digits), decimal or 0x hex")
    return number


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """A Flux task's node count, its process layer when known, ``job`` = ("flux", id, "").
    TopologyError: a malformed value, a rank not below its size, more nodes than tasks, or
    ``PMI_RANK``/``PMI_SIZE`` that disagree with the shell's."""
    # Not roles.parsed: roles.py is not imported on the Flux start path.
    try:
        job = str(job_integer(environ["FLUX_JOB_ID"]))
    except ValueError as exc:
        raise TopologyError(describe("FLUX_JOB_ID", environ["FLUX_JOB_ID"], str(exc))) from None
    for name in ("FLUX_JOB_NNODES", "FLUX_TASK_LOCAL_ID"):
        if not environ.get(name):
            raise TopologyError(describe(
                name, "", "the Flux shell's value: it sets FLUX_JOB_NNODES and "
                "FLUX_TASK_LOCAL_ID with FLUX_TASK_RANK for every task (src/shell/shell.c, "
                "task.c); run derive-env in the command flux run starts"))
    size = variable_int(environ, "FLUX_JOB_SIZE", 1)
    # Bounded before a per-node list of that length is built.
    nodes = variable_int(environ, "FLUX_JOB_NNODES", 1, maximum=_NODES)
    rank = variable_int(environ, "FLUX_TASK_RANK", 0)
    local = variable_int(environ, "FLUX_TASK_LOCAL_ID", 0)
    for name, value, relation in (("FLUX_TASK_RANK", rank, "below"),
                                  ("FLUX_TASK_LOCAL_ID", local, "below"),
                                  ("FLUX_JOB_NNODES", nodes - 1, "at most")):
        if value >= size:
            raise TopologyError(describe(
                name, environ[name], f"a value {relation} FLUX_JOB_SIZE="
                f"{environ['FLUX_JOB_SIZE']!r}: the Flux shell sets both for one task, so one "
                "was exported by hand or inherited"))
    _companions(environ, rank, size)
    inputs: dict[str, tuple[str, ...]] = {"num_nodes": ("FLUX_JOB_NNODES",),
                                          "ports": ("FLUX_JOB_ID",)}
    processes, node_rank, problem = None, None, None
    layer = ("FLUX_TASK_RANK", "FLUX_TASK_LOCAL_ID", "FLUX_JOB_SIZE", "FLUX_JOB_NNODES")
    if nodes == 1 or nodes == size:
        local_world = size if nodes == 1 else 1
        variable_index(environ, "FLUX_TASK_LOCAL_ID", (local_world, str(local_world)),
                       f"FLUX_JOB_SIZE={size} task(s) on FLUX_JOB_NNODES={nodes} node(s)")
        processes = Processes(rank, local, size, local_world,
                              (size,) if nodes == 1 else (1,) * nodes)
        inputs.update(processes=layer, rank=("FLUX_TASK_RANK",),
                      local_rank=("FLUX_TASK_LOCAL_ID",), world_size=("FLUX_JOB_SIZE",),
                      local_world_size=("FLUX_JOB_SIZE", "FLUX_JOB_NNODES"))
        if nodes == 1:
            node_rank = 0
            inputs["node_rank"] = ("FLUX_JOB_NNODES",)
    else:
        problem = (
            f"{_FIX}. Here derive-env runs in one of FLUX_JOB_SIZE="
            f"{shorten(environ['FLUX_JOB_SIZE'])!r} tasks on FLUX_JOB_NNODES={nodes} nodes, "
            "and Flux does not state in the environment how many of them run on this node")
    return Report(
        source=line.name, title=line.title, num_nodes=nodes, node_rank=node_rank,
        processes=processes, job=("flux", job, ""), session_id=job, inputs=inputs,
        notes=(f"FLUX_JOB_ID={environ['FLUX_JOB_ID']!r} is job {job} (F58 decoded: the "
               "same in every locale)",),
        problem=problem,
    )


def _companions(environ: Mapping[str, str], rank: int, size: int) -> None:
    """``PMI_RANK`` / ``PMI_SIZE`` of the shell's PMI plugin, when set, equal the task's."""
    for name, want, own in (("PMI_RANK", rank, "FLUX_TASK_RANK"),
                            ("PMI_SIZE", size, "FLUX_JOB_SIZE")):
        value = environ.get(name)
        if not value:
            continue
        try:
            agrees = parse_int(value, minimum=0) == want
        except ValueError:
            agrees = False
        if not agrees:
            raise TopologyError(describe(
                name, value, f"the same value as {own}={environ[own]!r}: the Flux shell sets "
                f"both for one task (src/shell/pmi/pmi.c); unset {name} or {own}, whichever "
                "is stale"))
