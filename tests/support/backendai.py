"""Backend.AI sessions: the environment builder (:func:`make_backendai_env`, the
``backendai_env`` fixture of tests/conftest.py) and the oracle of the canonical order
(:func:`canonical_order`); the variable names, the source's door (the topology a container
derives, its error), the explain notes of a LOCAL_RANK, and a hypothesis strategy of valid
sessions with HOSTS as Backend.AI's query orders them.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence

import pytest
from hypothesis import assume
from hypothesis import strategies as st

from derive_env.errors import TopologyError
from derive_env.sources.compose import topology_from
from derive_env.topology import ClusterTopology

B = "BACKENDAI_CLUSTER_"
SIZE, HOSTS, HOST, ROLE, IDX = B + "SIZE", B + "HOSTS", B + "HOST", B + "ROLE", B + "IDX"
LOCAL_RANK, REPLICAS = B + "LOCAL_RANK", B + "REPLICAS"
THREE = ["main1", "sub1", "sub2"]


def topology(environ: dict[str, str]) -> ClusterTopology:
    """The topology a container with ``environ`` derives: the program's door, which detects
    the Backend.AI line, reads its report (``backendai.read``) and composes it."""
    return topology_from(environ)


def hosts_of(topo: ClusterTopology) -> list[str]:
    return [n.host for n in topo.nodes]


def error_of(environ: dict[str, str]) -> str:
    with pytest.raises(TopologyError) as info:
        topology(environ)
    assert info.value.exit_code == 3
    return str(info.value)


def lr_notes(local_rank: int, host: str, node_rank: int) -> tuple[str, str]:
    return (
        f"node rank {node_rank}: the position of {host} in the canonical order above",
        f"BACKENDAI_CLUSTER_LOCAL_RANK={local_rank}: its position in the order the session's "
        "request listed the role groups, which a container cannot see (not used as the node "
        "rank)",
    )



#: Free-form roles of up to 16 characters (Backend.AI's column): letters, digits, hyphens.
role_names = st.from_regex(r"[a-z0-9][a-z0-9-]{0,15}", fullmatch=True).filter(
    lambda r: r != "main" and any(c.isalpha() for c in r))


@st.composite
def sessions(draw):
    """(REPLICAS pairs sorted by role name, the request's group order) of a valid session."""
    others = draw(st.lists(role_names, max_size=3, unique=True))
    counts = {"main": 1, **{role: draw(st.integers(1, 9)) for role in others}}
    names = [f"{role}{i}" for role, count in counts.items() for i in range(1, count + 1)]
    assume(len(set(names)) == len(names))  # Backend.AI would give two containers one name
    pairs = sorted(counts.items())
    return pairs, list(draw(st.permutations(list(counts))))


def hosts_by_index(pairs: list[tuple[str, int]], rnd: random.Random) -> list[str]:
    """HOSTS as Backend.AI's query gives it: sorted by the index within a role only."""
    kernels = [(i, rnd.random(), f"{role}{i}") for role, count in pairs
               for i in range(1, count + 1)]
    return [name for _, _, name in sorted(kernels)]


_ROLE_INDEX = re.compile(r"(?P<role>[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z-])?)(?P<index>[0-9]+)\Z")


Replicas = str | Mapping[str, int] | Sequence[tuple[str, int]] | None


def split_host(host: str) -> tuple[str, int]:
    """``sub10`` -> ``("sub", 10)``."""
    match = _ROLE_INDEX.match(host)
    if match is None:
        raise ValueError(f"{host!r} is not in Backend.AI's {{role}}{{index}} form")
    return match["role"], int(match["index"])


def _replica_pairs(hosts: Sequence[str], replicas: Replicas) -> list[tuple[str, int]]:
    if replicas is None:
        counts: dict[str, int] = {}
        for host in hosts:
            role, _ = split_host(host)
            counts[role] = counts.get(role, 0) + 1
        return sorted(counts.items())  # Backend.AI sorts REPLICAS by role name
    if isinstance(replicas, str):
        pairs = []
        for part in replicas.split(","):
            role, _, count = part.partition(":")
            pairs.append((role.strip(), int(count)))
        return pairs
    if isinstance(replicas, Mapping):
        return list(replicas.items())
    return list(replicas)


def _role_of(host: str, pairs: Sequence[tuple[str, int]]) -> tuple[str, int]:
    """The (role, index) whose ``f"{role}{index}"`` is ``host`` (case-insensitively), found
    from the REPLICAS pairs as Backend.AI builds the names (a role may end in digits)."""
    found = [(role, i) for role, count in pairs for i in range(1, count + 1)
             if f"{role}{i}".lower() == host.lower()]
    if len(found) != 1:
        raise ValueError(f"{host!r} is not exactly one host name of {pairs}")
    return found[0]


def canonical_order(hosts: Iterable[str], replicas: Replicas = None) -> list[str]:
    """Contract section 5: ``main`` first, then the roles in REPLICAS order, each role's
    hosts ``{role}1..{role}{count}`` (names as ``hosts`` spells them)."""
    hosts = list(hosts)
    pairs = _replica_pairs(hosts, replicas)
    roles = [role for role, _ in pairs]
    roles = ["main"] + [r for r in roles if r != "main"] if "main" in roles else roles

    def key(host: str) -> tuple[int, int]:
        role, index = _role_of(host, pairs)
        return roles.index(role), index

    return sorted(hosts, key=key)


def backendai_local_rank(host: str, pairs: Sequence[tuple[str, int]],
                         group_order: Sequence[str]) -> int:
    """``BACKENDAI_CLUSTER_LOCAL_RANK`` of ``host`` as Backend.AI computes it: the position
    over the role groups in the order the session's request listed them (``group_order``),
    then by index (expand_kernel_groups_rule.py)."""
    counts = dict(pairs)
    role, index = _role_of(host, pairs)
    return sum(counts[r] for r in group_order[:list(group_order).index(role)]) + index - 1


def make_backendai_env(
    hosts_order: Sequence[str] | str,
    host: str,
    replicas: Replicas = None,
    *,
    local_rank: bool = True,
    session_id: str = "sess-0123",
    group_order: Sequence[str] | None = None,
) -> dict[str, str]:
    """The Backend.AI variables of container ``host`` in a session of ``hosts_order``.

    :param hosts_order: every host of the session, in the order HOSTS lists them (a list or
        a comma string); Backend.AI does not guarantee any order.
    :param host: this container's host name (must be one of them).
    :param replicas: ``role:count`` pairs (string, mapping or pairs) in the order REPLICAS
        should list them; default: counted from the hosts, sorted by role name.
    :param local_rank: set ``BACKENDAI_CLUSTER_LOCAL_RANK``.
    :param group_order: the order in which the session's request listed the role groups
        (LOCAL_RANK follows it); default: main first, then REPLICAS order (the canonical
        position, as Backend.AI's default session gives).
    """
    hosts = hosts_order.split(",") if isinstance(hosts_order, str) else list(hosts_order)
    if host not in hosts:
        raise ValueError(f"{host!r} is not one of {hosts}")
    pairs = _replica_pairs(hosts, replicas)
    role, index = _role_of(host, pairs)
    env = {
        "BACKENDAI_CLUSTER_SIZE": str(len(hosts)),
        "BACKENDAI_CLUSTER_HOSTS": ",".join(hosts),
        "BACKENDAI_CLUSTER_HOST": host,
        "BACKENDAI_CLUSTER_ROLE": role,
        "BACKENDAI_CLUSTER_IDX": str(index),
        "BACKENDAI_CLUSTER_REPLICAS": ",".join(f"{r}:{c}" for r, c in pairs),
        "BACKENDAI_SESSION_ID": session_id,
    }
    if local_rank:
        if group_order is None:
            group_order = sorted((r for r, _ in pairs), key=lambda r: r != "main")
        env["BACKENDAI_CLUSTER_LOCAL_RANK"] = str(backendai_local_rank(host, pairs, group_order))
    return env


#: Role names of the replica sessions below (at most 8 characters).
_replica_roles = st.from_regex(r"[a-z](?:[a-z-]{0,6}[a-z])?", fullmatch=True).filter(
    lambda r: r != "main")


@st.composite
def replica_sessions(draw):
    """(replicas in REPLICAS order, hosts) of a valid session, at most 64 nodes."""
    others = draw(st.lists(_replica_roles, max_size=3, unique=True))
    counts = {"main": 1}
    budget = 63
    for role in others:
        count = draw(st.integers(min_value=1, max_value=max(1, min(budget, 30))))
        if budget - count < 0:
            break
        counts[role] = count
        budget -= count
    order = draw(st.sampled_from(["sorted", "random"]))
    pairs = sorted(counts.items())  # what Backend.AI does
    if order == "random":
        pairs = draw(st.permutations(pairs))
    hosts = [f"{role}{i}" for role, count in pairs for i in range(1, count + 1)]
    return list(pairs), hosts
