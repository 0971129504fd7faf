"""The cloud launch tools: a SkyPilot task node or a dstack task node.

Table lines ``skypilot`` and ``dstack`` (docs/sources/clouds.md). Both start the user's
commands once per node with the job's internal IPs, this node's rank and the node count;
neither starts the processes (torchrun or mpirun does, started by the user's commands),
so both give the node layer: the IP list in the tool's order, node rank r = line r, the
master = the first IP (node rank 0's).

- **SkyPilot** (skypilot-org/skypilot ``sky/backends/task_codegen.py``,
  ``RayCodeGen.add_setup`` and ``_add_ray_task``): ``SKYPILOT_NODE_IPS`` = the newline-joined
  IPs of the task's nodes, head first (``job_ip_rank_list``), ``SKYPILOT_NUM_NODES`` = their
  number, ``SKYPILOT_NODE_RANK`` = this node's index in them, ``SKYPILOT_NUM_GPUS_PER_NODE``
  = ``ceil`` of the GPU count of ``accelerators:``, **0 for a TPU or Trainium** (not a GPU
  count: never a process count of 0), ``SKYPILOT_TASK_ID`` = ``sky-<timestamp>_<cluster>_<id>``.
  Its docs: ``MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)``.
- **dstack** (dstackai/dstack ``runner/internal/runner/executor/executor.go``, ``execJob``;
  server ``jobs_running.py``, ``_get_cluster_info``): ``DSTACK_NODES_IPS`` = the jobs'
  internal IPs joined by newlines in ``job_num`` order, ``DSTACK_MASTER_NODE_IP`` = the
  first, ``DSTACK_NODE_RANK`` = ``job_num``, ``DSTACK_NODES_NUM`` = jobs per replica,
  ``DSTACK_GPUS_PER_NODE`` = this node's GPUs, ``DSTACK_GPUS_NUM`` = the sum of every
  node's, ``DSTACK_RUN_ID``. An IP not known yet is an empty string in the list.
  ``DSTACK_MPI_HOSTFILE`` names the file the runner writes (``writeMpiHostfile``): one line
  per IP in the same order, ``<ip> slots=<this node's GPUs>`` (``<ip>`` alone for 0 GPUs),
  empty while an IP is not known: every node's GPU count, so an uneven job is told and
  this node's count is checked against it. The file is read in cli/ when the variable is
  set; unreadable, it is left out (a note says so).

- **SkyPilot on Slurm** (``sky/skylet/executor/slurm.py``, run in each task of ``srun
  --ntasks-per-node=1``): ``SKYPILOT_NODE_IPS`` = the IPs of the JOB's nodes
  (``SLURM_JOB_NODELIST``, ``_get_job_node_ips``), ``SKYPILOT_NUM_NODES`` = the STEP's
  (``SLURM_NNODES``), ``SKYPILOT_NODE_RANK`` = ``SLURM_PROCID``. A task on fewer nodes than
  the job (the SkyPilot cluster) is valid: the list is then not the task's nodes, and
  which line is each node's is not stated, so only the count and rank are reported (the
  srun step's host list, when its variables are there, gives the hosts).

User env overrides both tools' variables (docs/sources/clouds.md): every count,
rank and list is checked against the others, never trusted alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from derive_env.errors import TopologyError, describe
from derive_env.sources.lists import host_list
from derive_env.sources.report import Report
from derive_env.topology import nodes_of
from derive_env.validation import PER_NODE, variable_index, variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source


class _Tool(NamedTuple):
    """One launch tool's variable names and the fix that ends its messages."""

    ips: str
    rank: str
    count: str
    gpus: str
    job_id: str
    master: str | None
    fix: str


_TOOLS = {
    "skypilot": _Tool(
        "SKYPILOT_NODE_IPS", "SKYPILOT_NODE_RANK", "SKYPILOT_NUM_NODES",
        "SKYPILOT_NUM_GPUS_PER_NODE", "SKYPILOT_TASK_ID", None,
        "SkyPilot sets it for every node of the task (sky/backends/task_codegen.py); do not "
        "set it in the task's envs"),
    "dstack": _Tool(
        "DSTACK_NODES_IPS", "DSTACK_NODE_RANK", "DSTACK_NODES_NUM", "DSTACK_GPUS_PER_NODE",
        "DSTACK_RUN_ID", "DSTACK_MASTER_NODE_IP",
        "dstack's runner sets it for every node of the task (runner/internal/runner/executor/"
        "executor.go); do not set it in the task's env"),
}


def _ips(environ: Mapping[str, str], tool: _Tool) -> tuple[str, ...]:
    """The IP list, one per line (:func:`derive_env.sources.lists.host_list`); an empty line
    (dstack: an IP not known yet) is refused with its own fix."""
    text = environ[tool.ips]
    try:
        return host_list(text)
    except ValueError as exc:
        empty = "" in (line.strip() for line in text.split("\n"))
        fix = ("an address not known yet: start derive-env once the tool has given every "
               "node's IP") if empty else tool.fix
        raise TopologyError(describe(tool.ips, text, f"{exc}; {fix}")) from None


def _gpus(environ: Mapping[str, str], tool: _Tool, notes: list[str]) -> int | None:
    """This node's GPU count, or None when unset or 0 (a TPU or Trainium: SkyPilot gives 0
    for an accelerator that is no GPU; the frameworks count the devices)."""
    if not environ.get(tool.gpus):
        return None
    gpus = variable_int(environ, tool.gpus, 0, f"; {tool.fix}", PER_NODE)
    if gpus == 0:
        notes.append(f"{tool.gpus}='0': no GPU (a CPU node, or an accelerator that is no "
                     "GPU: TPU, Trainium); not a process count, the devices are counted")
        return None
    return gpus


#: The Slurm job's host list, from which SkyPilot's Slurm executor writes its IP list.
SLURM_JOB_HOSTS = "SLURM_JOB_NODELIST"


def _part_of_the_job(environ: Mapping[str, str], line: Source, count: int,
                     rank: int) -> Report:
    """A SkyPilot task on ``count`` of the Slurm job's nodes (the lines of its IP list;
    module docstring): its node count and rank, no host list and no master."""
    tool = _TOOLS[line.name]
    listed = environ[tool.ips].count("\n") + 1
    notes = [f"node {rank} of {count} ({tool.rank}, {tool.count}); {tool.ips} lists the "
             f"Slurm job's {listed} nodes ({SLURM_JOB_HOSTS}: SkyPilot's Slurm executor), "
             f"not this task's {count}: which line is each node's is not stated, so it is "
             "not used (nor its first line as the master)"]
    gpus = _gpus(environ, tool, notes)
    inputs = {"node_rank": (tool.rank,), "num_nodes": (tool.count,),
              "ports": (tool.job_id, tool.ips), **({"gpus": (tool.gpus,)} if gpus else {})}
    return Report(source=line.name, title=line.title, num_nodes=count, node_rank=rank,
                  gpus=gpus, session_id=environ.get(tool.job_id) or None,
                  job=(line.name, environ.get(tool.job_id, ""), environ[tool.ips]),
                  inputs=inputs, notes=tuple(notes))


#: The variable naming dstack's MPI hostfile (executor.go ``execJob``).
DSTACK_HOSTFILE = "DSTACK_MPI_HOSTFILE"


def files_needed(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """dstack's MPI hostfile when ``DSTACK_MPI_HOSTFILE`` names one; nothing for SkyPilot.

    :returns: the paths cli/ reads and hands to :func:`read` as ``files``.
    """
    path = environ.get(DSTACK_HOSTFILE, "") if name == "dstack" else ""
    return (path,) if path else ()


def _hostfile_gpus(environ: Mapping[str, str], ips: tuple[str, ...], rank: int,
                   text: str | None) -> tuple[tuple[int, ...] | None, str | None]:
    """Every node's GPU count from dstack's MPI hostfile (``writeMpiHostfile``: ``<ip>
    slots=<n>`` or ``<ip>`` for 0, one line per IP in ``DSTACK_NODES_IPS`` order), checked
    against the IP list and against this node's ``DSTACK_GPUS_PER_NODE``; ``None`` when the
    file is not there or unreadable (``text`` None); with a note for the report, or None.

    :raises TopologyError: the file lists other IPs (or another order) than
        ``DSTACK_NODES_IPS``, a line is not dstack's form, or this node's line gives another
        GPU count than ``DSTACK_GPUS_PER_NODE``.
    """
    path = environ.get(DSTACK_HOSTFILE, "")
    if not path:
        return None, None
    if text is None:
        return None, (f"{DSTACK_HOSTFILE}={path!r} is not readable here: every node's GPU "
                      "count is not known (only this node's)")
    fix = _TOOLS["dstack"].fix
    lines = text.splitlines()
    listed = [line.split(" ", 1)[0] for line in lines]
    if tuple(listed) != ips:
        raise TopologyError(describe(
            f"{DSTACK_HOSTFILE} ({path})", text, f"the IPs of DSTACK_NODES_IPS in its order, "
            f"one line each ({', '.join(ips[:4])}{', ...' if len(ips) > 4 else ''}): dstack's "
            f"runner writes both from one list; {fix}"))
    gpus = []
    for number, line in enumerate(lines, 1):
        _, _, slots = line.partition(" ")
        count = slots[len("slots="):] if slots.startswith("slots=") else ("0" if not slots
                                                                          else "")
        if not (count.isascii() and count.isdigit()):
            raise TopologyError(describe(
                f"{DSTACK_HOSTFILE} ({path}) line {number}", line,
                f"'<ip> slots=<GPUs>' or '<ip>' (executor.go writeMpiHostfile); {fix}"))
        gpus.append(int(count))
    own = environ.get("DSTACK_GPUS_PER_NODE", "").strip()
    if own.isdigit() and int(own) != gpus[rank]:
        raise TopologyError(describe(
            "DSTACK_GPUS_PER_NODE", own, f"this node's slots in {DSTACK_HOSTFILE} ({path}, "
            f"line {rank + 1}: {gpus[rank]}): dstack writes both from this node's GPUs; {fix}"))
    uneven = len(set(gpus)) > 1
    return tuple(gpus), (f"GPUs per node, from {DSTACK_HOSTFILE}: {', '.join(map(str, gpus))} "
                         "(uneven: each node starts its own count of processes)"
                         if uneven else None)


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """What a SkyPilot or dstack node's environment says.

    :param line: ``skypilot`` or ``dstack`` (sources/__init__.py).
    :param files: dstack's MPI hostfile (:func:`files_needed`): path -> text, ``None``
        when unreadable; unused for SkyPilot.
    :returns: ``nodes`` = the IP list in the tool's order (``SKYPILOT_NODE_IPS``,
        ``DSTACK_NODES_IPS``), ``node_rank`` (``*_NODE_RANK``), ``gpus`` = this node's GPU
        count (``SKYPILOT_NUM_GPUS_PER_NODE``, ``DSTACK_GPUS_PER_NODE``; None when unset or
        0), ``job`` = ``(tool, task or run id, first IP)``: the same on every node, for the
        port policy. The master is the first IP (node rank 0's).
    :raises TopologyError: a variable is malformed, an IP line is empty (dstack before the
        IPs are known) or repeated, the node count differs from the list's length, the
        rank is not below it, or (dstack) ``DSTACK_MASTER_NODE_IP`` is not the first IP or
        the MPI hostfile disagrees with the IPs or with this node's GPU count;
        the message names the variable, its value and the fix.
    """
    tool = _TOOLS[line.name]
    ips = _ips(environ, tool)
    count = variable_int(environ, tool.count, 1, f"; {tool.fix}")
    on_slurm = line.name == "skypilot" and bool(environ.get(SLURM_JOB_HOSTS))
    if count > len(ips) or (count < len(ips) and not on_slurm):
        raise TopologyError(describe(
            tool.count, environ[tool.count],
            f"the number of lines of {tool.ips} ({len(ips)}): " + (
                f"on Slurm SkyPilot lists the job's nodes ({SLURM_JOB_HOSTS}) and counts the "
                "task's (SLURM_NNODES), never more" if on_slurm else
                "both count the task's nodes") + f"; {tool.fix}"))
    rank = variable_index(environ, tool.rank, tool.count, tool.fix)
    if count < len(ips):
        return _part_of_the_job(environ, line, count, rank)
    inputs = {"nodes": (tool.ips,), "node_rank": (tool.rank,), "num_nodes": (tool.count,),
              "master": (tool.master or tool.ips,), "ports": (tool.job_id, tool.ips)}
    if tool.master is not None and environ[tool.master].strip() != ips[0]:
        raise TopologyError(describe(
            tool.master, environ[tool.master],
            f"the first line of {tool.ips} ({ips[0]!r}): dstack gives the master node's IP "
            f"as both; {tool.fix}"))
    notes = [f"node {rank} of {count} ({tool.rank}, {tool.count}); master = the first line "
             f"of {tool.ips}"]
    every = None
    if line.name == "dstack":
        text = next(iter(files.values()), None) if files else None
        every, note = _hostfile_gpus(environ, ips, rank, text)
        notes += [note] if note else []
    gpus = _gpus(environ, tool, notes)
    if gpus is not None:
        inputs["gpus"] = (tool.gpus,) + ((DSTACK_HOSTFILE,) if every is not None else ())
    return Report(
        source=line.name,
        title=line.title,
        nodes=nodes_of(ips),
        node_rank=rank,
        gpus=gpus,
        session_id=environ.get(tool.job_id) or None,
        job=(line.name, environ.get(tool.job_id, ""), ips[0]),
        inputs=inputs,
        order=f"the order of {tool.ips} (node rank r = line r)",
        notes=tuple(notes),
    )
