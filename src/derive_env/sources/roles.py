"""The one reader of a manager's variables by role, and the kit of the manager modules.

A table line's ``roles`` (a dict literal: nothing imported to see or refuse a manager):
``num_nodes`` (>= 1), ``node_rank`` (>= 0, below ``num_nodes``, else below ``world_size``);
the process layer, all four or none: ``world_size``, ``local_world_size`` (>= 1, the local one
at most the world size), ``rank``, ``local_rank`` (>= 0, below their size); ``hosts``:
``(variable, form)``, the hosts in node-rank order (``ips``, ``comma``; sources/lists.py),
their number the node count, the first the master; ``job``: a job id every process shares;
``same``: ``((variable, role), ...)``, the fact in the manager's other vocabulary, checked
when set; ``note``: for ``--explain``; ``why``: the manager's rule, ending every message on
two of its variables. :func:`read` checks them and reports each fact with its variable; a
module under ``sources/managers/`` uses :func:`numbers`, :func:`companions`, :func:`parsed`,
:func:`checked_master`, :func:`derive_env.validation.variable_index`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from derive_env.errors import TopologyError, describe
from derive_env.sources.lists import NODE_COUNT
from derive_env.sources.report import PROCESS_FACTS, Processes, Report, parsed
from derive_env.topology import nodes_of
from derive_env.validation import parse_int, variable_int

if TYPE_CHECKING:
    from derive_env.sources import Source


#: Each integer role: (its minimum, what it is, for messages), in the order they are read.
INTEGERS = {"world_size": (1, "world size"), "local_world_size": (1, "local world size"),
            "rank": (0, "global rank"), "local_rank": (0, "local rank"),
            "num_nodes": (1, "node count"), "node_rank": (0, "node rank")}
#: ``(role, other role, relation)``: the checks between two roles, in this order; a node
#: rank without a node count is below the world size (every node runs a process).
_RELATIONS = (("rank", "world_size", "below"), ("local_rank", "local_world_size", "below"),
              ("local_world_size", "world_size", "at most"),
              ("node_rank", "num_nodes", "below"))


def read(environ: Mapping[str, str], line: Source,
         files: Mapping[str, str | None] | None = None) -> Report:
    """What ``line.roles`` say (module docstring), each fact's variables as ``inputs``.

    :raises TopologyError: a value the rules refuse, naming both variables.
    """
    roles = line.roles
    why = roles.get("why", "")
    got = numbers(environ, roles)
    notes = companions(environ, roles, got, why)
    hosts = _hosts(environ, roles, got, why) if "hosts" in roles else ()
    inputs: dict[str, tuple[str, ...]] = {"nodes": (roles["hosts"][0],)} if hosts else {}
    processes = None
    if "rank" in got:
        processes = Processes(*(got[role] for role in PROCESS_FACTS))
        inputs["processes"] = tuple(roles[role] for role in PROCESS_FACTS)
        inputs.update((role, (roles[role],)) for role in PROCESS_FACTS)
    inputs.update((role, (roles[role],)) for role in ("num_nodes", "node_rank") if role in got)
    if hosts and "num_nodes" in got:
        del got["num_nodes"]  # the list states it
    job = environ.get(roles["job"], "").strip() if "job" in roles else ""
    if job:
        inputs["ports"] = (roles["job"],)
    if "num_nodes" in got and "node_rank" in got:
        notes = (f"node {got['node_rank']} of {got['num_nodes']} ({roles['node_rank']}, "
                 f"{roles['num_nodes']})" + (f"; {roles['note']}" if "note" in roles else ""),
                 *notes)
    return Report(
        source=line.name, title=line.title, nodes=nodes_of(hosts) if hosts else (),
        num_nodes=got.get("num_nodes"),
        node_rank=got.get("node_rank"), processes=processes,
        job=(line.name, job, "") if job else None, session_id=job or None,
        inputs=inputs, notes=notes)


def numbers(environ: Mapping[str, str], roles: Mapping[str, object], fix_ends: bool = False,
            counted: bool = True) -> dict[str, int]:
    """The integer roles of ``roles`` (:data:`INTEGERS`, :data:`_RELATIONS`) by role: the
    first half of :func:`read`. ``fix_ends``: a bad integer's message ends with ``; why``;
    ``counted``: ``num_nodes`` at most lists.MAX_COUNTED_NODES (nodes built from the count).

    :raises TopologyError: as :func:`read`, ending with ``why``.
    """
    why = roles.get("why", "")
    bound = (NODE_COUNT[0], NODE_COUNT[1] + _ending(why, "; ")) if counted else None
    got = {role: variable_int(environ, roles[role], minimum,
                              _ending(why, "; ") if fix_ends else f" (the {what})",
                              bound if role == "num_nodes" else None)
           for role, (minimum, what) in INTEGERS.items() if role in roles}
    for low, high, relation in _RELATIONS:
        if low in got and (high in got or (low == "node_rank" and "world_size" in got)):
            high = high if high in got else "world_size"
            if got[low] > got[high] or (relation == "below" and got[low] == got[high]):
                raise TopologyError(describe(
                    roles[low], environ[roles[low]], f"a {INTEGERS[low][1]} {relation} "
                    f"{roles[high]}={environ[roles[high]]!r}{_ending(why, ': ')}"))
    return got


def _ending(why: str, separator: str) -> str:
    """The manager's rule after ``separator``, ending a message; nothing without one."""
    return f"{separator}{why}" if why else ""


def _hosts(environ: Mapping[str, str], roles: Mapping[str, object], got: Mapping[str, int],
           why: str) -> tuple[str, ...]:
    """The ``hosts`` role's list, checked against the node count and the node rank."""
    from derive_env.sources.lists import host_list

    name, form = roles["hosts"]
    ending = _ending(why, "; ")
    try:
        hosts = host_list(environ[name], "\n" if form == "ips" else ",")
    except ValueError as exc:
        raise TopologyError(describe(name, environ[name], f"{exc}{ending}")) from None
    count = f"the {len(hosts)} hosts in {name}"
    if got.get("num_nodes", len(hosts)) != len(hosts):
        raise TopologyError(describe(roles["num_nodes"], environ[roles["num_nodes"]],
                                     f"{len(hosts)}, {count}{ending}"))
    if got.get("node_rank", 0) >= len(hosts):
        raise TopologyError(describe(roles["node_rank"], environ[roles["node_rank"]],
                                     f"a node rank below {len(hosts)}, {count}{ending}"))
    return hosts


def companions(environ: Mapping[str, str], roles: Mapping[str, object],
               got: Mapping[str, int], why: str) -> tuple[str, ...]:
    """Notes for the set companions of ``roles["same"]``, each equal to ``got[role]``;
    TopologyError: one disagrees (naming both, ending with ``why``)."""
    notes = []
    for companion, role in roles.get("same", ()):
        value = environ.get(companion)
        if not value:
            continue
        own = roles[role]
        try:
            agrees = parse_int(value, minimum=0) == got[role]
        except ValueError:
            agrees = False
        if not agrees:
            raise TopologyError(describe(
                companion, value,
                f"the same {INTEGERS[role][1]} as {own}={environ[own]!r}{_ending(why, ': ')}"))
        notes.append(f"{companion} agrees with {own}")
    return tuple(notes)



def checked_master(environ: Mapping[str, str], addr: str, port: str,
                   fix: str) -> tuple[str, int]:
    """``(environ[addr], environ[port] as a TCP port)``, a master a manager set, checked;
    TopologyError ending with ``fix``: no host name or address, or a port not 1-65535."""
    from derive_env.hosts import host_problem
    from derive_env.validation import parse_port

    host = environ[addr]
    problem = host_problem(host)
    if problem:
        raise TopologyError(describe(addr, host, f"{problem}; {fix}"))
    return host, parsed(environ, port, parse_port, f"; {fix}")
