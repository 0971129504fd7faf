"""The IBM LSF source (docs/sources/schedulers.md; IBM Spectrum LSF, "Environment variables
set for job execution"), two table lines:

* ``lsf``: the hosts of ``LSB_MCPU_HOSTS`` (the batch script's host first), slots summed (as
  Open MPI's ``ras/lsf``, open-mpi/ompi#1572); ``LSB_HOSTS`` (a word per slot) must agree.
* ``jsrun`` (IBM Job Step Manager): the process layer of ``JSM_NAMESPACE_*``, Spectrum MPI's
  ``OMPI_COMM_WORLD_*`` its companions;
  the compute hosts from ``LSB_DJOB_RANKFILE`` without its first line, the launch node
  (PyTorch Lightning ``LSFEnvironment._read_hosts``; OLCF's Summit scripts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe, shorten
from derive_env.sources.lists import HostSlots, one_per_slot, word_pairs
from derive_env.sources.report import Processes, Report, parsed
from derive_env.topology import nodes_of
from derive_env.validation import variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source

_ALLOC_ORDER = ("LSB_MCPU_HOSTS order: the execution hosts by first appearance, the batch "
                "script's host first")
_JSRUN_ORDER = ("LSB_DJOB_RANKFILE order without its first line (the launch node): the "
                "compute hosts by first appearance")
#: What to do, first: derive-env in the wrong place (the batch script, or around jsrun).
_START = ("run derive-env inside jsrun or mpirun, after it: jsrun ... derive-env -- python "
          "train.py")
_JSM = ("JSM_NAMESPACE_RANK", "JSM_NAMESPACE_LOCAL_RANK", "JSM_NAMESPACE_SIZE",
        "JSM_NAMESPACE_LOCAL_SIZE")
#: The same facts as Spectrum MPI (Open MPI) states them in a task jsrun started.
_SPECTRUM = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
             "OMPI_COMM_WORLD_LOCAL_SIZE")
_FACTS = ("rank", "local_rank", "world_size", "local_world_size")


def files_needed(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """``LSB_DJOB_RANKFILE``'s path for the ``jsrun`` line; none for ``lsf``."""
    if name == "jsrun" and environ.get("LSB_DJOB_RANKFILE"):
        return (environ["LSB_DJOB_RANKFILE"],)
    return ()


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """Line ``lsf`` or ``jsrun``; ``job`` = ``("lsf", LSB_JOBID, "allocation")``.
    TopologyError: a malformed or contradicting value, an unreadable rank file."""
    if line.name == "jsrun":
        return _jsrun(environ, line, files or {})
    return _allocation(environ, line)


def _job(environ: Mapping[str, str]) -> str:
    job = environ.get("LSB_JOBID", "").strip()
    if not job:
        raise TopologyError(describe("LSB_JOBID", environ.get("LSB_JOBID", ""),
                                     "the job id LSF sets for every process of the job"))
    index = environ.get("LSB_JOBINDEX", "").strip()
    return f"{job}[{index}]" if index not in ("", "0") else job


def _mcpu_pairs(value: str) -> HostSlots:
    """``LSB_MCPU_HOSTS``'s pairs (not functools.partial: this path does not import it)."""
    return word_pairs(value, "each execution host followed by its slot count")


def _mcpu_hosts(environ: Mapping[str, str]) -> HostSlots:
    value = environ["LSB_MCPU_HOSTS"]
    listed = parsed(environ, "LSB_MCPU_HOSTS", _mcpu_pairs)
    per_slot = environ.get("LSB_HOSTS", "").split()
    if per_slot:
        try:
            other = one_per_slot("\n".join(per_slot))
        except ValueError:
            other = None
        if other != listed:
            raise TopologyError(describe(
                "LSB_HOSTS", environ["LSB_HOSTS"],
                f"the hosts and slots of LSB_MCPU_HOSTS={shorten(value)!r} (one word per "
                "slot): LSF sets both for one job, so one was set by hand or inherited"))
    return listed


def _allocation(environ: Mapping[str, str], line: Source) -> Report:
    job = _job(environ)
    listed = _mcpu_hosts(environ)
    inputs = {"nodes": ("LSB_MCPU_HOSTS",), "ports": ("LSB_JOBID",)}
    count = len(listed.hosts)
    node_rank = 0 if count == 1 else None
    if node_rank == 0:
        inputs["node_rank"] = ("LSB_MCPU_HOSTS",)
    return Report(
        source=line.name, title=line.title, nodes=nodes_of(listed.hosts),
        node_rank=node_rank, job=("lsf", job, "allocation"), session_id=job,
        inputs=inputs, order=_ALLOC_ORDER, notes=(listed.summary(),),
        problem=None if count == 1 else (
            f"{_START}. Here it runs in the batch script (derive-env -- jsrun ... runs it "
            f"there too), which runs on the first of the job's {count} hosts only "
            f"(LSB_MCPU_HOSTS={shorten(environ['LSB_MCPU_HOSTS'])!r})"),
    )


def _processes(environ: Mapping[str, str], title: str) -> Processes:
    """The process layer: the four JSM_NAMESPACE_*, each set, each index below its size,
    Spectrum MPI's companions equal (not roles.read: roles.py stays off this start path)."""
    missing = [name for name in _JSM if not environ.get(name)]
    if missing:
        raise TopologyError(describe(
            missing[0], "", f"jsrun's value: jsrun sets all of {', '.join(_JSM)} for each "
            f"task; run derive-env in the command jsrun starts"))
    rank, local, world, local_world = (variable_int(environ, name, minimum)
                                       for name, minimum in zip(_JSM, (0, 0, 1, 1),
                                                                strict=True))
    for low, high, value, bound in ((_JSM[0], _JSM[2], rank, world),
                                    (_JSM[1], _JSM[3], local, local_world)):
        if value >= bound:
            raise TopologyError(describe(
                low, environ[low], f"a value below {high}={environ[high]!r}: {title} sets "
                "both for one task, so one was exported by hand"))
    if local_world > world:
        raise TopologyError(describe(
            _JSM[3], environ[_JSM[3]], f"at most {_JSM[2]}={environ[_JSM[2]]!r}: {title} "
            "sets both for one task, so one was exported by hand"))
    processes = Processes(rank, local, world, local_world)
    for own, companion in zip(_JSM, _SPECTRUM, strict=True):
        value = environ.get(companion)
        if value and value.strip() != str(getattr(processes, _FACTS[_JSM.index(own)])):
            raise TopologyError(describe(
                companion, value, f"the same value as {own}={environ[own]!r}: under jsrun, "
                "Spectrum MPI's ranks are jsrun's tasks, so one of them was exported by hand "
                f"or inherited; unset {companion} or {own}, whichever is stale"))
    return processes


def _compute_hosts(environ: Mapping[str, str], files: Mapping[str, str | None]) -> HostSlots:
    path = environ["LSB_DJOB_RANKFILE"]
    text = files.get(path)
    where = f"LSB_DJOB_RANKFILE={shorten(path)!r}"
    if text is None:
        raise TopologyError(
            f"{where}: expected a file this task can read: its hosts after the first line "
            "(the launch node) are the job's compute hosts, the master is the first of them; "
            "make the file visible at the same path inside the container (bind-mount its "
            "folder), or choose --source openmpi with MASTER_ADDR set for every rank")
    launch, _, rest = text.lstrip().partition("\n")
    if not rest.strip():
        raise TopologyError(f"{where}: expected the launch node on the first line and at "
                            f"least one compute host after it, not {1 if launch else 0} "
                            "line(s)")
    try:
        return one_per_slot(rest, "one host name per line")
    except ValueError as exc:
        raise TopologyError(f"{where}: expected {exc}") from None


def _jsrun(environ: Mapping[str, str], line: Source,
           files: Mapping[str, str | None]) -> Report:
    job = _job(environ)
    processes = _processes(environ, line.title)
    listed = _compute_hosts(environ, files)
    if len(listed.hosts) > processes.world_size:
        raise TopologyError(describe(
            "JSM_NAMESPACE_SIZE", environ["JSM_NAMESPACE_SIZE"],
            f"at least the {len(listed.hosts)} compute host(s) of LSB_DJOB_RANKFILE: jsrun "
            "runs this job's tasks on them; a jsrun of fewer tasks than hosts (jsrun -n) "
            "leaves hosts without a task, and derive-env cannot tell which"))
    inputs = {"nodes": ("LSB_DJOB_RANKFILE",), "processes": _JSM,
              **{fact: (name,) for fact, name in zip(_FACTS, _JSM, strict=True)},
              "ports": ("LSB_JOBID",)}
    return Report(
        source=line.name, title=line.title, nodes=nodes_of(listed.hosts),
        processes=processes, job=("lsf", job, "allocation"), session_id=job,
        inputs=inputs, order=_JSRUN_ORDER,
        notes=(f"the launch node (the rank file's first line) runs no task; "
               f"{len(listed.hosts)} compute host(s)",),
    )
