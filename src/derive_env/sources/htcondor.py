"""The HTCondor parallel-universe source: a node's index and the node count, no master.

Table line ``htcondor`` (sources-cloud.md 18; htcondor/htcondor
``src/condor_starter.V6.1/parallel_proc.cpp`` ``ParallelProc::addEnvVars``): the starter of
each node of a parallel-universe job sets ``_CONDOR_PROCNO`` (this node's number, 0 for the
first) and ``_CONDOR_NPROCS`` (the job's node count, ``CurrentHosts`` of the job ad), and
``_CONDOR_REMOTE_SPOOL_DIR``. No host list and no master are set: peers find node 0
through job-ad attributes it publishes with ``condor_chirp set_job_attr`` (the contact file
of the shipped ``sshd.sh`` / ``openmpiscript`` lives in the submit side's spool and is
fetched with condor_chirp too), which no process can read from its environment or a local
file. So the source states the node layer without hosts (node rank and count), like an
MPI launcher's partial topology (sources/mpi.py): a job of one node is complete; a larger
job needs ``MASTER_ADDR`` for every node (node 0's address, published by the job's own
wrapper), and is refused with that fix when it is not set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe
from derive_env.sources.report import Report
from derive_env.validation import variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """What a parallel-universe node's environment says (module docstring).

    :param environ: the node's environment; ``_CONDOR_PROCNO`` and ``_CONDOR_NPROCS`` set.
    :param line: the ``htcondor`` table line.
    :param files: unused.
    :returns: ``num_nodes`` = ``_CONDOR_NPROCS``, ``node_rank`` = ``_CONDOR_PROCNO``, ``job``
        = ``("htcondor", _CONDOR_REMOTE_SPOOL_DIR or "", "")`` (the spool directory names
        the cluster and proc, the same on every node).
    :raises TopologyError: a count or index that is not a decimal integer, an index not
        below the count.
    """
    count = variable_int(environ, "_CONDOR_NPROCS", 1)
    index = variable_int(environ, "_CONDOR_PROCNO", 0)
    if index >= count:
        raise TopologyError(describe(
            "_CONDOR_PROCNO", environ["_CONDOR_PROCNO"],
            f"a node number below _CONDOR_NPROCS={environ['_CONDOR_NPROCS']!r}: the starter "
            "sets both for one node (parallel_proc.cpp), so one was set by hand"))
    spool = environ.get("_CONDOR_REMOTE_SPOOL_DIR", "").strip()
    inputs = {"num_nodes": ("_CONDOR_NPROCS",), "node_rank": ("_CONDOR_PROCNO",)}
    if spool:
        inputs["ports"] = ("_CONDOR_REMOTE_SPOOL_DIR",)
    return Report(
        source=line.name, title=line.title, num_nodes=count, node_rank=index,
        job=("htcondor", spool, "") if spool else None, session_id=spool or None,
        inputs=inputs,
        notes=(f"node {index} of {count} (_CONDOR_PROCNO, _CONDOR_NPROCS); HTCondor states "
               "no host list: the master is node 0's address, from MASTER_ADDR",),
    )
