"""Backend.AI sessions: the variable names, the source's door (the topology a container
derives, its error), the explain notes of a LOCAL_RANK, and a hypothesis strategy of valid
sessions with HOSTS as Backend.AI's query orders them. The environment builder itself is
tests/conftest.py's ``backendai_env`` fixture.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import assume
from hypothesis import strategies as st

from derive_env.errors import TopologyError
from derive_env.sources import topology_from
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

