"""The AWS Batch source: one node of a multi-node parallel (MNP) job.

Table line ``aws-batch`` (docs/sources/clouds.md). What AWS Batch sets in every node's
container (AWS Batch User Guide, "Multi-node parallel jobs", "Environment variables":
awsdocs/aws-batch-user-guide ``doc_source/multi-node-parallel-jobs.md``):

- ``AWS_BATCH_JOB_NUM_NODES``: the nodes requested; ``AWS_BATCH_JOB_NODE_INDEX``: this node's
  index, 0-based and unique; ``AWS_BATCH_JOB_MAIN_NODE_INDEX``: the main node's index (the
  main node need not be node 0);
- ``AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS``: the main node's private IPv4 address,
  "only set in multi-node parallel job child nodes (it is not present on the main node)";
- ``AWS_BATCH_JOB_ID``: the job id; a node of an MNP job is addressed as ``<job id>#<node
  index>`` ("Nodes are addressed using #N notation"), and that is the id its container sees
  (AWS ParallelCluster's ``batch_mpi/submit_mpi.sh`` strips it: ``${AWS_BATCH_JOB_ID%#*}``),
  so the job-wide id is the part before ``#``.

MNP containers use the ``awsvpc`` network mode: each gets its own network interface and
primary private IP, the address the children are given. No host list, no GPU count, no
names. So the views differ (docs/sources/clouds.md): a child reads the master from
the variable; the main node has none and uses its own address, the source address of its
default route (``/proc/net/route`` and ``/proc/net/fib_trie``, read at the edge, cli/), never
loopback: the same address on every node, so the digest agrees. An address exported by hand
on the main node (``AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS=$(hostname -i)``, as
NeMo fine-tuning scripts do) is used when it is one of the node's own addresses.

Node ranks: the main node first, then the others in node-index order, i.e. node rank =
``(NODE_INDEX - MAIN_NODE_INDEX) mod NUM_NODES`` (the master is node rank 0). Without a host
list TensorFlow's ``TF_CONFIG`` cannot be built (frameworks/tensorflow.py says so).
A single-node (non-MNP) Batch job has ``AWS_BATCH_JOB_ID`` only: not this source.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe
from derive_env.hostnet import local_v4, routes_v4
from derive_env.sources import BY_NAME
from derive_env.sources.report import Report
from derive_env.sources.roles import numbers
from derive_env.validation import variable_index

if TYPE_CHECKING:
    from derive_env.sources import Source

#: The variable that names the main node's address (on children only).
MAIN_ADDRESS = "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"
#: The kernel's IPv4 routes and local addresses: the main node's own address.
ROUTES, LOCAL = "/proc/net/route", "/proc/net/fib_trie"

_FIX = BY_NAME["aws-batch"].roles["why"]
_SET_BY_HAND = (f"export {MAIN_ADDRESS} on the main node to its private IPv4 address (the "
                f"address the child nodes get: {MAIN_ADDRESS}=$(hostname -i) derive-env ...)")

def files_needed(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """On the main node of a job of several nodes only: the route and address tables (the
    address table alone when the address was exported by hand: it is checked against it)."""
    if environ.get("AWS_BATCH_JOB_NUM_NODES") == "1" or (
            environ.get("AWS_BATCH_JOB_NODE_INDEX")
            != environ.get("AWS_BATCH_JOB_MAIN_NODE_INDEX")):
        return ()
    return (LOCAL,) if environ.get(MAIN_ADDRESS) else (ROUTES, LOCAL)


def _local(fib_trie: str) -> list[ipaddress.IPv4Address]:
    """This node's own IPv4 addresses (``/32 host LOCAL`` leaves of ``fib_trie``), in order,
    loopback and link-local left out."""
    return [a for a in local_v4(fib_trie) if not (a.is_loopback or a.is_link_local)]


def own_address(routes: str, fib_trie: str) -> tuple[str | None, str]:
    """The source address of the default route: the node's own address on the subnet of the
    default route's interface (the one holding its gateway first).

    :param routes: the text of ``/proc/net/route``; ``fib_trie``: of ``/proc/net/fib_trie``.
    :returns: ``(address, how)``: the address (``None`` when it cannot be told) and, for
        messages and ``--explain``, how it was found or why not.
    """
    # a route whose gateway field is no 4-byte address is of no use here (gateway None)
    table = [r for r in routes_v4(routes) if r.gateway is not None]
    defaults = sorted((r.metric, position, r.interface, r.gateway)
                      for position, r in enumerate(table)
                      if r.network.prefixlen == 0 and r.interface != "lo")
    if not defaults:
        return None, f"no default route in {ROUTES}"
    _, _, iface, gateway = defaults[0]
    subnets = [r.network for r in table
               if r.interface == iface and not r.via_gateway and r.network.prefixlen > 0]
    own = _local(fib_trie)
    candidates = [a for a in own if any(a in net for net in subnets)]
    on_gateway = [a for a in candidates
                  if any(a in net and gateway in net for net in subnets)]
    chosen = on_gateway or candidates
    if len(chosen) != 1:
        found = ", ".join(map(str, chosen)) or "none"
        return None, (f"the default route's interface {iface} has {len(chosen)} own "
                      f"addresses on its subnets ({found}; {ROUTES}, {LOCAL})")
    return str(chosen[0]), f"the source address of the default route (via {iface})"


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
    files = files or {}
    routes, trie = files.get(ROUTES), files.get(LOCAL)
    given = environ.get(MAIN_ADDRESS, "")
    if given:
        address = _ipv4(given, MAIN_ADDRESS)
        own = _local(trie) if trie else None
        if own is not None and ipaddress.IPv4Address(address) not in own:
            raise TopologyError(describe(
                MAIN_ADDRESS, given,
                f"one of this main node's own addresses ({', '.join(map(str, own)) or 'none'}"
                f"; {LOCAL}): AWS Batch sets it on child nodes only, so here it was exported "
                "by hand, and the child nodes would connect to another host"))
        notes.append(f"this is the main node: master = {MAIN_ADDRESS}, exported by hand (AWS "
                     "Batch sets it on child nodes only)")
        return address, (MAIN_ADDRESS,)
    if routes is None or trie is None:
        why = f"{ROUTES} and {LOCAL} cannot be read here"
        address = None
    else:
        address, why = own_address(routes, trie)
    if address is None:
        raise TopologyError(
            f"AWS Batch multi-node parallel job, main node (AWS_BATCH_JOB_NODE_INDEX = "
            f"AWS_BATCH_JOB_MAIN_NODE_INDEX = {environ['AWS_BATCH_JOB_MAIN_NODE_INDEX']!r}): "
            f"AWS Batch gives the main node's address to the child nodes only, and its own "
            f"address cannot be told: {why}. {_SET_BY_HAND[0].upper()}{_SET_BY_HAND[1:]}")
    notes.append(f"this is the main node: master = its own address, {why} (AWS Batch gives "
                 f"it to the child nodes as {MAIN_ADDRESS})")
    return address, (ROUTES, LOCAL)


def _job_id(environ: Mapping[str, str], index: int) -> str:
    """The job-wide id: ``AWS_BATCH_JOB_ID`` without this node's ``#<node index>``."""
    value = environ["AWS_BATCH_JOB_ID"]
    base, sep, node = value.partition("#")
    if not base.strip() or (sep and node != str(index)):
        raise TopologyError(describe(
            "AWS_BATCH_JOB_ID", value,
            f"<job id> or <job id>#{index} (this node's AWS_BATCH_JOB_NODE_INDEX): AWS "
            f"Batch addresses a node of a multi-node parallel job as <job id>#<node index>; "
            f"{_FIX}"))
    return base.strip()


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """What a node of an AWS Batch multi-node parallel job says.

    :param files: on the main node, the texts of ``/proc/net/route`` and
        ``/proc/net/fib_trie`` (:func:`files_needed`; ``None``: unreadable).
    :returns: ``num_nodes`` = ``AWS_BATCH_JOB_NUM_NODES``, ``node_rank`` = ``(NODE_INDEX -
        MAIN_NODE_INDEX) mod NUM_NODES`` (the main node 0), ``master`` = the main node's
        private IPv4 address (module docstring), ``session_id`` = the job id without
        ``#<node>``, ``job`` = ``("aws-batch", that id, NUM_NODES)``: the same on every node.
        No host list, no port, no GPU count.
    :raises TopologyError: a count or index is not an integer in range, the job id's node
        part is not this node's index, a child lacks the master address or it is not an
        IPv4 address, or the main node's own address cannot be told (the message says what
        to set).
    """
    got = numbers(environ, line.roles)
    count, index = got["num_nodes"], got["node_rank"]
    main = variable_index(environ, "AWS_BATCH_JOB_MAIN_NODE_INDEX", "AWS_BATCH_JOB_NUM_NODES",
                       _FIX)
    job_id = _job_id(environ, index)
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
    nodes_vars = ("AWS_BATCH_JOB_NUM_NODES",)
    return Report(
        source=line.name,
        title=line.title,
        num_nodes=count,
        node_rank=rank,
        master=master,
        session_id=job_id,
        job=("aws-batch", job_id, str(count)),
        inputs={"num_nodes": nodes_vars,
                "node_rank": ("AWS_BATCH_JOB_NODE_INDEX", "AWS_BATCH_JOB_MAIN_NODE_INDEX"),
                **({"master": master_vars} if master else {}),
                "ports": ("AWS_BATCH_JOB_ID", *nodes_vars)},
        order="the main node first, then the others in AWS_BATCH_JOB_NODE_INDEX order",
        notes=tuple(notes),
    )
