"""The OpenPBS / Torque source, lines ``pbs`` and ``torque-task``: the node layer only
(docs/sources/schedulers.md). Rules and their sources:

* ``nodes``: ``PBS_NODEFILE``'s hosts by first appearance, slots summed; OpenPBS
  (openpbs/openpbs@cd7ab5e ``src/resmom/start_exec.c``) ``generate_pbs_nodefile`` writes it
  in exec_vnode order, ``add_mom_to_job`` numbers the MoMs so, the mother superior first.
* ``node_rank`` only in a TM task (``start_process``: ``PBS_TASKNUM`` ``%8.8X``, and
  ``PBS_NODENUM``); the batch script's decimal ``PBS_TASKNUM`` (``finish_exec``) is copied
  into every rank by launchers (MPICH's Hydra): no proof.
* The node file is on the mother superior only, unless ``gen_nodefile_on_sister_mom``
  (``src/resmom/mom_comm.c``); unreadable, or a batch script of several hosts: a problem.
* Torque (adaptivecomputing/torque ``src/resmom/start_exec.c`` ``InitUserEnv``,
  ``mom_job_func.c``, ``MOM_HAS_NODEFILE``): a decimal ``PBS_TASKNUM`` (1: the batch
  script) beside ``PBS_VNODENUM``, ``PBS_NUM_NODES``, the node file on the mother superior
  only. A ``pbsdsh`` task is line ``torque-task`` on every host (one set of job facts): the
  master only from ``MASTER_ADDR`` (``src/cmds/pbsdsh.c`` passes nothing unless told).
* ``PBS_NUM_NODES``, ``PBS_NP`` (Torque's, or a site hook's) must match the file when set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe, shorten
from derive_env.sources import BY_NAME
from derive_env.sources.lists import HostSlots, one_per_slot
from derive_env.sources.report import Report
from derive_env.topology import nodes_of
from derive_env.validation import variable_index, variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source

#: ``PBS_TASKNUM`` of a TM task: ``sprintf(buf, "%8.8X", ti_task)`` (start_process).
_TM_TASK = re.compile(r"[0-9A-F]{8}\Z")
_ORDER = ("PBS_NODEFILE order: the hosts by first appearance, the mother superior first "
          "(src/resmom/start_exec.c generate_pbs_nodefile, add_mom_to_job)")
#: What to do, first: derive-env in the wrong place (the batch script, or around mpiexec).
_START = ("run derive-env inside the launcher, after it: pbsdsh -u derive-env -- torchrun ... "
          "(one task per host), or mpiexec ... derive-env -- python train.py")
#: What a Torque TM task on a sister host is told to pass (module docstring).
PASS_MASTER = ("pbsdsh -u -e MASTER_ADDR=$(head -n1 $PBS_NODEFILE) derive-env -- torchrun "
               "..., from the batch script")


def files_needed(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """``PBS_NODEFILE``'s path, for the edge to read and pass to :func:`read`."""
    return (environ["PBS_NODEFILE"],) if environ.get("PBS_NODEFILE") else ()


def _hosts(path: str, text: str) -> HostSlots:
    """The node file's hosts and slots; ``TopologyError`` naming the file when malformed."""
    try:
        return one_per_slot(text, "one host name per line, one line per slot")
    except ValueError as exc:
        raise TopologyError(f"PBS_NODEFILE={shorten(path)!r}: expected {exc} (the file "
                            "the MoM wrote for this job; was it edited?)") from None


def _torque_counts(environ: Mapping[str, str], listed: HostSlots,
                   inputs: dict[str, tuple[str, ...]]) -> None:
    """``PBS_NUM_NODES`` and ``PBS_NP`` (Torque's, or a site hook's) against the file."""
    for name, want, what in (("PBS_NUM_NODES", len(listed.hosts), "distinct hosts"),
                             ("PBS_NP", listed.total(), "lines")):
        if environ.get(name):
            if variable_int(environ, name, 1) != want:
                raise TopologyError(describe(
                    name, environ[name],
                    f"the number of {what} of PBS_NODEFILE={shorten(environ['PBS_NODEFILE'])!r} "
                    f"({want}): both describe this job, so one belongs to another job or "
                    "was set by hand"))
            inputs["num_nodes"] = (*inputs.get("num_nodes", ()), name)


def torque_task(environ: Mapping[str, str]) -> bool:
    """Whether this process is a Torque TM task (``pbsdsh``): a decimal ``PBS_TASKNUM``
    other than the batch script's 1, beside Torque's ``PBS_VNODENUM`` (module docstring)."""
    task = environ.get("PBS_TASKNUM", "").strip()
    return bool(environ.get("PBS_VNODENUM")) and task.isascii() and task.isdigit() and \
        int(task) > 1


def _node_rank(environ: Mapping[str, str], count: int | None,
               inputs: dict[str, tuple[str, ...]], notes: list[str]) -> int | None:
    """This process's node, where a TM task's MoM wrote it (module docstring)."""
    task = environ.get("PBS_TASKNUM", "")
    torque = torque_task(environ)
    if not _TM_TASK.match(task) and not torque:
        if task:
            notes.append(f"PBS_TASKNUM={task!r} (decimal): the batch script's environment, "
                         "here or copied by a launcher; PBS_NODENUM is not this process's node")
        return None
    if not environ.get("PBS_NODENUM"):
        raise TopologyError(describe(
            "PBS_TASKNUM", task, "PBS_NODENUM to be set as well: the MoM sets both for a TM "
            "task (src/resmom/start_exec.c start_process)"))
    node = variable_int(environ, "PBS_NODENUM", 0) if count is None else variable_index(
        environ, "PBS_NODENUM", (count, f"the {count} host(s) of PBS_NODEFILE"), "the MoM "
        "numbers the job's hosts from 0 in the file's order; was the file or the variable "
        "copied from another job?")
    inputs["node_rank"] = ("PBS_NODENUM", "PBS_TASKNUM")
    notes.append(f"a TM task (PBS_TASKNUM={task!r}, " + (
        "decimal, beside PBS_VNODENUM: Torque's" if torque else "hexadecimal")
        + f") on node PBS_NODENUM={node}")
    return node


def _sister(environ: Mapping[str, str], line: Source,
            listed: HostSlots | None = None) -> Report:
    """A Torque TM task (line ``torque-task``) on any host; ``listed``: the node file's hosts
    where readable, cross-checked only. TopologyError: the counts against the node file,
    ``PBS_NODENUM`` beyond them."""
    job = environ["PBS_JOBID"].strip()
    inputs: dict[str, tuple[str, ...]] = {"ports": ("PBS_JOBID",)}
    notes: list[str] = []
    count = variable_int(environ, "PBS_NUM_NODES", 1) if environ.get("PBS_NUM_NODES") else None
    if listed is not None:
        _torque_counts(environ, listed, {})
        notes.append(f"PBS_NODEFILE ({len(listed.hosts)} hosts, first {listed.hosts[0]}) "
                     "cross-checked only: the sister hosts' tasks cannot read it")
    node = _node_rank(environ, count if listed is None else len(listed.hosts), inputs, notes)
    if count is not None:
        inputs["num_nodes"] = ("PBS_NUM_NODES",)
    why = ("Torque writes PBS_NODEFILE on the mother superior only (src/resmom/start_exec.c "
           "InitUserEnv, MOM_HAS_NODEFILE)")
    master, problem = environ.get("MASTER_ADDR", "").strip() or None, None
    if master is not None:
        inputs["master"] = ("MASTER_ADDR",)
        notes.append(f"{why}: the master is MASTER_ADDR, passed to the task")
    elif node is None or count is None or count > 1:
        problem = (f"{line.title} on node PBS_NODENUM={environ.get('PBS_NODENUM')} of "
                   f"PBS_NUM_NODES={environ.get('PBS_NUM_NODES', '?')}: {why}, so the job's "
                   "first host, the master, is not known "
                   + ("here" if listed is None else
                      f"on the sister hosts (here, {listed.hosts[0]})")
                   + "; pass it to every task: "
                   + PASS_MASTER)
    return Report(source=line.name, title=line.title, num_nodes=count, node_rank=node,
                  master=master, job=("pbs", job, "allocation"), session_id=job,
                  inputs=inputs, notes=tuple(notes), problem=problem)


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """The node layer; ``job`` = ``("pbs", PBS_JOBID, "allocation")``. TopologyError: a bad
    node file, ``PBS_NODENUM`` beyond its hosts (or unset in a TM task), Torque's counts."""
    if line.name == "torque-task":
        return _sister(environ, line)
    job = environ["PBS_JOBID"].strip()
    path = environ["PBS_NODEFILE"]
    text = (files or {}).get(path)
    listed = _hosts(path, text) if text is not None else None
    if torque_task(environ):
        # The mother superior's pbsdsh task: the same line as its sisters' (docstring).
        return _sister(environ, BY_NAME["torque-task"], listed)
    inputs: dict[str, tuple[str, ...]] = {"ports": ("PBS_JOBID",)}
    notes: list[str] = []
    count = len(listed.hosts) if listed is not None else None
    node_rank = _node_rank(environ, count, inputs, notes)
    problem = None
    if listed is None:
        problem = (
            f"PBS_NODEFILE={shorten(path)!r}: expected a file this process can read (the "
            "job's hosts; the master is its first line): the MoM writes it on the first host "
            "only, unless the MoM option gen_nodefile_on_sister_mom is 1 (set it, and make "
            "$PBS_HOME/aux visible inside the container), or set MASTER_ADDR to the first host "
            "of the node file for every process")
    else:
        inputs["nodes"] = ("PBS_NODEFILE",)
        _torque_counts(environ, listed, inputs)
        notes.append(listed.summary())
        if count == 1:
            node_rank = 0
            inputs.setdefault("node_rank", ("PBS_NODEFILE",))
        elif node_rank is None:
            problem = (
                f"{_START}. Here it runs in the batch script (derive-env -- mpiexec ... runs "
                f"it there too), which runs on the first of the job's {count} hosts only "
                f"(PBS_NODEFILE={shorten(path)!r})")
    return Report(
        source=line.name, title=line.title,
        nodes=nodes_of(listed.hosts) if listed is not None else (), node_rank=node_rank,
        job=("pbs", job, "allocation"), session_id=job, inputs=inputs,
        order=_ORDER if listed is not None else None, notes=tuple(notes), problem=problem)
