"""Backend.AI: ``BACKENDAI_CLUSTER_*`` variables -> :class:`ClusterTopology`.

Rules (contract section 5), from lablup/backend.ai's own code (paths in that repository):

* Who sets what: the scheduler's launcher
  (``src/ai/backend/manager/sokovan/scheduler/launcher/launcher.py``) gives every container
  the session's user variables, then ``BACKENDAI_CLUSTER_SIZE``, ``_REPLICAS`` (``role:count``
  pairs, sorted by role name), ``_HOSTS`` and, per container, ``_ROLE``, ``_IDX``,
  ``_LOCAL_RANK``, ``_HOST``.
* Host names are always ``f"{role}{idx}"``, ``idx`` 1-based within the role, and roles are
  free-form strings of up to 16 characters (``models/kernel/row.py``) that may end in digits
  or hyphens (``a100`` -> ``a1001``, ``gpu-2`` -> ``gpu-21``):
  ``sokovan/scheduling_controller/preparers/resources/expand_kernel_groups_rule.py``. So
  the names are REBUILT from REPLICAS, never split back into role and index.
* Canonical node order, identical in every container whatever order ``_HOSTS`` has (it comes
  from a query ordered by the index within a role only,
  ``repositories/scheduler/db_source/db_source.py``, so ``sub1,main1`` happens): role ``main``
  first, then the other roles in REPLICAS order, each role's hosts ``{role}1..{role}{count}``.
  HOSTS must be exactly those names (compared case-insensitively, as DNS does). Without
  REPLICAS: ``{role}{index}`` parsed from the HOSTS names (the role taken as not ending in a
  digit), ``main`` first, then roles by name, numeric index.
* Node rank = the own host's position in that order; master = node rank 0, never "the first
  entry of HOSTS".
* ``_LOCAL_RANK`` is the position over the role groups IN THE ORDER THE SESSION'S REQUEST
  LISTED THEM (expand_kernel_groups_rule.py), which a container cannot see (a cluster
  template may list workers before main): ``offset(own role) + IDX - 1``. It never decides
  the node rank. A value no order of the role groups can give is an error naming this
  container; a possible value that differs from the node rank is a warning and an
  ``--explain`` note.
* ``BACKENDAI_DIST_MASTER_PORT`` is NOT set by Backend.AI: a session variable a user may set
  to choose the master port (read by an unmerged Backend.AI proposal, PR #10726); honoured.

Empty variables count as unset, as in torch's ``env://`` rendezvous.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from itertools import chain, repeat
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from derive_env.errors import TopologyError, describe, shorten
from derive_env.hosts import ROLE_NAME, check_hosts, host_problem, repeated_host
from derive_env.sources.report import Report
from derive_env.topology import ClusterTopology, Node, nodes_of
from derive_env.validation import first_error, parse_int, parse_port

SIZE = "BACKENDAI_CLUSTER_SIZE"
HOSTS = "BACKENDAI_CLUSTER_HOSTS"
HOST = "BACKENDAI_CLUSTER_HOST"
ROLE = "BACKENDAI_CLUSTER_ROLE"
IDX = "BACKENDAI_CLUSTER_IDX"
LOCAL_RANK = "BACKENDAI_CLUSTER_LOCAL_RANK"
REPLICAS = "BACKENDAI_CLUSTER_REPLICAS"
SESSION_ID = "BACKENDAI_SESSION_ID"
GPU_COUNT = "GPU_COUNT"
N_GPUS = "N_GPUS"
#: Not a Backend.AI variable: a session variable a user may set (see the module docstring).
MASTER_PORT = "BACKENDAI_DIST_MASTER_PORT"
#: Backend.AI's default role (``DEFAULT_ROLE``), the one its default session starts with.
MAIN = "main"

_CLUSTER_PREFIX = "BACKENDAI_CLUSTER_"
_NAMES = (SIZE, HOSTS, HOST, ROLE, IDX, LOCAL_RANK, REPLICAS, SESSION_ID, GPU_COUNT, N_GPUS,
          MASTER_PORT)
#: Fallback without REPLICAS: ``{role}{index}``, the role taken as not ending in a digit.
_ROLE_INDEX = re.compile(r"(?P<role>[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z-])?)(?P<index>[0-9]+)\Z")
#: A role: see :data:`derive_env.hosts.ROLE_NAME` (it may end in digits: ``a100``).
_ROLE = ROLE_NAME
_ROLE_EXPECTED = (
    "a role name such as main or sub (letters, digits and '-', with a letter, not starting "
    "with '-')"
)
#: Error messages list at most this many host names or values.
_SHOWN = 8

ORDER_FROM_REPLICAS = (
    f"from {REPLICAS}: role main first, then the roles in REPLICAS order, each role's hosts "
    "{role}1 to {role}{count}"
)
ORDER_FROM_HOSTS = (
    f"no {REPLICAS}: roles and indices parsed from the {HOSTS} names {{role}}{{index}}; role "
    "main first, then roles by name, each by numeric index"
)


def detect(environ: Mapping[str, str]) -> bool:
    """True when any variable this source reads is set (non-empty).

    GPU_COUNT / N_GPUS and BACKENDAI_DIST_MASTER_PORT count too: a container with them but
    no ``BACKENDAI_CLUSTER_*`` is a single-container session that still has them.
    """
    return any(environ.get(name) for name in _NAMES) or any(
        k.startswith(_CLUSTER_PREFIX) and v for k, v in environ.items()
    )


def _listing(items: Sequence[object], limit: int = _SHOWN) -> str:
    """``a, b, c`` for a message; past ``limit`` items ``a, b, ..., (N in all)``."""
    shown = ", ".join(str(item) for item in items[:limit])
    return shown if len(items) <= limit else f"{shown}, ... ({len(items)} in all)"


def _split_hosts(value: object) -> tuple[str, ...]:
    if not isinstance(value, str):
        raise ValueError("a comma-separated list of host names")
    entries = tuple(map(str.strip, value.split(",")))
    bad = check_hosts(entries)
    if bad is not None:
        position, entry, problem = bad
        if not entry:
            raise ValueError(f"no empty entries (entry {position} is empty)")
        raise ValueError(f"every entry to be {problem} ({shorten(entry, 80)!r} is not)")
    twice = repeated_host(entries)
    if twice is not None:
        raise ValueError(f"no duplicate entries ({shorten(twice, 80)!r} appears more than once)")
    return entries


def _parse_replicas(value: object) -> tuple[tuple[str, int], ...]:
    expected = "comma-separated role:count pairs such as main:1,sub:3"
    if not isinstance(value, str):
        raise ValueError(expected)
    pairs: list[tuple[str, int]] = []
    for part in value.split(","):
        # rsplit, as Backend.AI's kernel runner parses it (src/ai/backend/kernel/intrinsic.py)
        role, sep, count = part.strip().rpartition(":")
        role, count = role.strip(), count.strip()
        if not sep or not _ROLE.match(role):
            raise ValueError(expected)
        pairs.append((role, parse_int(count, minimum=0, what=expected)))
    roles = [role for role, _ in pairs]
    if len(set(roles)) != len(roles):
        raise ValueError(expected + ", each role once")
    return tuple(pairs)


def _parse_host(value: object) -> str:
    problem = host_problem(value) if isinstance(value, str) else "a host name"
    if problem:
        raise ValueError(problem)
    return str(value).strip()


def _parse_role(value: object) -> str:
    if not isinstance(value, str) or not _ROLE.match(value):
        raise ValueError(_ROLE_EXPECTED)
    return value


def _int(minimum: int) -> BeforeValidator:
    return BeforeValidator(lambda v: parse_int(v, minimum=minimum))


class BackendAIVariables(BaseModel):
    """The Backend.AI variables of one container, each parsed on its own.

    Built with ``model_validate(environ)``; fields are keyed by the variable names, unset
    (or empty) variables are ``None``. Cross-variable rules live in :func:`topology`.
    ``master_port`` is ``BACKENDAI_DIST_MASTER_PORT``, a user's session variable (TCP port).
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    size: Annotated[int | None, _int(1)] = Field(None, alias=SIZE)
    hosts: Annotated[tuple[str, ...] | None, BeforeValidator(_split_hosts)] = Field(
        None, alias=HOSTS
    )
    host: Annotated[str | None, BeforeValidator(_parse_host)] = Field(None, alias=HOST)
    role: Annotated[str | None, BeforeValidator(_parse_role)] = Field(None, alias=ROLE)
    idx: Annotated[int | None, _int(1)] = Field(None, alias=IDX)
    local_rank: Annotated[int | None, _int(0)] = Field(None, alias=LOCAL_RANK)
    replicas: Annotated[tuple[tuple[str, int], ...] | None, BeforeValidator(_parse_replicas)] = (
        Field(None, alias=REPLICAS)
    )
    session_id: str | None = Field(None, alias=SESSION_ID)
    gpu_count: Annotated[int | None, _int(0)] = Field(None, alias=GPU_COUNT)
    n_gpus: Annotated[int | None, _int(0)] = Field(None, alias=N_GPUS)
    master_port: Annotated[int | None, BeforeValidator(parse_port)] = Field(
        None, alias=MASTER_PORT
    )


def role_order(roles: Sequence[str]) -> list[str]:
    """The canonical role order: ``main`` first, then ``roles`` in the order given.

    :param roles: REPLICAS' roles in REPLICAS order (Backend.AI sorts them by name, so
        ``main`` need not be first: ``aux:1,main:1,sub:2``).
    """
    return sorted(roles, key=lambda r: r != MAIN)  # stable: keeps the given order after main


def nodes_from_replicas(
    replicas: Sequence[tuple[str, int]], hosts: Sequence[str], raw_hosts: str, raw_replicas: str
) -> tuple[Node, ...]:
    """The canonical node order rebuilt from REPLICAS, checked against HOSTS.

    Names are ``f"{role}{i}"`` for ``i`` in ``1..count`` (Backend.AI's
    expand_kernel_groups_rule.py), roles in :func:`role_order`. One pass over the nodes, no
    per-node case folding (a role is folded once; digits have no case).

    :param replicas: the parsed ``role:count`` pairs, in REPLICAS order.
    :param hosts: the HOSTS entries (validated host names, unique case-insensitively, as
        many as the counts add up to).
    :returns: the nodes in canonical order, each spelled as HOSTS spells it.
    :raises TopologyError: two roles rebuild the same name (``a:11,a1:1`` both give
        ``a11``), naming REPLICAS; HOSTS is not exactly the rebuilt set, naming HOSTS and
        REPLICAS and the missing / extra names.
    """
    listed = set(hosts)
    counts = dict(replicas)
    roles = role_order(list(counts))
    names = [f"{role}{index}" for role in roles for index in range(1, counts[role] + 1)]
    if listed.issuperset(names) and repeated_host(names) is None:
        # HOSTS spells every rebuilt name as given and no two collide (as many hosts as
        # names, checked by the caller).
        return nodes_of(names, chain.from_iterable(repeat(r, counts[r]) for r in roles),
                        chain.from_iterable(range(1, counts[r] + 1) for r in roles))
    # Otherwise one pass per node, which spells names as HOSTS does or names the problem.
    folded: dict[str, str] | None = None  # lower -> HOSTS spelling, built only if needed
    claimed: dict[str, tuple[str, int]] = {}
    nodes: list[Node] = []
    missing: list[str] = []
    for role in roles:
        lower = role.lower()
        for index in range(1, counts[role] + 1):
            name, key = f"{role}{index}", f"{lower}{index}"
            if key in claimed:
                other_role, other_index = claimed[key]
                raise TopologyError(describe(
                    REPLICAS, raw_replicas,
                    "roles whose host names {role}{index} are all different (compared "
                    f"case-insensitively, as DNS does); {name!r} is both {other_role} "
                    f"#{other_index} and {role} #{index}",
                ))
            claimed[key] = (role, index)
            if name not in listed:  # spelled otherwise in HOSTS (SUB1), or not there
                if folded is None:
                    folded = {h.lower(): h for h in hosts}
                host = folded.get(key)
                if host is None:
                    missing.append(name)
                    host = name
                name = host
            nodes.append(Node(name, role, index))
    if missing:
        extra = [h for h in hosts if h.lower() not in claimed]
        raise TopologyError(describe(
            HOSTS, raw_hosts,
            f"exactly the host names {REPLICAS}={shorten(raw_replicas, 120)} gives "
            f"({{role}}1 to {{role}}{{count}} for each role); missing: {_listing(missing)}; "
            f"not from {REPLICAS}: {_listing(extra)}",
        ))
    return tuple(nodes)


def nodes_from_host_names(hosts: Sequence[str], raw_hosts: str) -> tuple[Node, ...]:
    """The fallback without REPLICAS: ``{role}{index}`` parsed from each HOSTS name.

    A role is taken as not ending in a digit (``sub12`` -> ``sub`` #12): every container
    parses the same HOSTS the same way, so they agree on the order even when a real role
    ended in digits. Order: ``main`` first, then roles by name, each by numeric index.

    :raises TopologyError: an entry is not ``{role}{index}``, has index 0, or two entries
        have the same role and index (``sub01``, ``sub1``); the message names HOSTS.
    """
    parsed: list[tuple[str, str, int]] = []
    match = _ROLE_INDEX.match  # inlined: this loop runs once per node of the session
    for entry in hosts:
        found = match(entry)
        if found is None:
            raise TopologyError(describe(
                HOSTS, raw_hosts,
                "every entry in Backend.AI's {role}{index} form (main1, sub2) so that every "
                f"container computes the same node order; {entry!r} is not",
            ))
        index = int(found["index"])
        if index < 1:
            raise TopologyError(describe(
                HOSTS, raw_hosts,
                f"indices from 1 (Backend.AI numbers each role's hosts from 1); {entry!r} has "
                f"{index}",
            ))
        parsed.append((entry, found["role"], index))
    if len({(role, index) for _, role, index in parsed}) != len(parsed):
        seen: dict[tuple[str, int], str] = {}
        for entry, role, index in parsed:
            if (role, index) in seen:
                raise TopologyError(describe(
                    HOSTS, raw_hosts,
                    f"one host per role and index; {seen[(role, index)]!r} and {entry!r} are "
                    f"both {role} #{index}",
                ))
            seen[(role, index)] = entry
    position = {role: i for i, role in enumerate(role_order(sorted({r for _, r, _ in parsed})))}
    ordered = sorted([(position[role], index, entry, role) for entry, role, index in parsed])
    return tuple(Node(entry, role, index) for _, index, entry, role in ordered)


def possible_local_ranks(own_index: int, other_counts: Sequence[int], size: int) -> list[int]:
    """Every ``BACKENDAI_CLUSTER_LOCAL_RANK`` some order of the role groups gives a container.

    Backend.AI (expand_kernel_groups_rule.py) numbers the containers over the role groups in
    the order the session's request listed them: ``offset + own_index - 1``, the offset being
    the summed counts of the groups listed before the own role, i.e. the sum of some subset
    of the other roles' counts (any subset: the request may list the groups in any order).

    :param own_index: this container's 1-based index within its role (``IDX``).
    :param other_counts: the counts of the OTHER roles.
    :param size: the number of containers; offsets are below it (a bit set of ``size`` bits,
        one shift per role: cheap for any session).
    :returns: the possible values, ascending.
    """
    mask = (1 << size) - 1
    offsets = 1  # bit o set: offset o is the sum of some subset
    for count in other_counts:
        offsets |= (offsets << count) & mask
    base = own_index - 1
    return [o + base for o in range(size) if offsets >> o & 1 and o + base < size]


def _check_local_rank(
    local_rank: int, raw: str, me: Node, own_index: int, node_rank: int,
    groups: Sequence[tuple[str, int]] | None, size: int,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Check LOCAL_RANK against what Backend.AI can give this container.

    :param own_index: this container's index within its role (1 for a single container).
    :param groups: every role's ``(role, count)``; empty for a single container; ``None``
        when unknown (then only the range 0..size-1 is checked).
    :returns: (warnings, notes): empty when LOCAL_RANK equals the node rank, else one
        warning and the ``--explain`` lines showing both values.
    :raises TopologyError: no order of the role groups gives ``local_rank``; the message
        names LOCAL_RANK, its value and this container (only it can make this check).
    """
    if local_rank == node_rank:
        return (), ()
    if groups is None:
        possible = list(range(size))
        why = f"a position among the {size} containers of the session"
    else:
        others = [(r, c) for r, c in groups if r != me.role]
        possible = possible_local_ranks(own_index, [c for _, c in others], size)
        shown = ", ".join(f"{r}:{c}" for r, c in others)
        why = (
            f"Backend.AI gives its index - 1 plus the summed counts of the role groups the "
            f"session's request listed before its role, in any order (other groups: "
            f"{shown or 'none'})"
        )
    if local_rank not in possible:
        raise TopologyError(describe(
            LOCAL_RANK, raw,
            f"{'one of ' if len(possible) > 1 else ''}{_listing(possible)} for container "
            f"{me.host} (role {me.role!r}, index {own_index}): {why}",
        ))
    warning = (
        f"{LOCAL_RANK}={local_rank} is not the node rank of this container ({me.host}): "
        f"{node_rank}. Backend.AI counts in the order the session's request listed the role "
        "groups, which a container cannot see; derive-env uses the canonical node order, the "
        f"same on every container. Do not use {LOCAL_RANK} as a node rank in this session"
    )
    notes = (
        f"node rank {node_rank}: the position of {me.host} in the canonical order above",
        f"{LOCAL_RANK}={local_rank}: its position in the order the request listed the role "
        "groups (not used)",
    )
    return (warning,), notes


def _check_role_idx(v: BackendAIVariables, me: Node, own: str, exact: bool) -> None:
    """ROLE and IDX must describe the own HOST.

    :param exact: the node's role and index are known exactly (rebuilt from REPLICAS);
        otherwise they were parsed from the name, and ``HOST == ROLE + IDX`` is enough.
    :raises TopologyError: naming ROLE or IDX, its value, and this container's HOST.
    """
    if not exact and v.role is not None and v.idx is not None and (
        f"{v.role}{v.idx}".lower() == own.lower()
    ):
        return  # a role ending in digits (a100 + 1 = a1001) that the name alone cannot tell
    if v.role is not None and me.role is not None and v.role.lower() != me.role.lower():
        raise TopologyError(describe(ROLE, v.role, f"{me.role!r}, the role in {HOST}={own}"))
    if v.idx is not None and me.index is not None and v.idx != me.index:
        raise TopologyError(describe(IDX, str(v.idx), f"{me.index}, the index in {HOST}={own}"))


def _single_node(v: BackendAIVariables, own: str) -> Node:
    """The one node of a single-container session: no order to agree on, any name will do."""
    if v.replicas:
        for role, count in v.replicas:
            if count and f"{role}1".lower() == own.lower():
                return Node(host=own, role=role, index=1)
    if v.role is not None and v.idx is not None and f"{v.role}{v.idx}".lower() == own.lower():
        return Node(host=own, role=v.role, index=v.idx)
    found = _ROLE_INDEX.match(own)
    if found and int(found["index"]) >= 1:
        return Node(host=own, role=found["role"], index=int(found["index"]))
    return Node(host=own)


def topology(environ: Mapping[str, str]) -> ClusterTopology:
    """Build the topology of this container from its Backend.AI variables.

    :param environ: the container's environment (only the variables above are read).
    :returns: the validated topology in canonical node order (see the module docstring);
        a single-container session when ``BACKENDAI_CLUSTER_SIZE`` is 1. Its ``order`` says
        which rule built the order; a LOCAL_RANK that differs from the node rank gives a
        ``warnings`` entry and ``notes`` for ``--explain``.
    :raises TopologyError: a variable is malformed, a required one is missing, or they
        contradict each other (HOSTS count vs SIZE, REPLICAS sums, HOSTS vs the names REPLICAS
        gives, colliding names, ROLE/IDX vs HOST, a LOCAL_RANK no role group order gives,
        GPU_COUNT vs N_GPUS). The message names the variable and its value.
    """
    return ClusterTopology(**_facts(environ))


def _facts(environ: Mapping[str, str]) -> dict:
    """The fields of :func:`topology`'s ClusterTopology, checked, without building it: the
    resolver builds the one topology of the job from :func:`read`'s report (a second one
    would check every node twice, 0.5 ms on 4096 nodes)."""
    present = {name: environ[name] for name in _NAMES if environ.get(name)}
    try:
        v = BackendAIVariables.model_validate(present)
    except ValidationError as exc:
        message = first_error(exc)
        if message.partition("=")[0] in _PER_CONTAINER:
            message += _only_here(environ)
        raise TopologyError(message) from None

    cluster_given = sorted(
        k for k, value in environ.items() if k.startswith(_CLUSTER_PREFIX) and value
    )
    if v.size is None and cluster_given:
        raise TopologyError(describe(
            SIZE, environ.get(SIZE, ""),
            f"the number of containers of the session (an integer >= 1), since "
            f"{', '.join(cluster_given)} {'is' if len(cluster_given) == 1 else 'are'} set",
        ))
    gpus = _gpu_count(v, present)
    inputs: dict[str, tuple[str, ...]] = {}
    if gpus is not None:
        inputs["gpus"] = tuple(n for n in (GPU_COUNT, N_GPUS) if n in present)
    if v.master_port is not None:
        inputs["master_port"] = (MASTER_PORT,)

    if v.hosts is None and v.size is not None and v.size > 1:
        raise TopologyError(describe(
            HOSTS, "", f"the {v.size} host names of the session ({SIZE}={v.size})"
        ))
    if v.replicas is not None and sum(c for _, c in v.replicas) != v.size:
        raise TopologyError(describe(
            REPLICAS, present[REPLICAS],
            f"counts adding up to {SIZE}={v.size}; they add up to "
            f"{sum(c for _, c in v.replicas)}",
        ))
    raw_hosts = present.get(HOSTS, "")
    if v.hosts is not None:
        if len(v.hosts) != v.size:
            raise TopologyError(describe(
                HOSTS, raw_hosts,
                f"exactly {v.size} entries ({SIZE}={v.size}), got {len(v.hosts)}",
            ))
        if v.host is None and len(v.hosts) > 1:
            raise TopologyError(describe(
                HOST, "", f"this container's host name, one of {HOSTS} ({raw_hosts})"
            ))
        own = v.host or v.hosts[0]
        if own not in v.hosts and own.lower() not in {h.lower() for h in v.hosts}:
            raise TopologyError(describe(HOST, own, f"one of {HOSTS} ({raw_hosts})"))
    else:
        own = v.host or "localhost"

    size = v.size or 1
    order: str | None = None
    counts: tuple[tuple[str, int], ...] = ()
    if v.hosts is None or len(v.hosts) == 1:
        nodes: tuple[Node, ...] = (_single_node(v, own),)
        position = 0
    else:
        if v.replicas is not None:
            nodes = nodes_from_replicas(v.replicas, v.hosts, raw_hosts, present[REPLICAS])
            counts, order = v.replicas, ORDER_FROM_REPLICAS
        else:
            nodes = nodes_from_host_names(v.hosts, raw_hosts)
            order = ORDER_FROM_HOSTS
        hosts_in_order = [n.host for n in nodes]
        if own in hosts_in_order:  # as HOSTS spells it (C-speed scan), else case-folded
            position = hosts_in_order.index(own)
        else:
            position = [h.lower() for h in hosts_in_order].index(own.lower())
    me = nodes[position]
    _check_role_idx(v, me, own, exact=v.replicas is not None)
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    if v.local_rank is not None:
        own_index, groups = me.index or 1, counts
        if len(nodes) == 1:
            own_index, groups = 1, ()
        elif v.replicas is None:
            # Without REPLICAS a role ending in digits is parsed apart (a100 #1 read as a
            # #1001, accepted above since HOST == ROLE + IDX): the groups are then unknown.
            parsed_apart = v.role is not None and v.role.lower() != (me.role or "").lower()
            groups = None if parsed_apart else _counted(nodes)
            if parsed_apart:  # name this container by its own ROLE/IDX (both given)
                me, own_index = Node(me.host, v.role, v.idx), v.idx or 1
        warnings, notes = _check_local_rank(
            v.local_rank, present[LOCAL_RANK], me, own_index, position, groups, size
        )
    topo_fields = dict(
        source="backendai", nodes=nodes, node_rank=position, gpus_per_node=gpus,
        master_port=v.master_port, session_id=v.session_id, order=order, notes=notes,
        warnings=warnings,
    )
    if len(nodes) == 1:
        if cluster_given:  # the cluster manager stated it: one node
            inputs["nodes"] = (SIZE,) + ((HOSTS,) if v.hosts else ())
        return {**topo_fields, "inputs": inputs}
    inputs["nodes"] = (HOSTS,) + ((REPLICAS,) if v.replicas else ())
    inputs["node_rank"] = (f"position of {HOST}={own} in the canonical order",)
    return {**topo_fields, "inputs": inputs}


def read(environ: Mapping[str, str], name: str = "backendai") -> Report:
    """This source's facts for the resolver (sources/resolve.py), as :func:`topology` has them.

    The node layer only when the session states its nodes (``BACKENDAI_CLUSTER_*``); a
    container with only ``GPU_COUNT`` or ``BACKENDAI_DIST_MASTER_PORT`` reports those.
    Backend.AI starts one container per node and no process: no process layer.

    :raises TopologyError: as :func:`topology`.
    """
    facts = _facts(environ)
    stated = "nodes" in facts["inputs"]
    return Report(
        source="backendai", title="a Backend.AI session",
        nodes=facts["nodes"] if stated else (),
        node_rank=facts["node_rank"] if stated else None,
        gpus=facts["gpus_per_node"], master_port=facts["master_port"],
        session_id=facts["session_id"], inputs=facts["inputs"], order=facts["order"],
        notes=facts["notes"], warnings=facts["warnings"],
    )


def _counted(nodes: Sequence[Node]) -> tuple[tuple[str, int], ...]:
    """Role counts of parsed nodes (the fallback without REPLICAS), in node order."""
    counts: dict[str, int] = {}
    for node in nodes:
        counts[node.role or ""] = counts.get(node.role or "", 0) + 1
    return tuple(counts.items())


#: Variables Backend.AI sets per container: a bad one stops this container alone.
_PER_CONTAINER = frozenset({HOST, ROLE, IDX, LOCAL_RANK, GPU_COUNT, N_GPUS})


def _only_here(environ: Mapping[str, str]) -> str:
    """The end of a message about a per-container value: name the container (contract 7)."""
    host = environ.get(HOST, "").strip()
    shown = f"container {shorten(host, 80)}" if host else "this container"
    return (f" (set for {shown} only: it stops alone while the other containers of the "
            "session may start and wait for it)")


def _gpu_count(v: BackendAIVariables, present: Mapping[str, str]) -> int | None:
    if v.gpu_count is not None and v.n_gpus is not None and v.gpu_count != v.n_gpus:
        raise TopologyError(describe(
            N_GPUS, present[N_GPUS], f"the same count as {GPU_COUNT}={present[GPU_COUNT]}"
        ) + _only_here(present))
    return v.gpu_count if v.gpu_count is not None else v.n_gpus
