"""The job digest (docs/behaviour.md section 8): the job-wide facts of a derivation, and their hash.

Every node of one job must agree on these facts; a node that differs in one of them would
wait at a rendezvous no other node comes to. ``derive-env --dry-run --format digest``
prints one line, ``<digest> <node_rank> <host>``; ``--format digest-facts`` prints the
facts, one ``name: value`` line each; ``--explain`` prints them under the digest.
``on-every-node`` compares the digests of every node before it starts anything, and diffs
the facts of two nodes to name the one that differs.

The facts, in this order (docs/operator-guide.md, "The job digest"):

* the topology (:class:`~derive_env.topology.ClusterTopology`): ``source``, ``session``
  (the manager's job or session id), ``job`` (manager, job id, step id of the port
  policy), ``nodes`` (the count), ``node.<rank>`` (each node in canonical order, with its
  role and index), ``master`` (the host of rank 0), ``master_port`` (the manager's),
  ``reserved_ports``, ``processes.world_size`` and ``processes.per_node`` (when the
  launcher states them);
* the labels, validated (:class:`~derive_env.policy.ImagePolicy`): ``label.<name>`` for
  every label the policy reads, its default when unset (``-`` for none); the frameworks
  in one order whatever the label's (``jax,pytorch`` is ``pytorch,jax``);
* the derived variables, merged, by their scope
  (:mod:`derive_env.frameworks.context`): ``var.<NAME>`` for each ``SHARED``, ``FOLLOWS``
  and ``JOB`` variable (the same on every node by definition), a user-set value
  included (a value set on one node only changes that node's digest); a ``NODE`` variable
  identifies the node and is left out, but for the job-wide part of a ``JSON`` document
  (``TF_CONFIG``: ``var.TF_CONFIG.cluster``, every task's ``host:port``). A variable a
  node decides alone (``node_decided``: the interface hints, ``PET_NPROC_PER_NODE`` from
  its GPU count) is left out.

Values are written as the variable's comparison reads them (``01`` as ``1``, a host name
in lower case), so two nodes that state one fact alike agree. On the master node (node
rank 0) a loopback host in a host or ``host:port`` variable is the master itself, written as
the topology's master (a classic Kubeflow PyTorchJob gives its master pod
``MASTER_ADDR=localhost``, the others ``<job>-master-0``: one job, one digest). Nothing
node-local is in the digest: this node's rank, local rank, interfaces, GPU ids,
``TF_CONFIG``'s task.

The digest is the first 32 hex digits (128 bits) of the SHA-256 of the ``digest-facts``
text, UTF-8: ``derive-env --dry-run --format digest-facts | sha256sum | cut -c1-32``.

Imported only by ``--format digest``, ``--format digest-facts`` and ``--explain``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

from derive_env.errors import TopologyError
from derive_env.frameworks import FRAMEWORKS
from derive_env.frameworks.context import (
    ADDRESS,
    FOLLOWS,
    HOST,
    INTEGER,
    JOB,
    JSON,
    NODE,
    SHARED,
    DerivedVariable,
    node_rank_of,
)
from derive_env.hosts import is_loopback
from derive_env.labels import PREFIX

TYPE_CHECKING = False
if TYPE_CHECKING:
    from derive_env.pipeline import Derivation
    from derive_env.policy import ImagePolicy
    from derive_env.topology import ClusterTopology

__all__ = ["digest_of", "explain_lines", "facts_of", "render_digest"]

#: Hex digits of the digest: 128 bits of SHA-256 (docs/behaviour.md section 8).
DIGEST_HEX = 32
#: Scopes whose variables are the same on every node of a job.
_JOB_WIDE = (SHARED, FOLLOWS, JOB)

Fact = tuple[str, str]


def facts_of(topology: ClusterTopology, derivation: Derivation | None = None) -> list[Fact]:
    """The job-wide facts, as ``(name, value)`` pairs in their stable order (module
    docstring).

    :param topology: the topology (the derivation's, or the topology alone for an image
        that did not opt in).
    :param derivation: the merged derivation of an opted-in image, ``None`` when not opted
        in (then the labels are one fact, ``label.frameworks: -``).
    :returns: the facts; names hold no blank, values are raw text (:func:`escape` them
        for output).
    """
    facts = list(_topology_facts(topology))
    if derivation is None:
        facts.append(("label.frameworks", "-"))
        return facts
    facts += _label_facts(derivation.policy)
    master = _own_master(topology)
    for var in derivation.variables:
        facts += _variable_facts(var, master)
    return facts


def _own_master(topo: ClusterTopology) -> str | None:
    """The master's name that replaces a loopback host on the master node itself (node
    rank 0 with a master that is not loopback), else None (nothing replaced)."""
    master = topo.master_addr
    if topo.node_rank == 0 and master is not None and not is_loopback(master):
        return master.lower()
    return None


def _text(value: object) -> str:
    """A fact's value: ``-`` for none, items joined by commas."""
    if value is None or value == ():
        return "-"
    if isinstance(value, tuple):
        return ",".join(":".join(map(str, v)) if isinstance(v, tuple) else str(v) for v in value)
    return str(value)


def _topology_facts(topo: ClusterTopology) -> Iterator[Fact]:
    yield "source", topo.source
    yield "session", _text(topo.session_id)
    yield "job", " ".join(topo.job) if topo.job else "-"
    yield "nodes", _text(topo.num_nodes if topo.sized else None)
    for rank, node in enumerate(topo.nodes):
        role = f" ({node.role} {_text(node.index)})" if node.role is not None else ""
        yield f"node.{rank}", node.host.lower() + role
    yield "master", _text(topo.master_addr and topo.master_addr.lower())
    yield "master_port", _text(topo.master_port)
    yield "reserved_ports", _text(topo.reserved_ports)
    layout = topo.processes
    yield "processes.world_size", _text(layout.world_size if layout else None)
    yield "processes.per_node", _text(layout.tasks_per_node if layout else None)


def _label_facts(policy: ImagePolicy) -> Iterator[Fact]:
    """Every label the policy reads, validated (its default when unset), in field order;
    the port labels in FRAMEWORKS order at the place of the ``ports`` field. The frameworks
    are a set (the variables do not depend on their order): written in FRAMEWORKS order."""
    ported = {line.name: line.port_label for line in FRAMEWORKS if line.port_label}
    for field, info in type(policy).model_fields.items():
        if field == "ports":
            for framework, port in policy.ports.items():
                yield f"label.{ported[framework]}", str(port)
        elif field == "frameworks":
            chosen = set(policy.frameworks)
            yield "label.frameworks", _text(
                tuple(line.name for line in FRAMEWORKS if line.name in chosen))
        elif info.alias and info.alias.startswith(PREFIX):
            yield f"label.{info.alias[len(PREFIX):]}", _text(getattr(policy, field))


def _variable_facts(var: DerivedVariable, own_master: str | None = None) -> list[Fact]:
    """A job-wide variable's fact; a NODE one's job-wide part (a JSON document's keys but
    its ``task``); nothing for any other, nor for what a node decides alone
    (``node_decided``: its interfaces, its GPU count, which may differ from node to node).
    ``own_master`` (:func:`_own_master`) replaces a loopback host of a ``HOST`` or
    ``ADDRESS`` value."""
    if var.node_decided:
        return []
    if var.scope in _JOB_WIDE:
        # JOB and FOLLOWS values are kept only when they equal the derived one: the derived
        # one is the canonical spelling. A SHARED user-set value wins: it is the fact.
        value = var.derived if var.kept and var.scope != SHARED and var.derived else var.value
        text = canonical(var.compare, value)
        if own_master is not None and var.compare in (HOST, ADDRESS):
            text = _master_for_loopback(var.compare, text, own_master)
        return [(f"var.{var.name}", text)]
    if var.scope == NODE and var.compare == JSON:
        try:
            document = json.loads(var.value)
        except (ValueError, RecursionError):
            return []
        if isinstance(document, dict):
            return [(f"var.{var.name}.{key}",
                     json.dumps(document[key], sort_keys=True, separators=(",", ":")))
                    for key in sorted(document) if key != "task"]
    return []


def _master_for_loopback(compare: str, text: str, master: str) -> str:
    """``text`` (canonical) with a loopback host written as ``master``."""
    if compare == HOST:
        return master if is_loopback(text) else text
    host, colon, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if colon and is_loopback(host):
        return f"{master}:{port}"
    return text


def canonical(compare: str, value: str) -> str:
    """``value`` as the comparison reads it (:func:`derive_env.merge.same_value`): a
    decimal integer without blanks or leading zeros, a host (of ``host:port``) in lower
    case with its port as an integer; anything else as it is."""
    stripped = value.strip()
    if compare == INTEGER:
        return str(int(stripped)) if stripped.isascii() and stripped.isdigit() else value
    if compare == HOST:
        return stripped.lower()
    if compare == ADDRESS:
        host, colon, port = stripped.rpartition(":")
        if colon and port.isascii() and port.isdigit():
            return f"{host.lower()}:{int(port)}"
        return stripped.lower()
    return value


def escape(value: str) -> str:
    """A value on one line: ``\\\\``, ``\\n``, ``\\t``, other characters that are not
    printable as ``\\xNN`` (``\\uNNNN``, ``\\UNNNNNNNN`` above 0xff: surrogate escapes of
    undecodable bytes too). Injective, so two values that differ print differently."""
    if value.isprintable() and "\\" not in value:
        return value
    out = []
    for char in value:
        if char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char.isprintable():
            out.append(char)
        else:
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100
                       else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


def facts_text(facts: list[Fact]) -> str:
    """``--format digest-facts``: one ``name: value`` line per fact, values escaped."""
    return "".join(f"{name}: {escape(value)}\n" for name, value in facts)


def digest_of(facts: list[Fact]) -> str:
    """The digest: the first :data:`DIGEST_HEX` hex digits of the SHA-256 of
    :func:`facts_text` (UTF-8)."""
    return hashlib.sha256(facts_text(facts).encode("utf-8")).hexdigest()[:DIGEST_HEX]


def render_digest(topology: ClusterTopology, derivation: Derivation | None, fmt: str) -> str:
    """``--format digest`` (``<digest> <node_rank> <host>``, one line; the node rank is the
    one exported as ``NODE_RANK``; ``-`` for a node rank or host no source states) or
    ``--format digest-facts``.

    :raises ValueError: ``fmt`` is not one of
        :data:`derive_env.render.DIGEST_FORMATS`.
    """
    facts = facts_of(topology, derivation)
    if fmt == "digest-facts":
        return facts_text(facts)
    if fmt != "digest":
        raise ValueError(f"unknown digest format {fmt!r}")
    me = topology.this_node
    return f"{digest_of(facts)} {_node_rank_text(topology)} {me.host if me is not None else '-'}\n"


def _node_rank_text(topology: ClusterTopology) -> str:
    """The node rank the frameworks export as ``NODE_RANK`` (:func:`node_rank_of`: the
    topology's, or the rank of a launcher's one task per node, as a Flux job's
    ``FLUX_TASK_RANK`` with ``FLUX_JOB_SIZE`` = ``FLUX_JOB_NNODES``), ``-`` when none."""
    try:
        return str(node_rank_of(topology)[0])
    except TopologyError:
        return "-"


def explain_lines(derivation: Derivation) -> list[str]:
    """``--explain``'s digest: one line naming it and how to list its facts (the facts
    themselves are ``--format digest-facts``: a 2-node job has some 25 of them)."""
    digest = digest_of(facts_of(derivation.topology, derivation))
    return ["", f"job digest {digest} (every node must show the same; its facts: "
                "--dry-run --format digest-facts in place of --explain)"]
