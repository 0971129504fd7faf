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


def nodes_from_host_names(hosts: Sequence[str], raw_hosts: str
                          ) -> tuple[tuple[Node, ...], bool]:
    """Without REPLICAS: ``{role}{index}`` parsed from each HOSTS name (``sub12``: ``sub``
    #12) unless that does not number a role from 1 up (``a1,a2,a11``: ``a11`` is ``a1`` #1);
    ``main`` first, then roles by name, each by index. Only HOSTS decides: every container alike.

    :returns: the nodes, and whether the role groups are known (no other numbering fits).
    :raises TopologyError: naming HOSTS: an entry is not ``{role}{index}``, has index 0, two
        have the same role and index (``sub01``, ``sub1``), or a role's names fit no
        numbering from 1 or several (then REPLICAS must say).
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
    groups: dict[str, list[tuple[str, int]]] = {}
    for entry, role, index in parsed:
        first = seen.setdefault((role, index), entry)
        if first != entry:  # HOSTS' entries are unique: a second entry of the pair
            raise TopologyError(describe(
                HOSTS, raw_hosts,
                f"one host per role and index; {first!r} and {entry!r} are both {role} #{index}",
            ))
        groups.setdefault(role, []).append((entry, index))
    known = True
    for role, members in groups.items():
        if len(members) < 11 and max(i for _, i in members) == len(members):
            continue  # 1..n (distinct), and no name of two digits to cut otherwise
        renumbered, known_here = _renumbered(role, members, raw_hosts)
        parsed = [p for p in parsed if p[1] != role] + renumbered
        known = known and known_here
    position = {role: i for i, role in enumerate(role_order(sorted({r for _, r, _ in parsed})))}
    ordered = sorted([(position[role], index, entry, role) for entry, role, index in parsed])
    return tuple(Node(entry, role, index) for _, index, entry, role in ordered), known


def _renumbered(role: str, members: list[tuple[str, int]], raw_hosts: str
                ) -> tuple[list[tuple[str, str, int]], bool]:
    """The hosts ``members`` of the parsed ``role`` as ``(entry, role, index)`` in the one
    numbering that fits (the parsed one when it does), and whether it is the only one.
    TopologyError naming HOSTS and REPLICAS: none fits, or several and not the parsed one."""
    digits = {entry[len(role):]: entry for entry, _ in members}
    found: list[dict[str, int]] = []
    _cover(set(digits), {}, found, [_BUDGET])
    parsed_fits = max(i for _, i in members) == len(members)
    if parsed_fits or len(found) == 1:
        if parsed_fits:
            return [(entry, role, index) for entry, index in members], len(found) == 1
        return [(entry, role + suffix, int(tail)) for tail_digits, entry in digits.items()
                for suffix, tail in (_cut(tail_digits, found[0]),)], True
    raise TopologyError(describe(
        HOSTS, raw_hosts,
        "host names that number each role's hosts {role}1 to {role}{count} in exactly one "
        f"way (a role may end in digits: a11 is a #11 or a1 #1); {listing([e for e, _ in members])}"
        f" fit {'no' if not found else 'more than one'} way: set {REPLICAS} (role:count "
        "pairs, as Backend.AI sets it) so that every container computes the same node order",
    ))


#: The work :func:`_cover` may do (set elements visited) before it assumes two numberings:
#: a few milliseconds; only names built to be ambiguous reach it, and refuse alike.
_BUDGET = 200_000


def _cut(digits: str, counts: dict[str, int]) -> tuple[str, str]:
    """``digits`` as (role suffix, index) in the numbering ``counts`` ({suffix: count})."""
    return next((digits[:k], digits[k:]) for k in range(len(digits))
                if counts.get(digits[:k], 0) >= int(digits[k:]) and digits[k] != "0")


def _cover(left: set[str], counts: dict[str, int], found: list[dict[str, int]],
           budget: list[int]) -> None:
    """Every way (up to two; ``budget`` steps, then two are assumed) to cut each string of
    ``left`` into a role suffix and an index without a leading zero so that each suffix's
    indices are 1 to its count: appended to ``found`` as ``{suffix: count}``."""
    budget[0] -= len(left) + 1  # the work of a call is about its set's size
    if budget[0] < 0:
        found.extend([counts, counts][:2 - len(found)])
        return
    if not left:
        found.append(dict(counts))
        return
    least = min(left, key=lambda d: (len(d), d))  # some block of a way holds it
    for k in range(len(least)):
        suffix, tail = least[:k], least[k:]
        if tail[0] == "0" or suffix in counts:
            continue
        top = 0
        while f"{suffix}{top + 1}" in left:
            top += 1
        low = int(tail)
        if not suffix:  # X0...0 can only be cut here: the role's own count reaches it
            low = max(low, max((int(d) for d in left if d.rstrip("0") == d[:1]), default=0))
        for count in range(low, top + 1):
            block = {f"{suffix}{i}" for i in range(1, count + 1)}
            counts[suffix] = count
            _cover(left - block, counts, found, budget)
            del counts[suffix]
            if len(found) >= 2:
                return


def role_counts(nodes: Sequence[Node]) -> tuple[tuple[str, int], ...]:
    """Role counts of parsed nodes (the fallback without REPLICAS), in node order."""
    return tuple(Counter(node.role or "" for node in nodes).items())  # in first-seen order
