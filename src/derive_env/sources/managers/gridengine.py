"""The Grid Engine source, line ``gridengine``: a parallel-environment job of Son of Grid
Engine or Open Cluster Scheduler (docs/sources/gridengine.md). What ``sge_execd`` sets
(hpc-gridware/clusterscheduler ``source/daemons/execd/exec_job.c`` ``sge_exec_job``;
recorded on Debian's 8.1.9 in tests/fixtures/gridengine/): ``SGE_TASK_ID`` ``undefined``
outside an array job; ``HOSTNAME`` the host of the queue (``responsible_queue``);
``NHOSTS``, ``NSLOTS`` the whole job on the master host, the host's own part in a ``qrsh
-inherit`` task on another (recorded); ``PE_HOSTFILE`` ("forward PE_HOSTFILE only to master
task", passed on by ``-V``), a line per granted queue, the master queue first.

``nodes`` = the file's hosts, ``node_rank`` = ``HOSTNAME``'s place; :attr:`Report.problem`
for an unreadable file, or the job script of several hosts (raised when no inner source,
Open MPI's mpirun ``orte/mca/ras/gridengine``, is seen).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import ON_ERROR_WARN, TopologyError, describe, shorten
from derive_env.hosts import host_key
from derive_env.sources.lists import HostSlots, pe_hostfile
from derive_env.sources.report import Report
from derive_env.topology import nodes_of
from derive_env.validation import variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source

_ORDER = ("PE_HOSTFILE order: the job's granted queues, the master queue's host first "
          "(exec_job.c writes the file from the granted destination list), each host once "
          "at its first line, its slots summed over its queues")
_FORMAT = "one line per granted queue: <host> <slots> <queue> <processors>"
#: What to do, first: derive-env in the wrong place (the job script, or around mpirun).
_HOW = ("run derive-env inside mpirun or qrsh -inherit, after it: mpirun derive-env -- python "
        "train.py (Open MPI reads PE_HOSTFILE), or one task per host: qrsh -inherit -V <host> "
        "derive-env -- torchrun ... (-V passes PE_HOSTFILE on)")
#: A task's spool folder: ``active_jobs/<job>.<array task>/<pe task id>`` (exec_job.c
#: ``sge_get_active_job_file_path`` with a PE task); the master task's has no third part.
_TASK_SPOOL = re.compile(r"/active_jobs/[0-9]+\.[0-9]+/[^/]+/?\Z")


def files_needed(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """``PE_HOSTFILE``'s path, for the edge (cli/) to read."""
    path = environ.get("PE_HOSTFILE", "")
    return (path,) if path else ()


def _is_task(environ: Mapping[str, str]) -> bool:
    """A PE task (``qrsh -inherit``): ``SGE_PE_TASK_ID`` (Open Cluster Scheduler), or its
    spool folder in ``SGE_JOB_SPOOL_DIR`` (Son of Grid Engine 8.1.9 sets no task id: recorded)."""
    return bool(environ.get("SGE_PE_TASK_ID")) or bool(
        _TASK_SPOOL.search(environ.get("SGE_JOB_SPOOL_DIR", "")))


def _array_task(environ: Mapping[str, str]) -> str | None:
    """``SGE_TASK_ID``: ``None`` for ``undefined`` (not an array job) or unset, else a number."""
    value = environ.get("SGE_TASK_ID", "undefined")
    if value == "undefined":
        return None
    return str(variable_int(
        environ, "SGE_TASK_ID", 1, " (an array task), or 'undefined' (a job that is not an "
        "array: exec_job.c sets the literal)"))


def _allocation(environ: Mapping[str, str], text: str) -> HostSlots:
    try:
        return pe_hostfile(text, _FORMAT)
    except ValueError as exc:
        raise TopologyError(
            f"PE_HOSTFILE={shorten(environ['PE_HOSTFILE'])!r}: expected {exc}") from None


def _node_rank(environ: Mapping[str, str], hosts: tuple[str, ...]) -> int | None:
    """``HOSTNAME``'s position in ``hosts``, compared as DNS does, or by its first label
    against the other form (short vs fully qualified: the cell's ``default_domain``)."""
    name = environ.get("HOSTNAME", "")
    if not name:
        return None
    key = host_key(name)
    # One C-speed pass first (4,096 hosts: 2M instructions less); host_key per host only for
    # a name with a trailing dot. Unique either way: lists.py sums hosts by host_key.
    keys = "\n".join(hosts).lower().split("\n")
    if key in keys:
        return keys.index(key)
    keys = [host_key(host) for host in hosts]
    if key in keys:
        return keys.index(key)
    short = [k.split(".")[0] for k in keys]
    if short.count(key.split(".")[0]) == 1:
        return short.index(key.split(".")[0])
    raise TopologyError(describe(
        "HOSTNAME", name,
        f"one of the hosts of PE_HOSTFILE={shorten(environ['PE_HOSTFILE'])!r} "
        f"({', '.join(hosts[:8])}{' ...' if len(hosts) > 8 else ''}): Grid Engine sets "
        "HOSTNAME to the host the process runs on; the file belongs to another job, or "
        "HOSTNAME was changed"))


def _check_counts(environ: Mapping[str, str], alloc: HostSlots, node_rank: int | None) -> bool:
    """``NHOSTS``, ``NSLOTS`` against the file: the whole job's, or (a task on another host
    than the master) 1 host and that host's slots, the latter returning ``True``."""
    count = len(alloc.hosts)
    nhosts = variable_int(environ, "NHOSTS", 1)
    nslots = variable_int(environ, "NSLOTS", 1) if environ.get("NSLOTS") else None
    part = nhosts == 1 and count > 1
    if nhosts != count and not part:
        raise TopologyError(describe(
            "NHOSTS", environ["NHOSTS"],
            f"{count}, the hosts of PE_HOSTFILE={shorten(environ['PE_HOSTFILE'])!r} (or 1 in "
            "a task qrsh -inherit started on another host); the file belongs to another job"))
    if part and node_rank == 0:
        raise TopologyError(describe(
            "NHOSTS", environ["NHOSTS"],
            f"{count} on the master host {alloc.hosts[0]!r} (HOSTNAME): Grid Engine counts "
            "the whole job there; NHOSTS=1 is a task's on another host"))
    if nslots is None or (part and node_rank is None):
        return part
    slots, which = alloc.total(), "the sum of the slots of PE_HOSTFILE"
    if part and node_rank is not None:
        slots, which = alloc.slots[node_rank], f"the slots of {alloc.hosts[node_rank]!r} there"
    if nslots != slots:
        raise TopologyError(describe(
            "NSLOTS", environ["NSLOTS"], f"{slots}, {which} (exec_job.c counts both from the "
            "same granted queues); the file belongs to another job"))
    return part


def _unreadable(environ: Mapping[str, str], line: Source, job: tuple[str, str, str],
                session: str) -> Report:
    """No nodes: the file is unreadable here; ``job``, ``session`` as :func:`read`'s."""
    path = shorten(environ["PE_HOSTFILE"])
    why = ("Grid Engine writes it in the master host's spool folder, and qrsh -inherit -V "
           "passed that path to a task on another host" if _is_task(environ) else
           "Grid Engine writes it before the job script starts")
    return Report(
        source=line.name, title=line.title, job=job, session_id=session,
        inputs={"ports": ("JOB_ID", "SGE_TASK_ID")},
        notes=(f"PE_HOSTFILE={path!r} is not readable here",),
        problem=(f"PE_HOSTFILE={path!r}: expected a file this process can read ({why}): "
                 "copy it to a shared folder in the job script and point PE_HOSTFILE there "
                 "before starting the tasks (cp \"$PE_HOSTFILE\" ~/pe_hostfile.$JOB_ID; export "
                 "PE_HOSTFILE=~/pe_hostfile.$JOB_ID), or share the execd spool folder; "
                 + ON_ERROR_WARN))


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """The node layer; ``job`` = ("gridengine", JOB_ID, array task or ""). TopologyError:
    ``JOB_ID``, ``NHOSTS``, ``NSLOTS`` or ``SGE_TASK_ID`` malformed, a malformed file,
    counts that disagree with it, ``HOSTNAME`` not in it."""
    job_id = str(variable_int(environ, "JOB_ID", 1, " (Grid Engine's job number)"))
    array = _array_task(environ)
    job = ("gridengine", job_id, array or "")
    session = job_id if array is None else f"{job_id}.{array}"  # Grid Engine's job.task
    text = (files or {}).get(environ["PE_HOSTFILE"])
    if text is None:
        return _unreadable(environ, line, job, session)
    task = _is_task(environ)
    alloc = _allocation(environ, text)
    node_rank = _node_rank(environ, alloc.hosts)
    task = _check_counts(environ, alloc, node_rank) or task
    inputs: dict[str, tuple[str, ...]] = {
        "nodes": ("PE_HOSTFILE",), "ports": ("JOB_ID", "SGE_TASK_ID")}
    hosts = alloc.hosts
    notes = [f"{'a task (qrsh -inherit)' if task else 'the job script (master task)'} on "
             f"{hosts[node_rank] if node_rank is not None else 'an unknown host'}; "
             f"{alloc.total()} slot(s) on {len(hosts)} host(s)"]
    if node_rank is not None:
        inputs["node_rank"] = ("HOSTNAME", "PE_HOSTFILE")
    elif not task:
        node_rank = 0  # the master task runs on the master queue's host, the first line
        inputs["node_rank"] = ("PE_HOSTFILE",)
    problem = None if len(hosts) == 1 or task else (
        f"{_HOW}. Here it runs in the job script (derive-env -- mpirun ... runs it there "
        "too), which runs on the master host only, the first of PE_HOSTFILE's "
        f"NHOSTS={shorten(environ['NHOSTS'])!r}, and Grid Engine starts nothing on the others")
    return Report(
        source=line.name, title=line.title, nodes=nodes_of(hosts), node_rank=node_rank,
        job=job, session_id=session, inputs=inputs, order=_ORDER, notes=tuple(notes),
        problem=problem)
