"""AWS Batch: a node of a multi-node parallel (MNP) job, line ``aws-batch``, docs/sources/
clouds.md. The variables (AWS Batch User Guide, "Multi-node parallel jobs", "Environment
variables": https://github.com/awsdocs/aws-batch-user-guide/blob/main/doc_source/multi-node-parallel-jobs.md):
node rank = ``(AWS_BATCH_JOB_NODE_INDEX - AWS_BATCH_JOB_MAIN_NODE_INDEX) mod
AWS_BATCH_JOB_NUM_NODES``, the main node (the master) first. :data:`MAIN_ADDRESS` is "only
set in multi-node parallel job child nodes"; MNP containers use ``awsvpc`` (an address
each), so the main node's is the source address of its default route (read in cli/), or
:data:`MAIN_ADDRESS` exported by hand (``$(hostname -i)``, as NeMo's scripts do) when it is
one of its own. ``AWS_BATCH_JOB_ID`` is ``<job id>#<node index>`` ("Nodes are addressed
using #N notation"; AWS ParallelCluster's ``batch_mpi/submit_mpi.sh`` strips ``#*``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe
from derive_env.hostnet import FIB_TRIE as LOCAL
from derive_env.hostnet import ROUTES_V4 as ROUTES
from derive_env.hostnet import own_address, reachable_v4
from derive_env.sources import BY_NAME
from derive_env.sources.report import Report
from derive_env.sources.roles import numbers
from derive_env.validation import variable_index

if TYPE_CHECKING:
    from derive_env.sources import Source

#: The variable that names the main node's address (on children only).
MAIN_ADDRESS = "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"
_FIX = BY_NAME["aws-batch"].roles["why"]


def files_needed(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """The main node's route and address tables (the latter alone for an address exported
    by hand: it is checked against it); none on a child or in a job of one node."""
    main = environ.get("AWS_BATCH_JOB_NODE_INDEX") == environ.get("AWS_BATCH_JOB_MAIN_NODE_INDEX")
    if environ.get("AWS_BATCH_JOB_NUM_NODES") == "1" or not main:
        return ()
    return (LOCAL,) if environ.get(MAIN_ADDRESS) else (ROUTES, LOCAL)


def _ipv4(value: str, name: str) -> str:
    try:
        address = ipaddress.IPv4Address(value.strip())
    except ValueError:
        raise TopologyError(describe(name, value, f"an IPv4 address (the main node's private "
                                     f"IPv4 address); {_FIX}")) from None
    if address.is_loopback or address.is_unspecified:
        raise TopologyError(describe(name, value, "the main node's private IPv4 address, not "
                                     "a loopback one: the child nodes connect to it"))
    return str(address)


def _main_master(environ: Mapping[str, str], files: Mapping[str, str | None] | None,
                 notes: list[str]) -> tuple[str, tuple[str, ...]]:
    """The main node's master: its own address (module docstring)."""
    routes, trie = (files or {}).get(ROUTES), (files or {}).get(LOCAL)
    given = environ.get(MAIN_ADDRESS, "")
    if given:
        address = _ipv4(given, MAIN_ADDRESS)
        own = reachable_v4(trie) if trie else None
        if own is not None and ipaddress.IPv4Address(address) not in own:
            raise TopologyError(describe(
                MAIN_ADDRESS, given,
                f"one of this main node's own addresses ({', '.join(map(str, own)) or 'none'}"
                f"; {LOCAL}): AWS Batch sets it on child nodes only, so here it was exported "
                "by hand, and the child nodes would connect to another host"))
        notes.append(f"this is the main node: master = {MAIN_ADDRESS}, exported by hand (AWS "
                     "Batch sets it on child nodes only)")
        return address, (MAIN_ADDRESS,)
    address, why = (own_address(routes, trie) if routes is not None and trie is not None
                    else (None, f"{ROUTES} and {LOCAL} cannot be read here"))
    if address is None:
        raise TopologyError(
            f"AWS Batch multi-node parallel job, main node (AWS_BATCH_JOB_NODE_INDEX = "
            f"AWS_BATCH_JOB_MAIN_NODE_INDEX = {environ['AWS_BATCH_JOB_MAIN_NODE_INDEX']!r}): "
            f"AWS Batch gives the main node's address to the child nodes only, and its own "
            f"address cannot be told: {why}. Export {MAIN_ADDRESS} on the main node to its "
            f"private IPv4 address (the address the child nodes get: {MAIN_ADDRESS}=$(hostname "
            "-i) derive-env ...)")
    notes.append(f"this is the main node: master = its own address, {why} (AWS Batch gives "
                 f"it to the child nodes as {MAIN_ADDRESS})")
    return address, (ROUTES, LOCAL)


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """The node count, rank and master (module docstring), the job ``("aws-batch", job id
    before ``#``, NUM_NODES)``. TopologyError: a bad count or index, job id or master
    address; the main node's own address unknown (the message says what to set)."""
    got = numbers(environ, line.roles)
    count, index = got["num_nodes"], got["node_rank"]
    main = variable_index(environ, "AWS_BATCH_JOB_MAIN_NODE_INDEX", "AWS_BATCH_JOB_NUM_NODES",
                       _FIX)
    base, sep, node = environ["AWS_BATCH_JOB_ID"].partition("#")
    if not base.strip() or (sep and node != str(index)):  # the job-wide id, before "#"
        raise TopologyError(describe(
            "AWS_BATCH_JOB_ID", environ["AWS_BATCH_JOB_ID"],
            f"<job id> or <job id>#{index} (this node's AWS_BATCH_JOB_NODE_INDEX): AWS "
            f"Batch addresses a node of a multi-node parallel job as <job id>#<node index>; "
            f"{_FIX}"))
    job_id = base.strip()
    rank = (index - main) % count
    notes = [f"node index {index} of {count}, main node index {main}: node rank {rank} (the "
             "main node first, then the others in node-index order)"]
    master: str | None = None
    master_vars: tuple[str, ...] = ()
    if count == 1:
        notes.append("a job of one node: no master address needed")
    elif index == main:
        master, master_vars = _main_master(environ, files, notes)
    elif not environ.get(MAIN_ADDRESS):
        raise TopologyError(describe(
            MAIN_ADDRESS, environ.get(MAIN_ADDRESS, ""),
            f"the main node's private IPv4 address: this is child node {index} "
            f"(AWS_BATCH_JOB_MAIN_NODE_INDEX={main}), where AWS Batch sets it; {_FIX}"))
    else:
        master, master_vars = _ipv4(environ[MAIN_ADDRESS], MAIN_ADDRESS), (MAIN_ADDRESS,)
        notes.append(f"a child node: master = {MAIN_ADDRESS}")
    if count > 1:
        notes.append("no host list (AWS Batch states none): TF_CONFIG cannot be built")
    return Report(
        source=line.name, title=line.title, num_nodes=count, node_rank=rank, master=master,
        session_id=job_id, job=("aws-batch", job_id, str(count)),
        inputs={"num_nodes": ("AWS_BATCH_JOB_NUM_NODES",),
                "node_rank": ("AWS_BATCH_JOB_NODE_INDEX", "AWS_BATCH_JOB_MAIN_NODE_INDEX"),
                **({"master": master_vars} if master else {}),
                "ports": ("AWS_BATCH_JOB_ID", "AWS_BATCH_JOB_NUM_NODES")},
        order="the main node first, then the others in AWS_BATCH_JOB_NODE_INDEX order",
        notes=tuple(notes))
