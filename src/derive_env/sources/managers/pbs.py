"""The OpenPBS / Torque source: a job's node file, from the batch script or a TM task.

Table line ``pbs`` (docs/sources/schedulers.md; openpbs/openpbs@cd7ab5e
``src/resmom/start_exec.c``).
The node layer only, as for a Slurm allocation (sources/managers/slurm.py ``read_allocation``):

* ``nodes`` = the hosts of ``PBS_NODEFILE`` in the order of their first appearance, each
  host's lines summed as its slots (sources/lists.py). ``generate_pbs_nodefile`` writes
  one line per vnode entry of the job (``ji_vnods``, exec_vnode order), the short host
  name; the MoMs are numbered in the same order (``add_mom_to_job``: ``hn_node`` = the
  first appearance of the MoM in exec_vnode, ``ji_nodeid`` = this MoM's), the mother
  superior first: node rank r = the r-th distinct host, the master = the first one.
* ``node_rank`` only where the MoM wrote it for this process: a TM task (``pbsdsh``, an MPI
  launcher's ``tm`` daemons; ``start_process``) has ``PBS_TASKNUM`` as eight hexadecimal
  digits (``%8.8X``) and ``PBS_NODENUM`` = ``ji_nodeid``. The batch script (``finish_exec``)
  writes ``PBS_TASKNUM`` in decimal (``%u``); its ``PBS_NODENUM=0`` is copied into every
  rank by a launcher that forwards its environment (MPICH's Hydra), so it proves nothing
  outside the batch script, and the batch script alone runs on one node.
* The node file exists on the mother superior; on a sister MoM only with the MoM option
  ``gen_nodefile_on_sister_mom`` (``src/resmom/mom_comm.c``, ``catch_child.c``): where it
  cannot be read, :attr:`Report.problem` says so (an inner launcher's ranks then need
  ``MASTER_ADDR``, as any launcher without a host list).

**Torque** (adaptivecomputing/torque ``src/resmom/start_exec.c`` ``InitUserEnv``, used for
the batch script and for a TM task's ``start_process`` alike) writes ``PBS_TASKNUM`` in
decimal (``"%d"`` of ``ti_task``) for both: the batch script is the job's first task
(``ji_taskid`` starts at 1, ``mom_job_func.c``; ``pbs_task_create``), a ``pbsdsh`` task a
later one (the mother superior numbers them, ``mom_comm.c``). Torque also sets
``PBS_VNODENUM`` (``tm_spawn``'s node, ``mom_comm.c``; 0 in the batch script),
``PBS_NODENUM`` = this MoM's ``ji_nodeid`` and ``PBS_NUM_NODES`` on every host, but
``PBS_NODEFILE`` only where the MoM wrote the file (``MOM_HAS_NODEFILE``: the mother
superior). So a decimal ``PBS_TASKNUM`` other than 1 beside ``PBS_VNODENUM`` is a Torque TM
task on node ``PBS_NODENUM``, read as line ``torque-task`` on EVERY host, the mother
superior's included: its node count is ``PBS_NUM_NODES`` and the master only what the task
was given (``pbsdsh -u -e MASTER_ADDR=...``); without it, refused naming what to pass
(``pbsdsh`` passes no variable of the batch script unless told, ``src/cmds/pbsdsh.c``).
Where the node file is readable (the mother superior) it is only cross-checked
(``PBS_NUM_NODES`` and ``PBS_NP`` against its hosts and lines, ``PBS_NODENUM`` within its
hosts), never a source of facts: the tasks of one ``pbsdsh`` must state the same job facts
(source, node count, master, no host list) on every host, so that their job digest and the
check's job key agree; facts only the mother superior can state would set it apart.

A batch script of a job of more than one host: :attr:`Report.problem` (raised when no inner
source, an MPI launcher started from the script, is seen): only ``mpiexec`` or ``pbsdsh``
start processes on the other hosts. Torque's ``PBS_NUM_NODES`` and ``PBS_NP`` (also set by
some OpenPBS sites' hooks) are checked against the file when set.
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


#: What a Torque TM task on a sister host is told to pass (module docstring).
PASS_MASTER = ("pbsdsh -u -e MASTER_ADDR=$(head -n1 $PBS_NODEFILE) derive-env -- torchrun "
               "..., from the batch script")


def _sister(environ: Mapping[str, str], line: Source,
            listed: HostSlots | None = None) -> Report:
    """A Torque TM task (line ``torque-task``) on any host: its node and the node count,
    the master only from ``MASTER_ADDR`` (module docstring).

    :param listed: the node file's hosts where this host can read it (the mother
        superior): cross-checked only, so that every host's task states the same facts.
    :raises TopologyError: ``PBS_NUM_NODES`` or ``PBS_NP`` against the node file,
        ``PBS_NODENUM`` beyond its hosts (or beyond ``PBS_NUM_NODES``).
    """
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
    """What a PBS job states: the node layer of its node file (module docstring).

    :param files: ``PBS_NODEFILE``'s path -> its content (``None``: unreadable), read in cli/.
    :returns: ``nodes`` (when the file is readable), ``node_rank`` (a TM task, or a job of
        one host), ``job`` = ``("pbs", PBS_JOBID, "allocation")`` for every process of the
        job, ``session_id`` = ``PBS_JOBID``; ``problem`` for a batch script of more than one
        host, or a node file this process cannot read.
    :raises TopologyError: a malformed node file, ``PBS_NODENUM`` beyond its hosts, Torque's
        counts that contradict it, a TM task without ``PBS_NODENUM``.
    """
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
        notes.append("slots per host: " + ", ".join(
            f"{host} {slots}" for host, slots in zip(listed.hosts[:8], listed.slots[:8],
                                                      strict=False))
            + (" ..." if len(listed.hosts) > 8 else ""))
        if count == 1:
            node_rank = 0
            inputs.setdefault("node_rank", ("PBS_NODEFILE",))
        elif node_rank is None:
            problem = (
                f"{_START}. Here it runs in the batch script (derive-env -- mpiexec ... runs "
                f"it there too), which runs on the first of the job's {count} hosts only "
                f"(PBS_NODEFILE={shorten(path)!r})")
    return Report(
        source=line.name,
        title=line.title,
        nodes=nodes_of(listed.hosts) if listed is not None else (),
        node_rank=node_rank,
        job=("pbs", job, "allocation"),
        session_id=job,
        inputs=inputs,
        order=_ORDER if listed is not None else None,
        notes=tuple(notes),
        problem=problem,
    )
