"""``derive-env check``, the pure part: every node (or, under ``srun``/``mpirun`` with
several tasks per node, every task) checks

* ``name``: its own name resolves to an address that is not loopback and that it holds;
* ``peers``: every peer's name resolves (a task of a launcher: the master's name only), and,
  on the master, every node resolves every name as the others do;
* ``port``: the master binds and listens on the master port for the check's duration; every
  other node (task) connects to it and is greeted by the check of the same job;
* ``iface``: gloo's and NCCL's interfaces (``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``;
  none set: the one holding the host name's address) exist, hold an address, and reach
  every peer's address directly or by the route the kernel takes for it.

The edge (:mod:`derive_env.cli.check`) reads the host, resolves names, listens and
connects; everything it decides with is here, over plain values (tests/test_preflight.py).
Rows travel between nodes as JSON objects (:func:`row_to_wire`, :func:`row_from_wire`).
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from derive_env.frameworks.context import HostFacts
from derive_env.frameworks.network import connected_subnets, own_interface, route_choice
from derive_env.hostnet import local_v4, name_problems, own_v6
from derive_env.hosts import is_ip, is_loopback
from derive_env.topology import ClusterTopology

#: The checks, in table order (docs/behaviour.md section 8, "Preflight").
CHECKS = ("name", "peers", "port", "iface")
#: The greeting's protocol name and version: a listener that does not say it is foreign.
PROTOCOL = "derive-env-check/1"
#: Rows in the master's table before only the failing ones are shown (a job of thousands).
MAX_ROWS = 64


class Cell(NamedTuple):
    """One check of one row: passed (``ok``), failed, or not checked (``ok is None``).

    :ivar text: what the table shows when it passed (an address, ``listening``, ``eth0``).
    :ivar problem: why it failed (a sentence naming the node, the name, the address).
    """

    ok: bool | None
    text: str = "-"
    problem: str | None = None


def passed(text: str) -> Cell:
    """A check that passed, shown as ``text``."""
    return Cell(True, text)


def failed(problem: str) -> Cell:
    """A check that failed, for ``problem`` (shown as ``FAIL`` and below the table)."""
    return Cell(False, "FAIL", problem)


NOT_CHECKED = Cell(None)


class Row(NamedTuple):
    """One node's (or task's) results, as it sends them to the master.

    :ivar label: its node rank (or task rank) as text; ``?`` when unknown.
    :ivar host: its host name.
    :ivar cells: check name -> :class:`Cell`, for every name of :data:`CHECKS`.
    :ivar resolved: every name of the job it resolved -> the addresses it got.
    :ivar own: the addresses it holds (for the master's comparison of resolutions).
    """

    label: str
    host: str
    cells: Mapping[str, Cell]
    resolved: Mapping[str, tuple[str, ...]] = {}
    own: tuple[str, ...] = ()

    @property
    def failures(self) -> list[str]:
        """The checks this row failed, in table order."""
        return [name for name in CHECKS if self.cells.get(name, NOT_CHECKED).ok is False]


def job_key(source: str, session: str, master: tuple[str, int], count: int | None) -> str:
    """What the master's greeting and every row carry, so that a check of another job (or a
    session with another master) on the same port is told apart: 16 hex digits of SHA-256 over
    the source, the job or session id, the master ``(address, port)``, the node (task) count."""
    text = "\0".join((source, session, master[0].lower(), str(master[1]), str(count)))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _shown(addresses: Sequence[str]) -> str:
    return ", ".join(addresses) or "nothing"


class Plan(NamedTuple):
    """Who this check is and what it checks, from the derivation alone.

    :ivar per_task: the job is a launcher's tasks, several on a node (``srun
        --ntasks-per-node=2``): rows are tasks, each checks its own node and the master's
        name and port only; else rows are nodes.
    :ivar label: this row's node rank (or task rank) as text, ``?`` when unknown.
    :ivar host: this node's name (the topology's, else the host name).
    :ivar master: / :ivar port: ``MASTER_ADDR``, ``MASTER_PORT`` as the job gets them.
    :ivar peers: the names this row must resolve; :ivar names: every name it resolves.
    :ivar expected: every row of the job, ``(label, host)``, in order (the master's table).
    :ivar leader: this row listens on the master port: the task of rank 0, or the node the
        master address names (decided with the resolution: :meth:`is_master`).
    :ivar key: :func:`job_key` of the job."""

    per_task: bool
    label: str
    host: str
    master: str
    port: int
    peers: tuple[str, ...]
    names: tuple[str, ...]
    expected: tuple[tuple[str, str], ...]
    leader: bool | None
    key: str

    @property
    def what(self) -> str:
        """What a row is: ``nodes`` or ``tasks``."""
        return "tasks" if self.per_task else "nodes"

    def is_master(self, own: Sequence[str], master_addresses: Sequence[str]) -> bool:
        """This row listens: :attr:`leader` when decided, else this node holds an address
        the master address resolves to (not loopback, unless the job has one node)."""
        if self.leader is not None:
            return self.leader
        single = len(self.expected) == 1
        return any(a in own and (single or not ipaddress.ip_address(a).is_loopback)
                   for a in master_addresses)


def plan_of(topology: ClusterTopology, environ: Mapping[str, str], hostname: str) -> Plan:
    """The :class:`Plan` of this row.

    :param topology: the derivation's topology.
    :param environ: the environment the job gets (the input with the derived variables):
        ``MASTER_ADDR`` and ``MASTER_PORT`` are read from it.
    :param hostname: this node's host name (``gethostname()``).
    """
    master, port = environ["MASTER_ADDR"], int(environ["MASTER_PORT"])
    own = topology.master_addr  # a loopback MASTER_ADDR on node rank 0 is this node (a
    if topology.node_rank == 0 and is_loopback(master) and own and not is_loopback(own):
        master = own  # PyTorchJob's master pod): named as the workers name it, one key
    me = topology.this_node
    host = me.host if me is not None else (hostname or "?")
    if topology.source.startswith("kubeflow-") and is_loopback(master) and host != "?":
        # The master pod's is localhost, the others' its Service, named as the pod
        # (sources/managers/kubeflow.py): it is the master, under the others' name.
        master = host
    nodes = [n.host for n in topology.nodes]
    processes = topology.processes
    # A launcher's tasks without a host list (mpirun over SSH): tasks too, even one per node.
    per_task = processes is not None and (topology.per_process or not nodes)
    if per_task and processes is not None:
        label, count = str(processes.rank), processes.world_size
        expected = tuple((str(r), host if r == processes.rank else f"rank {r}")
                         for r in range(count))
        peers = () if master.lower() == host.lower() else (master,)
        leader: bool | None = processes.rank == 0
    else:
        rank = topology.node_rank
        label = "?" if rank is None else str(rank)
        expected = tuple((str(r), n) for r, n in enumerate(nodes)) or tuple(
            (str(r), host if str(r) == label else f"node {r}")
            for r in range(topology.num_nodes or 1))
        count = len(expected)
        peers = tuple(n for n in dict.fromkeys([*nodes, master])
                      if n.lower() != host.lower()) if topology.multi_node else ()
        leader = None if master.lower() != host.lower() else True
    names = [n for n in dict.fromkeys([host, hostname, master, *peers]) if n and not is_ip(n)]
    session = topology.session_id or "/".join(topology.job or ())
    key = job_key(topology.source, session, (master, port), count)
    return Plan(per_task, label, host, master, port, tuple(peers), tuple(names),
                expected, leader, key)


# ------------------------------------------------------------------------------ the checks


def check_name(host: str, addresses: Sequence[str], own: Sequence[str],
               single: bool = False, node: str = "") -> Cell:
    """``name``: this node's ``host`` resolves (``addresses``) to a non-loopback address it
    holds (``own``); gloo binds the address its host name resolves to (frameworks/network.py).
    A job of one node (``single``) may use loopback. ``node``: the job's name of this node
    when ``host`` is another, its kernel's (``n2``'s own host name ``vm``)."""
    who, node = (f"{node}'s own host name {host}", node) if node else (host, host)
    if not addresses:
        return failed(f"{who} does not resolve on {node}")
    usable = [a for a in addresses if single or not ipaddress.ip_address(a).is_loopback]
    if not usable:
        return failed(f"{who} resolves only to loopback ({_shown(addresses)}) on {node}: gloo "
                      "would advertise it to the other nodes, which cannot reach it")
    held = [a for a in usable if a in own]
    if not held:
        return failed(f"{who} resolves to {_shown(usable)}, not an address of {node} "
                      f"({_shown([a for a in own if not ipaddress.ip_address(a).is_loopback])})")
    return passed(held[0])


def check_peers(host: str, peers: Sequence[str], resolved: Mapping[str, Sequence[str]],
                subnets: Sequence | None = None) -> Cell:
    """``peers``: every name in ``peers`` resolved on ``host`` to an address that is not
    loopback (a loopback address would reach ``host`` itself); with ``subnets`` (a Backend.AI
    session's), ``host`` and ``peers`` each checked by :func:`~derive_env.hostnet.name_problems`."""
    problems = [] if subnets is None else name_problems(host, [host, *peers], resolved, subnets)
    for peer in peers:
        addresses = list(resolved.get(peer, ()))
        if not addresses:
            problems.append(f"{peer} does not resolve on {host}")
        elif all(ipaddress.ip_address(a).is_loopback for a in addresses):
            problems.append(f"{host} resolves {peer} to loopback ({_shown(addresses)})")
    if problems:
        return failed("; ".join(problems))
    return passed("ok") if peers else NOT_CHECKED


def own_addresses(facts: HostFacts) -> dict[str, str]:
    """Every address this node holds -> the interface holding it (``lo`` for loopback)."""
    own: dict[str, str] = {}
    for address in sorted(local_v4(facts.local_v4)):
        text = str(address)
        own[text] = "lo" if address.is_loopback else (own_interface(text, facts) or "?")
    for address_v6, iface in own_v6(facts.addresses_v6).items():
        own[str(address_v6)] = iface
    return own


def wanted_interfaces(variable: str, value: str, interfaces: Sequence[str]) -> list[str] | None:
    """The interfaces ``variable=value`` selects, as gloo and NCCL read it; ``None`` for an
    NCCL exclusion list (``^docker``), which selects no interface by name.

    gloo: a comma list of exact names. NCCL: a comma list of name prefixes, or of exact
    names after ``=`` (NCCL User Guide, ``NCCL_SOCKET_IFNAME``).
    """
    if variable.startswith("NCCL") and value.startswith("^"):
        return None
    exact = variable.startswith("GLOO") or value.startswith("=")
    names = [n.strip() for n in value.lstrip("=").split(",") if n.strip()]
    if exact:
        return names
    return [i for i in interfaces if any(i.startswith(n) for n in names)] or names


def check_iface(settings: Mapping[str, str], facts: HostFacts,
                me: tuple[str, Sequence[str]], peers: Sequence[tuple[str, str]]) -> Cell:
    """``iface``: the interfaces gloo and NCCL use exist, hold an address, and reach every
    peer address in ``peers`` (``(name, address)``) through a subnet of theirs or the route
    the kernel takes.

    :param settings: ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` as the job gets them
        (empty ones left out); none: the interface holding one of this node's addresses, the
        one gloo binds.
    :param me: this node ``(host, addresses)``: its name and what that name resolves to.
    """
    host, host_addresses = me
    own = own_addresses(facts)
    chosen: list[tuple[str, list[str]]] = []  # (what selected them, interfaces)
    for variable, value in settings.items():
        names = wanted_interfaces(variable, value, facts.interfaces)
        if names is None:
            continue
        missing = [n for n in names if n not in facts.interfaces]
        if missing and (variable.startswith("GLOO") or len(missing) == len(names)):
            return failed(f"{variable}={value}: no interface {', '.join(missing)} on {host} "
                          f"({', '.join(facts.interfaces) or 'none'})")
        chosen.append((f"{variable}={value}", [n for n in names if n in facts.interfaces]))
    if not settings:
        held = [own[a] for a in host_addresses if own.get(a, "lo") != "lo"]
        if not held:
            return NOT_CHECKED  # the name check says why
        chosen.append((f"{held[0]}, holding {host}'s address (no GLOO_SOCKET_IFNAME)", held[:1]))
    if not chosen:
        return NOT_CHECKED
    for choice in chosen:
        problem = _unreachable(choice, facts, host, peers)
        if problem:
            return failed(problem)
    return passed(",".join(dict.fromkeys(n for _, names in chosen for n in names)))


def _unreachable(choice: tuple[str, Sequence[str]], facts: HostFacts, host: str,
                 peers: Sequence[tuple[str, str]]) -> str | None:
    """Why none of the interfaces ``choice`` names (``(what selected them, names)``) can
    carry the job's traffic, or ``None`` when one can."""
    what, names = choice
    own = own_addresses(facts)
    subnets = connected_subnets(facts)
    reasons = []
    for name in names:
        held = [a for a, i in own.items() if i == name]
        if not held:
            reasons.append(f"{name} holds no address on {host}")
            continue
        for peer, address in peers:
            ip = ipaddress.ip_address(address)
            if any(ip in net for net in subnets.get(name, [])):
                continue
            route, _ties = route_choice(address, facts)
            if route != name:
                shown = ", ".join(map(str, subnets.get(name, []))) or _shown(held)
                via = f"the kernel routes it through {route}" if route else "no route to it"
                reasons.append(f"{name} ({shown}) does not reach {peer} ({address}) on "
                               f"{host}: {via}")
                break
        else:
            return None
    return f"{what}: " + "; ".join(reasons) if reasons else None


# ---------------------------------------------------------------------- the master's view


def compare_resolutions(rows: Sequence[Row]) -> dict[str, list[str]]:
    """Where the rows disagree on a name: host -> problems of that row.

    For every name some row resolved, the rows are grouped by the addresses they got. With
    more than one group, the right one is the group that got an address the named node
    holds (its row's ``own``), else the largest; every row of another group is named:
    ``sub1 resolves sub2 to 198.18.0.99, the others to 198.18.0.12``. Without a right one
    (a tie, and no address of the named node known), every row is named.
    """
    problems: dict[str, list[str]] = {}
    own = {row.host.lower(): set(row.own) for row in rows}
    names = list(dict.fromkeys(name for row in rows for name in row.resolved))
    for name in names:
        groups: dict[tuple[str, ...], list[Row]] = {}
        for row in rows:
            if name in row.resolved:
                groups.setdefault(tuple(sorted(row.resolved[name])), []).append(row)
        if len(groups) < 2:
            continue
        held = own.get(name.lower(), set())
        right = [g for g in groups if held & set(g)]
        if len(right) != 1:
            sizes = sorted((len(v) for v in groups.values()), reverse=True)
            right = [g for g in groups if len(groups[g]) == sizes[0]] if sizes[0] > sizes[1] else []
        for addresses, members in groups.items():
            if right and addresses == right[0]:
                continue
            others = (f"the others to {_shown(right[0])}" if right else ", ".join(
                f"{m.host} to {_shown(a)}" for a, ms in groups.items() if a != addresses
                for m in ms))
            for member in members:
                problems.setdefault(member.host, []).append(
                    f"{member.host} resolves {name} to {_shown(addresses)}, {others}")
    return problems


def judge(rows: Sequence[Row], expected: Sequence[tuple[str, str]]) -> list[Row]:
    """The master's rows: the ``expected`` ``(label, host)`` in order, each with the row it
    received (a missing one: ``port`` failed, "did not report"), the disagreements of
    :func:`compare_resolutions` added to ``peers``."""
    by_host = {row.host.lower(): row for row in rows}
    by_label = {row.label: row for row in rows}
    disagree = compare_resolutions(rows)
    out = []
    for label, host in expected:
        row = by_label.get(label) if label != "?" else None
        row = row or by_host.get(host.lower())
        if row is None:
            out.append(Row(label, host, {"port": failed(
                f"{host} did not report to the master (not started, or it cannot connect)")}))
            continue
        if row.host in disagree:
            old = row.cells.get("peers", NOT_CHECKED)
            problem = "; ".join(([old.problem] if old.problem else []) + disagree[row.host])
            row = row._replace(cells={**row.cells, "peers": failed(problem)})
        out.append(row)
    return out


# ------------------------------------------------------------------------------ the output


def table(rows: Sequence[Row], rank_title: str = "node") -> str:
    """The rows as a table (one column per check, ``FAIL`` where one failed), then one line
    per problem, ``HOST CHECK: problem``. More than :data:`MAX_ROWS` rows: the failing ones
    only, and how many passed."""
    shown = list(rows)
    if len(shown) > MAX_ROWS:
        shown = [r for r in rows if r.failures]
    header = [rank_title, "host", *CHECKS]
    lines = [header] + [[r.label, r.host, *(r.cells.get(c, NOT_CHECKED).text for c in CHECKS)]
                        for r in shown]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
           for line in lines]
    if len(shown) < len(rows):
        out.append(f"({len(rows) - len(shown)} more rows: every check passed)")
    for row in shown:
        for check in row.failures:
            out.append(f"{row.host} {check}: {row.cells[check].problem}")
    return "\n".join(out) + "\n"


def verdict(rows: Sequence[Row], what: str = "nodes") -> tuple[bool, str]:
    """``(True, "all checks pass on 3 nodes")``, or ``(False, "FAILED: sub1 (peers), ...")``
    naming every failing row and its checks."""
    bad = [f"{r.host} ({', '.join(r.failures)})" for r in rows if r.failures]
    if bad:
        return False, "FAILED: " + ", ".join(bad)
    return True, f"all checks pass on {len(rows)} {what[:-1] if len(rows) == 1 else what}"


def title(count: int, what: str, master: str, timeout: float) -> str:
    """The first line: ``derive-env check: 3 nodes, master main1:29500, within 15 s``
    (``master``: its ``host:port``, :func:`derive_env.hosts.host_port`)."""
    what = what[:-1] if count == 1 else what
    return f"derive-env check: {count} {what}, master {master}, within {timeout:g} s\n"


# ---------------------------------------------------------------------------- on the wire


def row_to_wire(row: Row) -> dict[str, object]:
    """A row as a JSON-able object (what a node sends the master)."""
    return {"label": row.label, "host": row.host,
            "cells": {k: [c.ok, c.text, c.problem] for k, c in row.cells.items()},
            "resolved": {k: list(v) for k, v in row.resolved.items()}, "own": list(row.own)}


def row_from_wire(data: object) -> Row | None:
    """A row received from a node; ``None`` for anything that is not one."""
    try:
        cells = {}
        for name in CHECKS:
            ok, text, problem = data["cells"].get(name, [None, "-", None])  # type: ignore[index]
            _require(ok in (True, False, None) and isinstance(text, str)
                     and (problem is None or isinstance(problem, str)))
            cells[name] = Cell(ok, text, problem)
        resolved = {str(k): tuple(str(a) for a in v)
                    for k, v in data["resolved"].items()}  # type: ignore[index]
        label, host = data["label"], data["host"]  # type: ignore[index]
        _require(isinstance(label, str) and isinstance(host, str))
        return Row(label, host, cells, resolved,
                   tuple(str(a) for a in data["own"]))  # type: ignore[index]
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _require(condition: bool) -> None:
    if not condition:
        raise ValueError("not a row")
