"""The cloud launch tools: a SkyPilot or dstack task node (lines ``skypilot``, ``dstack``:
their roles name the variables; docs/sources/clouds.md): the IPs (node rank r = line r, the
master the first), the rank and the count, checked against each other (user env wins).

- SkyPilot: skypilot-org/skypilot ``sky/backends/task_codegen.py`` (``RayCodeGen.add_setup``,
  ``_add_ray_task``): ``SKYPILOT_NUM_GPUS_PER_NODE`` is 0 for a TPU or Trainium (no count).
  On Slurm (``sky/skylet/executor/slurm.py``) the IPs are the JOB's (``SLURM_JOB_NODELIST``),
  the count and rank the step's: a task on fewer nodes reports only its count and rank.
- dstack: dstackai/dstack ``runner/internal/runner/executor/executor.go`` ``execJob``, server
  ``jobs_running.py`` ``_get_cluster_info``: an IP not known yet is empty,
  ``DSTACK_MASTER_NODE_IP`` is the first; ``DSTACK_MPI_HOSTFILE`` (``writeMpiHostfile``):
  ``<ip> slots=<GPUs>`` (``<ip>`` for 0) per IP, read in cli/.
"""

from __future__ import annotations

from collections.abc import Mapping

from derive_env.errors import TopologyError, describe
from derive_env.sources import BY_NAME, Source
from derive_env.sources.lists import host_list
from derive_env.sources.report import Report
from derive_env.topology import nodes_of
from derive_env.validation import PER_NODE, variable_index, variable_int

#: This node's GPU count, per tool (no role: the line's roles name the other variables).
GPUS = {"skypilot": "SKYPILOT_NUM_GPUS_PER_NODE", "dstack": "DSTACK_GPUS_PER_NODE"}
#: dstack's copy of the first IP (executor.go).
DSTACK_MASTER = "DSTACK_MASTER_NODE_IP"
#: The Slurm job's host list, from which SkyPilot's Slurm executor writes its IP list.
SLURM_JOB_HOSTS = "SLURM_JOB_NODELIST"
#: The variable naming dstack's MPI hostfile (executor.go ``execJob``).
DSTACK_HOSTFILE = "DSTACK_MPI_HOSTFILE"


def _ips(environ: Mapping[str, str], name: str, why: str) -> tuple[str, ...]:
    """The IP list ``name`` (``lists.host_list``); an empty line with its own fix."""
    text = environ[name]
    try:
        return host_list(text)
    except ValueError as exc:
        empty = "" in (line.strip() for line in text.split("\n"))
        fix = ("an address not known yet: start derive-env once the tool has given every "
               "node's IP") if empty else why
        raise TopologyError(describe(name, text, f"{exc}; {fix}")) from None


def _gpus(environ: Mapping[str, str], line: Source, notes: list[str]) -> int | None:
    """This node's GPU count, None when unset or 0 (no GPU: the devices are counted)."""
    name = GPUS[line.name]
    if not environ.get(name):
        return None
    gpus = variable_int(environ, name, 0, f"; {line.roles['why']}", PER_NODE)
    if gpus == 0:
        notes.append(f"{name}='0': no GPU (a CPU node, or an accelerator that is no "
                     "GPU: TPU, Trainium); not a process count, the devices are counted")
        return None
    return gpus


def _part_of_the_job(environ: Mapping[str, str], line: Source, count: int,
                     rank: int) -> Report:
    """A SkyPilot task on ``count`` of the Slurm job's nodes: no host list, no master."""
    roles = line.roles
    ips, job_id = roles["hosts"][0], roles["job"]
    listed = environ[ips].count("\n") + 1
    notes = [f"node {rank} of {count} ({roles['node_rank']}, {roles['num_nodes']}); {ips} "
             f"lists the Slurm job's {listed} nodes ({SLURM_JOB_HOSTS}: SkyPilot's Slurm "
             f"executor), not this task's {count}: which line is each node's is not stated, "
             "so it is not used (nor its first line as the master)"]
    gpus = _gpus(environ, line, notes)
    inputs = {"node_rank": (roles["node_rank"],), "num_nodes": (roles["num_nodes"],),
              "ports": (job_id, ips), **({"gpus": (GPUS[line.name],)} if gpus else {})}
    return Report(source=line.name, title=line.title, num_nodes=count, node_rank=rank,
                  gpus=gpus, session_id=environ.get(job_id) or None,
                  job=(line.name, environ.get(job_id, ""), environ[ips]),
                  inputs=inputs, notes=tuple(notes))


def files_needed(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """dstack's MPI hostfile when ``DSTACK_MPI_HOSTFILE`` names one; nothing for SkyPilot."""
    path = environ.get(DSTACK_HOSTFILE, "") if name == "dstack" else ""
    return (path,) if path else ()


def _hostfile_gpus(environ: Mapping[str, str], ips: tuple[str, ...], rank: int,
                   text: str | None) -> tuple[tuple[int, ...] | None, str | None]:
    """Every node's GPU count from dstack's MPI hostfile (or ``None``), and a note (or None).
    TopologyError: IPs other than ``DSTACK_NODES_IPS`` or in another order, a line not in
    dstack's form, slots not ``DSTACK_GPUS_PER_NODE``."""
    path = environ.get(DSTACK_HOSTFILE, "")
    if not path:
        return None, None
    if text is None:
        return None, (f"{DSTACK_HOSTFILE}={path!r} is not readable here: every node's GPU "
                      "count is not known (only this node's)")
    fix = BY_NAME["dstack"].roles["why"]
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
        count = slots[len("slots="):] if slots.startswith("slots=") else "" if slots else "0"
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
    return tuple(gpus), (f"GPUs per node, from {DSTACK_HOSTFILE}: {', '.join(map(str, gpus))} "
                         "(uneven: each node starts its own count of processes)"
                         if len(set(gpus)) > 1 else None)


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """The IP list as the nodes, the node rank, this node's GPU count (None when unset or 0),
    ``job`` = ``(tool, task or run id, first IP)``. TopologyError: a malformed, empty (dstack:
    not known yet) or repeated IP, a count, rank, master or MPI hostfile that disagrees."""
    roles = line.roles
    ips_name, count_name, rank_name, job_id, why = (
        roles["hosts"][0], roles["num_nodes"], roles["node_rank"], roles["job"], roles["why"])
    ips = _ips(environ, ips_name, why)
    count = variable_int(environ, count_name, 1, f"; {why}")
    on_slurm = line.name == "skypilot" and bool(environ.get(SLURM_JOB_HOSTS))
    if count > len(ips) or (count < len(ips) and not on_slurm):
        raise TopologyError(describe(
            count_name, environ[count_name],
            f"the number of lines of {ips_name} ({len(ips)}): " + (
                f"on Slurm SkyPilot lists the job's nodes ({SLURM_JOB_HOSTS}) and counts the "
                "task's (SLURM_NNODES), never more" if on_slurm else
                "both count the task's nodes") + f"; {why}"))
    rank = variable_index(environ, rank_name, count_name, why)
    if count < len(ips):
        return _part_of_the_job(environ, line, count, rank)
    dstack = line.name == "dstack"
    inputs = {"nodes": (ips_name,), "node_rank": (rank_name,), "num_nodes": (count_name,),
              "master": (DSTACK_MASTER if dstack else ips_name,), "ports": (job_id, ips_name)}
    if dstack and environ[DSTACK_MASTER].strip() != ips[0]:
        raise TopologyError(describe(
            DSTACK_MASTER, environ[DSTACK_MASTER],
            f"the first line of {ips_name} ({ips[0]!r}): dstack gives the master node's IP "
            f"as both; {why}"))
    notes = [f"node {rank} of {count} ({rank_name}, {count_name}); master = the first line "
             f"of {ips_name}"]
    every = None
    if dstack:
        text = next(iter(files.values()), None) if files else None
        every, note = _hostfile_gpus(environ, ips, rank, text)
        notes += [note] if note else []
    gpus = _gpus(environ, line, notes)
    if gpus is not None:
        inputs["gpus"] = (GPUS[line.name],) + ((DSTACK_HOSTFILE,) if every is not None else ())
    return Report(
        source=line.name,
        title=line.title,
        nodes=nodes_of(ips),
        node_rank=rank,
        gpus=gpus,
        session_id=environ.get(job_id) or None,
        job=(line.name, environ.get(job_id, ""), ips[0]),
        inputs=inputs,
        order=f"the order of {ips_name} (node rank r = line r)",
        notes=tuple(notes),
    )
