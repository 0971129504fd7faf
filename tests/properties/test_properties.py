"""Properties (hypothesis).

1. For any valid Backend.AI session (``main:1`` plus 0-3 other roles, up to 64 nodes, REPLICAS
   in any order) and any HOSTS order per container, every container derives the same master,
   the same TF cluster and the same node count, and the node ranks are a permutation of
   0..n-1 that matches the canonical position (Backend.AI's LOCAL_RANK).
2. Random bad input (any string for every Backend.AI variable, MASTER_ADDR/PORT and every
   label, random routing tables) never raises anything but a DeriveEnvError.
"""

from __future__ import annotations

import json
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from derive_env.errors import DeriveEnvError
from derive_env.frameworks.context import HostFacts
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from support.backendai import replica_sessions as sessions

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LABELS = {PREFIX + "frameworks": "pytorch,tensorflow"}

@given(session=sessions(), seed=st.integers(0, 2**32 - 1), with_local_rank=st.booleans())
@SETTINGS
def test_every_container_agrees(backendai_env, canonical, session, seed, with_local_rank) -> None:
    pairs, hosts = session
    rnd = random.Random(seed)
    expected_order = canonical(hosts, pairs)
    n = len(hosts)
    masters, clusters, nnodes, ranks = set(), set(), set(), []
    for host in hosts:
        order = rnd.sample(hosts, n)  # the HOSTS order this container sees
        env = backendai_env(order, host, pairs, local_rank=with_local_rank)
        derivation = derive(env, LABELS)
        assert derivation is not None
        changes = derivation.changes()
        rank = int(changes["NODE_RANK"])
        assert rank == expected_order.index(host)
        if with_local_rank:
            assert str(rank) == env["BACKENDAI_CLUSTER_LOCAL_RANK"]
        assert changes["PET_NODE_RANK"] == str(rank)
        ranks.append(rank)
        masters.add(changes["MASTER_ADDR"])
        nnodes.add(changes["PET_NNODES"])
        if n > 1:
            config = json.loads(changes["TF_CONFIG"])
            assert config["task"] == {"type": "worker", "index": rank}
            clusters.add(json.dumps(config["cluster"]))
        else:
            assert "TF_CONFIG" not in changes
    assert sorted(ranks) == list(range(n))
    assert masters == {"127.0.0.1" if n == 1 else expected_order[0]}
    assert expected_order[0] == "main1"
    assert nnodes == {str(n)}
    if n > 1:
        assert clusters == {json.dumps({"worker": [f"{h}:2222" for h in expected_order]})}


# --- bad input ------------------------------------------------------------------------------

VARIABLES = (
    "BACKENDAI_CLUSTER_SIZE", "BACKENDAI_CLUSTER_HOSTS", "BACKENDAI_CLUSTER_HOST",
    "BACKENDAI_CLUSTER_ROLE", "BACKENDAI_CLUSTER_IDX", "BACKENDAI_CLUSTER_LOCAL_RANK",
    "BACKENDAI_CLUSTER_REPLICAS", "BACKENDAI_SESSION_ID", "GPU_COUNT", "N_GPUS",
    "BACKENDAI_DIST_MASTER_PORT", "MASTER_ADDR", "MASTER_PORT",
    # what other launchers set (a contradicting one is refused without cluster variables)
    "WORLD_SIZE", "RANK", "NODE_RANK", "PET_NNODES", "PET_NODE_RANK", "GROUP_RANK", "LOCAL_RANK",
    "GLOO_SOCKET_IFNAME", "TF_CONFIG",
)
LABEL_KEYS = tuple(PREFIX + k for k in (
    "frameworks", "master-port", "tensorflow-port", "jax-port", "pytorch-mode",
    "nproc-per-node", "tensorflow-roles", "socket-ifname", "on-error",
))

ALPHABET = st.sampled_from([*"mainsubps0123456789,:.-_% []\t\n", "main1", "sub1", "sub2",
                            "sub0", "main0", "fe80::1", "::"])
near_valid = st.lists(ALPHABET, max_size=12).map("".join)
any_text = st.text(max_size=40)
value = st.one_of(near_valid, any_text, st.integers(-5, 70000).map(str),
                  st.sampled_from(["", "0", "1", "3", "main1", "sub1", "main1,sub1,sub2",
                                   "sub2,main1,sub1", "main:1,sub:2", "main", "sub",
                                   "2001:db8::1", "fe80::1%eth0", "pytorch", "tensorflow,jax",
                                   "main:chief,sub:worker", "main:evaluator,sub:evaluator",
                                   "auto", "eth0", "warn", "process-per-container"]))


NEAR_MISS_HOSTS = ["sub0", "main0", "sub01", "SUB1", "Main1", "sub-1", "2001:db8::9", "10.0.0.9",
                   "fe80::1%eth0", "sub", "1sub", "sub1.example", " ", "sub99999999999999999999"]


@st.composite
def bad_environments(draw, backendai_env):
    """A valid container's variables, then a HOSTS entry, or some variables, or both, changed."""
    size = draw(st.integers(1, 4))
    hosts = ["main1"] + [f"sub{i}" for i in range(1, size)]
    env = backendai_env(draw(st.permutations(hosts)), draw(st.sampled_from(hosts)))
    mode = draw(st.sampled_from(["hosts", "variables", "both", "scratch"]))
    if mode == "scratch":
        env = {}
    if mode in ("hosts", "both"):
        # One HOSTS entry replaced by a near miss (own host too, sometimes).
        entries = env["BACKENDAI_CLUSTER_HOSTS"].split(",")
        position = draw(st.integers(0, len(entries) - 1))
        entries[position] = draw(st.sampled_from(NEAR_MISS_HOSTS))
        env["BACKENDAI_CLUSTER_HOSTS"] = ",".join(entries)
        if draw(st.booleans()):
            env["BACKENDAI_CLUSTER_HOST"] = entries[position]
    if mode != "hosts":
        names = st.sampled_from(VARIABLES)
        for name in draw(st.lists(names, min_size=1, max_size=len(VARIABLES), unique=True)):
            if draw(st.integers(0, 3)) == 0:
                env.pop(name, None)
            else:
                env[name] = draw(value)
    return env


VALID_LABELS = {
    PREFIX + "frameworks": st.sampled_from(["pytorch", "tensorflow", "jax",
                                           "pytorch,tensorflow,jax"]),
    PREFIX + "master-port": st.integers(1, 65535).map(str),
    PREFIX + "tensorflow-port": st.integers(1, 65535).map(str),
    PREFIX + "jax-port": st.integers(1, 65535).map(str),
    PREFIX + "pytorch-mode": st.sampled_from(["torchrun", "process-per-container"]),
    PREFIX + "nproc-per-node": st.integers(1, 16).map(str),
    PREFIX + "tensorflow-roles": st.sampled_from([
        "main:chief,sub:worker", "main:worker,sub:worker", "main:chief,sub:ps",
        "sub:worker,main:evaluator"]),
    PREFIX + "socket-ifname": st.sampled_from(["auto", "none", "eth0", "lo"]),
    PREFIX + "on-error": st.sampled_from(["fail", "warn"]),
}


@st.composite
def valid_labels(draw):
    """An opted-in label set with valid values."""
    labels = {PREFIX + "frameworks": draw(VALID_LABELS[PREFIX + "frameworks"])}
    for key in LABEL_KEYS[1:]:
        if draw(st.booleans()):
            labels[key] = draw(VALID_LABELS[key])
    return labels


@st.composite
def bad_labels(draw):
    """Valid labels with one to three replaced by random values, or a random extra key."""
    labels = draw(valid_labels())
    for key in draw(st.lists(st.sampled_from(LABEL_KEYS), min_size=1, max_size=3, unique=True)):
        labels[key] = draw(value)
    if draw(st.booleans()):
        labels[PREFIX + draw(st.text(max_size=10))] = draw(value)
    return labels


@st.composite
def host_facts(draw):
    routes = draw(st.one_of(st.none(), st.text(max_size=200), st.lists(
        st.lists(st.sampled_from(["eth0", "00000000", "0000000A", "00FFFFFF", "0001", "0",
                                  "ZZ", "-1", "lo", "ffffffff"]), min_size=0, max_size=12)
        .map("\t".join), max_size=5).map("\n".join)))
    if routes is None:
        return None
    addresses = draw(st.lists(st.sampled_from(
        ["198.18.0.10", "127.0.0.1", "::1", "2001:db8::1", "fe80::1%eth0", "10.0.0.1"]),
        max_size=3))
    return HostFacts(
        interfaces=tuple(draw(st.lists(st.sampled_from(["lo", "eth0", "baimulti0"]),
                                       max_size=3, unique=True))),
        routes_v4=routes, routes_v6=draw(st.text(max_size=200)),
        addresses_v6=draw(st.text(max_size=100)), hostname=draw(st.sampled_from(["", "sub1"])),
        resolve=lambda names: {name: tuple(addresses) for name in names},
    )


def derive_or_error(env, labels, facts=None) -> None:
    """Derive; only a DeriveEnvError (with a message) may come out."""
    try:
        derivation = derive(env, labels, facts)
    except DeriveEnvError as exc:
        assert str(exc)  # a message for the operator, never empty
        return
    assert derivation is not None
    assert all(isinstance(text, str) for text in derivation.changes().values())


@given(data=st.data())
@SETTINGS
def test_bad_environment_raises_only_derive_env_errors(backendai_env, data) -> None:
    env = data.draw(bad_environments(backendai_env), label="environ")
    labels = data.draw(valid_labels(), label="labels")
    facts = data.draw(host_facts(), label="facts")
    derive_or_error(env, labels, facts)


@given(data=st.data())
@SETTINGS
def test_bad_labels_raise_only_derive_env_errors(backendai_env, data) -> None:
    size = data.draw(st.integers(1, 5), label="size")
    hosts = ["main1"] + [f"sub{i}" for i in range(1, size)]
    env = backendai_env(data.draw(st.permutations(hosts)), data.draw(st.sampled_from(hosts)))
    labels = data.draw(bad_labels(), label="labels")
    derive_or_error(env, labels, data.draw(host_facts(), label="facts"))


@given(env=st.dictionaries(st.sampled_from(VARIABLES), value, max_size=len(VARIABLES)),
       labels=st.one_of(valid_labels(), bad_labels()))
@SETTINGS
def test_random_variables_from_scratch(env, labels) -> None:
    derive_or_error(env, labels)
