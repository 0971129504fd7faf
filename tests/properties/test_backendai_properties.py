"""Properties of the Backend.AI node order (hypothesis), as Backend.AI really behaves.

Sessions: role ``main`` (1 container) plus 0-3 free-form roles (names with digits and
hyphens, may end in digits: ``a100`` gives ``a1001``), 1-9 containers each; REPLICAS sorted by
role name (``sorted()`` + ``groupby`` in Backend.AI's launcher); the request lists the role
groups in any order, and LOCAL_RANK follows that order (expand_kernel_groups_rule.py); HOSTS
is ordered by the index within a role only, ties in any order (db_source.py), drawn anew for
every container.

1. Every container starts (no error), all derive the same node order and master, the node
   ranks are a permutation of 0..n-1 and match the oracle's canonical position; a warning is
   given exactly when LOCAL_RANK differs from the node rank.
2. A LOCAL_RANK is accepted exactly when some order of the role groups gives it (checked
   against every permutation of the groups), and an impossible one names this container.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from derive_env.errors import TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.sources.compose import topology_from
from support.backendai import hosts_by_index, sessions

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LABELS = {PREFIX + "frameworks": "pytorch"}
LOCAL_RANK = "BACKENDAI_CLUSTER_LOCAL_RANK"

@given(session=sessions(), seed=st.integers(0, 2**32 - 1))
@SETTINGS
def test_every_container_agrees(backendai_env, canonical, session, seed) -> None:
    pairs, group_order = session
    rnd = random.Random(seed)
    names = [f"{role}{i}" for role, count in pairs for i in range(1, count + 1)]
    expected = canonical(names, pairs)
    orders, masters, ranks = set(), set(), []
    for host in names:
        env = backendai_env(hosts_by_index(pairs, rnd), host, pairs, group_order=group_order)
        derivation = derive(env, LABELS)  # raises on any error: no container may fail
        assert derivation is not None
        topo = derivation.topology
        orders.add(tuple(n.host for n in topo.nodes))
        assert topo.node_rank == expected.index(host)
        assert derivation.changes()["NODE_RANK"] == str(topo.node_rank)
        masters.add(derivation.changes()["MASTER_ADDR"])
        differs = env[LOCAL_RANK] != str(topo.node_rank)
        assert topo.warnings == ()  # contract section 5 (revised): --explain notes only
        assert len(topo.notes) == (2 if differs else 0)
        ranks.append(topo.node_rank)
    assert orders == {tuple(expected)}
    assert sorted(ranks) == list(range(len(names)))
    assert masters == {"127.0.0.1" if len(names) == 1 else "main1"}


@given(session=sessions(), seed=st.integers(0, 2**32 - 1), data=st.data())
@SETTINGS
def test_local_rank_accepted_iff_some_group_order_gives_it(
    backendai_env, session, seed, data
) -> None:
    pairs, _ = session
    rnd = random.Random(seed)
    names = [f"{role}{i}" for role, count in pairs for i in range(1, count + 1)]
    host = data.draw(st.sampled_from(names))
    env = backendai_env(hosts_by_index(pairs, rnd), host, pairs, local_rank=False)
    role, index = env["BACKENDAI_CLUSTER_ROLE"], int(env["BACKENDAI_CLUSTER_IDX"])
    counts = dict(pairs)
    possible = {  # brute force over every order the request may list the groups in
        sum(counts[r] for r in order[:order.index(role)]) + index - 1
        for order in itertools.permutations(counts)
    }
    value = data.draw(st.integers(0, len(names) + 2))
    if value in possible:
        assert topology_from({**env, LOCAL_RANK: str(value)}).node_rank >= 0
    else:
        with pytest.raises(TopologyError) as info:
            topology_from({**env, LOCAL_RANK: str(value)})
        message = str(info.value)
        assert message.startswith(f"{LOCAL_RANK}={str(value)!r}: expected ")
        assert f" for container {host} (role {role!r}, index {index}): " in message
