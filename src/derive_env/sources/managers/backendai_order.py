"""Backend.AI's canonical node order (docs/behaviour.md section 5), for several nodes.

Role ``main`` first, then REPLICAS' roles in its order, each role's hosts ``{role}1..{role}
{count}`` (Backend.AI's ``sokovan/scheduling_controller/preparers/resources/
expand_kernel_groups_rule.py``); without REPLICAS, ``{role}{index}`` parsed from the HOSTS names
(:data:`derive_env.hosts.ROLE_INDEX`). Imported by sources/managers/backendai.py for a
session of several nodes only; it imports no source module.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from itertools import chain, repeat

from derive_env.errors import TopologyError, describe, listing, shorten
from derive_env.hosts import ROLE_INDEX, repeated_host
from derive_env.topology import Node, nodes_of

#: The variables this order is read from, and Backend.AI's default role.
HOSTS = "BACKENDAI_CLUSTER_HOSTS"
REPLICAS = "BACKENDAI_CLUSTER_REPLICAS"
MAIN = "main"

ORDER_FROM_REPLICAS = (
    f"from {REPLICAS}: role main first, then the roles in REPLICAS order, each role's hosts "
    "{role}1 to {role}{count}"
)
ORDER_FROM_HOSTS = (
    f"no {REPLICAS}: roles and indices parsed from the {HOSTS} names {{role}}{{index}}; role "
    "main first, then roles by name, each by numeric index"
)


def role_order(roles: Sequence[str]) -> list[str]:
    """``main`` first, then ``roles`` (REPLICAS', sorted by name: ``aux:1,main:1``) as given."""
    return sorted(roles, key=lambda r: r != MAIN)  # stable: keeps the given order after main


def nodes_from_replicas(
    replicas: Sequence[tuple[str, int]], hosts: Sequence[str], raw_hosts: str, raw_replicas: str
) -> tuple[Node, ...]:
    """The nodes ``f"{role}{i}"``, ``i`` in ``1..count``, roles in :func:`role_order`, each
    spelled as ``hosts`` (the checked HOSTS entries) spells it, compared as DNS does.

    :raises TopologyError: two roles rebuild the same name (``a:11,a1:1``), naming REPLICAS;
        HOSTS is not exactly the rebuilt set, naming both and the missing / extra names.
    """
    listed = set(hosts)
    counts = dict(replicas)
    roles = role_order(list(counts))
    names = [f"{role}{index}" for role in roles for index in range(1, counts[role] + 1)]
    if listed.issuperset(names) and repeated_host(names) is None:
        # HOSTS spells every rebuilt name as given, no two collide (the caller counted them).
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
            f"({{role}}1 to {{role}}{{count}} for each role); missing: {listing(missing)}; "
            f"not from {REPLICAS}: {listing(extra)}",
        ))
    return tuple(nodes)


def nodes_from_host_names(hosts: Sequence[str], raw_hosts: str) -> tuple[Node, ...]:
    """Without REPLICAS: ``{role}{index}`` parsed from each HOSTS name, a role not ending in
    a digit (``sub12``: ``sub`` #12, the same in every container); ``main`` first, then roles
    by name, each by numeric index.

    :raises TopologyError: naming HOSTS: an entry is not ``{role}{index}``, has index 0, or
        two have the same role and index (``sub01``, ``sub1``).
    """
    parsed: list[tuple[str, str, int]] = []
    match = re.compile(ROLE_INDEX).match  # inlined: this loop runs once per node
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
    seen: dict[tuple[str, int], str] = {}
    for entry, role, index in parsed:
        first = seen.setdefault((role, index), entry)
        if first != entry:  # HOSTS' entries are unique: a second entry of the pair
            raise TopologyError(describe(
                HOSTS, raw_hosts,
                f"one host per role and index; {first!r} and {entry!r} are both {role} #{index}",
            ))
    position = {role: i for i, role in enumerate(role_order(sorted({r for _, r, _ in parsed})))}
    ordered = sorted([(position[role], index, entry, role) for entry, role, index in parsed])
    return tuple(Node(entry, role, index) for _, index, entry, role in ordered)


def role_counts(nodes: Sequence[Node]) -> tuple[tuple[str, int], ...]:
    """Role counts of parsed nodes (the fallback without REPLICAS), in node order."""
    return tuple(Counter(node.role or "" for node in nodes).items())  # in first-seen order
