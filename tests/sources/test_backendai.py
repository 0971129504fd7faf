"""The Backend.AI source: BACKENDAI_CLUSTER_* -> ClusterTopology (contract section 5).

The canonical node order of a session of several nodes (sources/managers/backendai_order.py) is
tested in test_backendai_order.py; the helpers both use are in tests/support/backendai.py,
the ``sub2`` fixture in tests/sources/conftest.py.
"""

from __future__ import annotations

import pytest

from derive_env.errors import TopologyError
from derive_env.sources import seen_sources
from derive_env.sources.compose import topology_from
from derive_env.sources.managers import backendai
from support.backendai import (
    HOST,
    HOSTS,
    IDX,
    LOCAL_RANK,
    REPLICAS,
    ROLE,
    SIZE,
    THREE,
    error_of,
    hosts_of,
    lr_notes,
    topology,
)


def only_here(container: str) -> str:
    """The end of an error about a per-container variable: it names the container (contract
    section 7: a check only one node can make names that node)."""
    return (f" (set for {container} only: it stops alone while the other containers of the "
            "session may start and wait for it)")


ONLY_SUB2 = only_here("container sub2")


def detected(environ: dict[str, str]) -> bool:
    """The Backend.AI line is seen in ``environ`` (the table's any-of and prefix rule)."""
    return any(source.name == "backendai" for source in seen_sources(environ))


# --- the fixture itself -------------------------------------------------------------------


def test_builder_sets_variables_as_backendai_does(sub2: dict[str, str]) -> None:
    assert sub2 == {
        SIZE: "3",
        HOSTS: "sub1,main1,sub2",
        HOST: "sub2",
        ROLE: "sub",
        IDX: "2",
        LOCAL_RANK: "2",
        REPLICAS: "main:1,sub:2",
        "BACKENDAI_SESSION_ID": "sess-0123",
    }


# --- around the canonical order (its rules: test_backendai_order.py) ------------------------


def test_hosts_blanks_around_commas_are_trimmed(sub2: dict[str, str]) -> None:
    topo = topology({**sub2, HOSTS: " sub1 , main1,sub2 "})
    assert hosts_of(topo) == THREE


def test_role_ending_in_digits_contradicting_host(backendai_env) -> None:
    env = backendai_env(["main1", "a1001"], "a1001", "a100:1,main:1")
    assert error_of({**env, ROLE: "a", IDX: "1001"}) == (
        "BACKENDAI_CLUSTER_ROLE='a': expected 'a100', the role in BACKENDAI_CLUSTER_HOST=a1001"
    )
    assert error_of({**env, IDX: "2"}) == (
        "BACKENDAI_CLUSTER_IDX='2': expected 1, the index in BACKENDAI_CLUSTER_HOST=a1001"
    )


@pytest.mark.parametrize("listed", [["main1", "worker1", "worker2"],
                                    ["worker1", "main1", "worker2"]])
def test_template_session_listing_workers_first(backendai_env, listed: list[str]) -> None:
    """Issue 6: a template ``main:1,worker:2`` whose request lists the workers first gives
    worker1=0, worker2=1, main1=2. Every container starts, with the same order."""
    expected_rank = {"main1": 0, "worker1": 1, "worker2": 2}
    backendai_rank = {"worker1": 0, "worker2": 1, "main1": 2}
    for host in listed:
        env = backendai_env(listed, host, "main:1,worker:2", group_order=["worker", "main"])
        assert env[LOCAL_RANK] == str(backendai_rank[host])
        topo = topology(env)
        assert hosts_of(topo) == ["main1", "worker1", "worker2"]
        assert topo.node_rank == expected_rank[host]
        assert topo.warnings == ()
        assert topo.notes == lr_notes(backendai_rank[host], host, expected_rank[host])


def test_without_replicas_local_rank_checked_against_parsed_groups(sub2) -> None:
    env = {**sub2, REPLICAS: ""}
    assert topology({**env, LOCAL_RANK: "1"}).warnings == ()
    assert error_of({**env, LOCAL_RANK: "0"}) == lr_error(
        "0", "one of 1, 2", "sub2", "sub", 2, "main:1")


def test_single_container_role_from_replicas() -> None:
    topo = topology({SIZE: "1", HOSTS: "a1001", HOST: "a1001", ROLE: "a100",
                               IDX: "1", REPLICAS: "a100:1", LOCAL_RANK: "0"})
    assert [(n.host, n.role, n.index) for n in topo.nodes] == [("a1001", "a100", 1)]
    assert (topo.warnings, topo.notes) == ((), ())


# --- LOCAL_RANK -----------------------------------------------------------------------------


def test_local_rank_agreeing_is_recorded_as_input(sub2: dict[str, str]) -> None:
    topo = topology(sub2)
    assert topo.node_rank == 2
    assert topo.inputs["node_rank"] == (
        "position of BACKENDAI_CLUSTER_HOST=sub2 in the canonical order",)
    assert topo.inputs["nodes"] == (HOSTS, REPLICAS)
    assert (topo.warnings, topo.notes) == ((), ())


def lr_error(value: str, possible: str, host: str, role: str, index: int, groups: str) -> str:
    """The impossible-LOCAL_RANK message (spelled out once in full in
    test_local_rank_no_group_order_gives)."""
    return (
        f"BACKENDAI_CLUSTER_LOCAL_RANK={value!r}: expected {possible} for container {host} "
        f"(role {role!r}, index {index}): Backend.AI gives its index - 1 plus the summed counts "
        "of the role groups the session's request listed before its role, in any order (other "
        f"groups: {groups})"
    )


def test_local_rank_of_another_group_order_is_an_explain_note(sub2: dict[str, str]) -> None:
    """A request listing sub before main: sub1=0, sub2=1, main1=2 (a valid session)."""
    topo = topology({**sub2, LOCAL_RANK: "1"})
    assert topo.node_rank == 2
    assert hosts_of(topo) == THREE
    assert topo.warnings == ()
    assert topo.notes == lr_notes(1, "sub2", 2)


def test_local_rank_no_group_order_gives(sub2: dict[str, str]) -> None:
    assert error_of({**sub2, LOCAL_RANK: "0"}) == (
        "BACKENDAI_CLUSTER_LOCAL_RANK='0': expected one of 1, 2 for container sub2 (role "
        "'sub', index 2): Backend.AI gives its index - 1 plus the summed counts of the role "
        "groups the session's request listed before its role, in any order (other groups: "
        "main:1)"
    )


def test_local_rank_outside_session(sub2: dict[str, str]) -> None:
    assert error_of({**sub2, LOCAL_RANK: "3"}).startswith(
        "BACKENDAI_CLUSTER_LOCAL_RANK='3': expected one of 1, 2 for container sub2 ")


def test_local_rank_offset_must_be_a_subset_sum(backendai_env) -> None:
    """Offsets of role c are sums of subsets of {main:1, b:3}: 0, 1, 3, 4; never 2."""
    hosts = ["main1", "b1", "b2", "b3", "c1", "c2"]
    env = backendai_env(hosts, "c1", "b:3,c:2,main:1")
    assert env[LOCAL_RANK] == "4"  # default group order main, b, c
    for value in ("0", "1", "3"):  # c,main,b / main,c,b / b,c,main
        topo = topology({**env, LOCAL_RANK: value})
        assert topo.node_rank == 4
        assert topo.warnings == ()
        assert topo.notes == lr_notes(int(value), "c1", 4)
    assert error_of({**env, LOCAL_RANK: "2"}) == lr_error(
        "2", "one of 0, 1, 3, 4", "c1", "c", 1, "b:3, main:1")
    assert error_of({**env, LOCAL_RANK: "5"}).startswith(
        "BACKENDAI_CLUSTER_LOCAL_RANK='5': expected one of 0, 1, 3, 4 for container c1 ")


def test_local_rank_possible_values_listed_at_most_eight(backendai_env) -> None:
    hosts = ["main1", "a1", "b1", "b2", "c1", "c2", "c3", "c4", "sub1", "sub2"]
    env = backendai_env(hosts, "sub1", "a:1,b:2,c:4,main:1,sub:2")
    assert error_of({**env, LOCAL_RANK: "9"}) == lr_error(
        "9", "one of 0, 1, 2, 3, 4, 5, 6, 7, ... (9 in all)", "sub1", "sub", 1,
        "a:1, b:2, c:4, main:1")


def test_possible_local_ranks() -> None:
    assert backendai.possible_local_ranks(1, [], 1) == [0]
    assert backendai.possible_local_ranks(2, [1], 3) == [1, 2]
    assert backendai.possible_local_ranks(1, [3, 1], 6) == [0, 1, 3, 4]
    assert backendai.possible_local_ranks(3, [2, 2], 7) == [2, 4, 6]


@pytest.mark.parametrize("value", [None, ""])
def test_absent_local_rank_uses_position(backendai_env, value: str | None) -> None:
    env = backendai_env(["sub2", "sub1", "main1"], "sub1", local_rank=False)
    if value is not None:
        env[LOCAL_RANK] = value
    topo = topology(env)
    assert topo.node_rank == 1
    assert topo.inputs["node_rank"] == (
        "position of BACKENDAI_CLUSTER_HOST=sub1 in the canonical order",)


def test_local_rank_not_integer(sub2: dict[str, str]) -> None:
    assert error_of({**sub2, LOCAL_RANK: "-1"}) == (
        "BACKENDAI_CLUSTER_LOCAL_RANK='-1': expected an integer >= 0" + ONLY_SUB2
    )


# --- single container -----------------------------------------------------------------------


def test_no_cluster_variables_is_single_container() -> None:
    assert not detected({"PATH": "/bin", "HOSTNAME": "main1"})
    topo = topology_from({"PATH": "/bin"})
    assert topo.source == "standalone"
    assert topo.num_nodes == 1
    assert topo.master_addr == "127.0.0.1"


@pytest.mark.parametrize(("extra", "gpus", "port"), [
    ({"GPU_COUNT": "2"}, 2, None),
    ({"N_GPUS": "1"}, 1, None),
    ({"BACKENDAI_DIST_MASTER_PORT": "23456"}, None, 23456),
    ({"BACKENDAI_SESSION_ID": "s"}, None, None),
])
def test_gpu_count_and_port_without_cluster_variables(extra, gpus, port) -> None:
    """A single-container Backend.AI session without BACKENDAI_CLUSTER_* keeps its GPU count."""
    topo = topology_from(extra)
    assert topo.num_nodes == 1
    assert topo.master_addr == "127.0.0.1"
    assert (topo.gpus_per_node, topo.master_port) == (gpus, port)


def test_bad_gpu_count_without_cluster_variables() -> None:
    with pytest.raises(TopologyError) as info:
        topology_from({"GPU_COUNT": "x"})
    assert str(info.value) == "GPU_COUNT='x': expected an integer >= 0" + only_here(
        "this container")


@pytest.mark.parametrize(("name", "value"), [
    ("WORLD_SIZE", "4"), ("RANK", "2"), ("NODE_RANK", "1"), ("PET_NNODES", "2"),
    ("PET_NODE_RANK", "1"), ("GROUP_RANK", "3"),
])
def test_other_launcher_topology_without_cluster_variables(name: str, value: str) -> None:
    with pytest.raises(TopologyError) as info:
        topology_from({name: value})
    assert str(info.value) == other_launcher_message(name, value)
    assert info.value.exit_code == 3


def closest(name: str) -> str:
    """The hint naming the source line that has ``name`` (alone) among its variables; for a
    name several lines share (torch's own), the hint names no launcher (issue 24: a
    hand-set NODE_RANK was answered "closest: an Azure ML PyTorch-distribution process")."""
    from derive_env.sources import SOURCES

    if sum(name in source.detect for source in SOURCES) > 1:
        return (f" ({name}: a name several launchers set, and no variable of one of them is "
                "here: set by hand (the image's ENV, an env file, a wrapper) or by a launcher "
                "derive-env has no source for)")
    for source in SOURCES:
        if name in source.detect and not source.any_of and source.module is not None:
            rest = ", ".join(n for n in source.detect if n != name)
            return f" (closest: {source.title}; not set: {rest})"
    return ""


def other_launcher_message(name: str, value: str) -> str:
    single = "1" if name in ("WORLD_SIZE", "PET_NNODES") else "0"
    return (
        f"{name}={value!r}: expected {single} or unset: no source's complete set of variables "
        "is set (no cluster manager or launcher stated the job), so this is taken for a single "
        f"container, but another launcher set a larger topology{closest(name)}. Run the command "
        "without derive-env for that launcher, or give the container its cluster manager's "
        "variables"
    )


def test_single_container_launcher_values_accepted() -> None:
    single = {"WORLD_SIZE": "1", "RANK": "0", "NODE_RANK": "0", "PET_NNODES": "1",
              "PET_NODE_RANK": "0", "GROUP_RANK": "0", "LOCAL_RANK": "3"}
    assert topology_from(single).num_nodes == 1


def test_empty_cluster_variables_count_as_unset() -> None:
    environ = {SIZE: "", HOSTS: "", HOST: "", LOCAL_RANK: ""}
    assert not detected(environ)
    assert topology_from(environ).source == "standalone"


def test_size_one_without_hosts(backendai_env) -> None:
    topo = topology_from({SIZE: "1", HOST: "main1", ROLE: "main", IDX: "1"})
    assert topo.source == "backendai"
    assert hosts_of(topo) == ["main1"]
    assert topo.node_rank == 0
    assert topo.master_addr == "127.0.0.1"


def test_size_one_with_hosts(backendai_env) -> None:
    env = backendai_env(["main1"], "main1")
    topo = topology_from(env)
    assert hosts_of(topo) == ["main1"]
    assert topo.node_rank == 0
    assert topo.master_addr == "127.0.0.1"


def test_size_one_only() -> None:
    topo = topology_from({SIZE: "1"})
    assert topo.num_nodes == 1
    assert topo.master_addr == "127.0.0.1"


# --- GPU count, master port -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "gpus", "inputs"),
    [
        ({"GPU_COUNT": "2"}, 2, ("GPU_COUNT",)),
        ({"N_GPUS": "4"}, 4, ("N_GPUS",)),
        ({"GPU_COUNT": "8", "N_GPUS": "8"}, 8, ("GPU_COUNT", "N_GPUS")),
        ({"GPU_COUNT": "0"}, 0, ("GPU_COUNT",)),
        ({"GPU_COUNT": "", "N_GPUS": "3"}, 3, ("N_GPUS",)),
        ({}, None, None),
        ({"GPU_COUNT": ""}, None, None),
    ],
)
def test_gpu_count(sub2, extra, gpus, inputs) -> None:
    topo = topology({**sub2, **extra})
    assert topo.gpus_per_node == gpus
    assert topo.inputs.get("gpus") == inputs


def test_gpu_counts_disagree(sub2: dict[str, str]) -> None:
    assert error_of({**sub2, "GPU_COUNT": "2", "N_GPUS": "3"}) == (
        "N_GPUS='3': expected the same count as GPU_COUNT=2" + ONLY_SUB2
    )


@pytest.mark.parametrize(("name", "value"), [("GPU_COUNT", "-1"), ("N_GPUS", "two"),
                                             ("GPU_COUNT", "1.5")])
def test_gpu_count_not_integer(sub2, name: str, value: str) -> None:
    assert error_of({**sub2, name: value}) == (
        f"{name}={value!r}: expected an integer >= 0" + ONLY_SUB2
    )


def test_dist_master_port(sub2: dict[str, str]) -> None:
    topo = topology({**sub2, "BACKENDAI_DIST_MASTER_PORT": "23456"})
    assert topo.master_port == 23456
    assert topo.inputs["master_port"] == ("BACKENDAI_DIST_MASTER_PORT",)
    assert topology(sub2).master_port is None
    assert topology({**sub2, "BACKENDAI_DIST_MASTER_PORT": ""}).master_port is None


@pytest.mark.parametrize("value", ["0", "65536", "abc", "-1", " 80", "80.0"])
def test_dist_master_port_bad(sub2, value: str) -> None:
    assert error_of({**sub2, "BACKENDAI_DIST_MASTER_PORT": value}) == (
        f"BACKENDAI_DIST_MASTER_PORT={value!r}: expected a port number 1-65535"
    )


# --- bad input (contract section 5), exact messages -----------------------------------------


@pytest.mark.parametrize("value", ["x", "0", "-3", "3.0", " 3", "+3", "1e3"])
def test_size_not_positive_integer(sub2, value: str) -> None:
    assert error_of({**sub2, SIZE: value}) == (
        f"BACKENDAI_CLUSTER_SIZE={value!r}: expected an integer >= 1"
    )


def test_hosts_count_differs_from_size(sub2: dict[str, str]) -> None:
    assert error_of({**sub2, SIZE: "4", REPLICAS: "main:1,sub:3"}) == (
        "BACKENDAI_CLUSTER_HOSTS='sub1,main1,sub2': expected exactly 4 entries "
        "(BACKENDAI_CLUSTER_SIZE=4), got 3"
    )


@pytest.mark.parametrize(
    ("hosts", "position"),
    [("sub1,,main1", 2), ("sub1,main1,sub2,", 4), (",sub1,main1", 1), ("sub1, ,main1", 2)],
)
def test_hosts_empty_entry(sub2, hosts: str, position: int) -> None:
    assert error_of({**sub2, HOSTS: hosts}) == (
        f"BACKENDAI_CLUSTER_HOSTS={hosts!r}: expected no empty entries "
        f"(entry {position} is empty)"
    )


@pytest.mark.parametrize(("hosts", "dup"), [("sub1,sub1,main1", "sub1"),
                                            ("sub2,main1,SUB2", "SUB2")])
def test_hosts_duplicate_entry(sub2, hosts: str, dup: str) -> None:
    assert error_of({**sub2, HOSTS: hosts}) == (
        f"BACKENDAI_CLUSTER_HOSTS={hosts!r}: expected no duplicate entries "
        f"({dup!r} appears more than once)"
    )


@pytest.mark.parametrize("bad", ["main_1", "sub 1", "-sub1", "sub1:80", "fe80::1%eth0"])
def test_hosts_invalid_hostname(sub2, bad: str) -> None:
    hosts = f"sub1,main1,{bad}"
    message = error_of({**sub2, HOSTS: hosts})
    assert message.startswith(
        f"BACKENDAI_CLUSTER_HOSTS={hosts!r}: expected every entry to be a "
    )
    assert message.endswith(f" ({bad!r} is not)")


def test_hosts_invalid_hostname_exact(sub2: dict[str, str]) -> None:
    assert error_of({**sub2, HOSTS: "sub1,main_1,sub2"}) == (
        "BACKENDAI_CLUSTER_HOSTS='sub1,main_1,sub2': expected every entry to be a host name "
        "(letters, digits, '-' and '.') or an IP address ('main_1' is not)"
    )


def test_own_host_missing(sub2: dict[str, str]) -> None:
    assert error_of({**sub2, HOST: "sub3", IDX: "3"}) == (
        "BACKENDAI_CLUSTER_HOST='sub3': expected one of BACKENDAI_CLUSTER_HOSTS "
        "(sub1,main1,sub2)"
    )


def test_own_host_invalid(sub2: dict[str, str]) -> None:
    assert error_of({**sub2, HOST: " sub2"}) == (
        "BACKENDAI_CLUSTER_HOST=' sub2': expected a host name (letters, digits, '-' and '.') "
        "or an IP address" + ONLY_SUB2
    )


def test_own_host_matched_case_insensitively(sub2: dict[str, str]) -> None:
    topo = topology({**sub2, HOST: "SUB2"})
    assert topo.node_rank == 2


def test_missing_host_with_size_above_one(sub2: dict[str, str]) -> None:
    expected = (
        "BACKENDAI_CLUSTER_HOST='': expected this container's host name, one of "
        "BACKENDAI_CLUSTER_HOSTS (sub1,main1,sub2)"
    )
    assert error_of({k: v for k, v in sub2.items() if k != HOST}) == expected
    assert error_of({**sub2, HOST: ""}) == expected


def test_missing_hosts_with_size_above_one(sub2: dict[str, str]) -> None:
    assert error_of({k: v for k, v in sub2.items() if k != HOSTS}) == (
        "BACKENDAI_CLUSTER_HOSTS='': expected the 3 host names of the session "
        "(BACKENDAI_CLUSTER_SIZE=3)"
    )


def test_replicas_not_adding_up(sub2: dict[str, str]) -> None:
    assert error_of({**sub2, REPLICAS: "main:1,sub:3"}) == (
        "BACKENDAI_CLUSTER_REPLICAS='main:1,sub:3': expected counts adding up to "
        "BACKENDAI_CLUSTER_SIZE=3; they add up to 4"
    )


@pytest.mark.parametrize("value", ["garbage", "main:x", "main:1,sub", "main:-1", "1:1",
                                   "main:1,,sub:2"])
def test_replicas_malformed(sub2, value: str) -> None:
    assert error_of({**sub2, REPLICAS: value}) == (
        f"BACKENDAI_CLUSTER_REPLICAS={value!r}: expected comma-separated role:count pairs "
        "such as main:1,sub:3"
    )


def test_replicas_role_twice(sub2: dict[str, str]) -> None:
    assert error_of({**sub2, REPLICAS: "main:1,sub:1,sub:1"}) == (
        "BACKENDAI_CLUSTER_REPLICAS='main:1,sub:1,sub:1': expected comma-separated "
        "role:count pairs such as main:1,sub:3, each role once"
    )


def test_role_contradicts_host(sub2: dict[str, str]) -> None:
    assert error_of({**sub2, ROLE: "main"}) == (
        "BACKENDAI_CLUSTER_ROLE='main': expected 'sub', the role in BACKENDAI_CLUSTER_HOST=sub2"
    )


def test_idx_contradicts_host(sub2: dict[str, str]) -> None:
    assert error_of({**sub2, IDX: "1"}) == (
        "BACKENDAI_CLUSTER_IDX='1': expected 2, the index in BACKENDAI_CLUSTER_HOST=sub2"
    )


ROLE_EXPECTED = ("a role name such as main or sub (letters, digits and '-', with a letter, "
                 "not starting with '-')")


@pytest.mark.parametrize(("name", "value", "expected"), [
    (ROLE, "sub ", ROLE_EXPECTED),
    (ROLE, "-sub", ROLE_EXPECTED),
    (ROLE, "sub_1", ROLE_EXPECTED),
    (ROLE, "100", ROLE_EXPECTED),
    (IDX, "0", "an integer >= 1"),
    (IDX, "two", "an integer >= 1"),
])
def test_role_idx_malformed(sub2, name: str, value: str, expected: str) -> None:
    assert error_of({**sub2, name: value}) == f"{name}={value!r}: expected {expected}" + ONLY_SUB2


def test_empty_role_and_idx_count_as_unset(sub2: dict[str, str]) -> None:
    assert topology({**sub2, ROLE: "", IDX: ""}).node_rank == 2


def test_size_one_role_contradicting_host_is_rejected() -> None:
    """ROLE/IDX contradicting HOST is an error in a one-container session too."""
    with pytest.raises(TopologyError, match="BACKENDAI_CLUSTER_ROLE='sub'"):
        topology({SIZE: "1", HOST: "main1", ROLE: "sub", IDX: "1"})


def test_size_one_local_rank_other_than_zero_is_rejected() -> None:
    """A one-node session has node rank 0 only; LOCAL_RANK=5 is inconsistent (section 5)."""
    assert error_of({SIZE: "1", HOST: "main1", LOCAL_RANK: "5"}) == lr_error(
        "5", "0", "main1", "main", 1, "none")


def test_variables_without_size(sub2: dict[str, str]) -> None:
    expected = (
        "BACKENDAI_CLUSTER_SIZE='': expected the number of containers of the session (an "
        "integer >= 1), since BACKENDAI_CLUSTER_HOST, BACKENDAI_CLUSTER_HOSTS, "
        "BACKENDAI_CLUSTER_IDX, BACKENDAI_CLUSTER_LOCAL_RANK, BACKENDAI_CLUSTER_REPLICAS, "
        "BACKENDAI_CLUSTER_ROLE are set"
    )
    assert error_of({k: v for k, v in sub2.items() if k != SIZE}) == expected
    assert error_of({**sub2, SIZE: ""}) == expected


def test_only_host_without_size() -> None:
    assert error_of({HOST: "main1"}) == (
        "BACKENDAI_CLUSTER_SIZE='': expected the number of containers of the session (an "
        "integer >= 1), since BACKENDAI_CLUSTER_HOST is set"
    )


def test_long_value_is_shortened_in_message(sub2: dict[str, str]) -> None:
    value = "x" * 500
    assert error_of({**sub2, SIZE: value}) == (
        f"BACKENDAI_CLUSTER_SIZE={'x' * 200 + '... (500 characters)'!r}: "
        "expected an integer >= 1"
    )


def test_topology_from_uses_backendai_when_detected(sub2: dict[str, str]) -> None:
    assert detected(sub2)
    topo = topology_from(sub2)
    assert topo.source == "backendai"
    assert topo.node_rank == 2


# --- other launchers' topology variables (no cluster manager stated the nodes) ---------------


@pytest.mark.parametrize(("name", "value"), [
    ("WORLD_SIZE", "01"), ("WORLD_SIZE", "0001"), ("PET_NNODES", "1:1"), ("PET_NNODES", "01:1"),
    ("PET_NNODES", "1"), ("RANK", "00"), ("NODE_RANK", "000"), ("PET_NODE_RANK", "00"),
    ("GROUP_RANK", "0"),
])
def test_other_launcher_single_values_are_compared_numerically(name: str, value: str) -> None:
    topo = topology_from({name: value})
    assert (topo.source, topo.num_nodes) == ("standalone", 1)


@pytest.mark.parametrize(("name", "value"), [
    ("PET_NNODES", "1:2"), ("PET_NNODES", "2:2"), ("PET_NNODES", "1:1:1"), ("PET_NNODES", "1:"),
    ("WORLD_SIZE", "1.0"), ("WORLD_SIZE", "x"), ("WORLD_SIZE", "-1"), ("RANK", "\u0660"),
    ("RANK", "-0"),
])
def test_other_launcher_values_that_are_not_single_are_refused(name: str, value: str) -> None:
    with pytest.raises(TopologyError) as info:
        topology_from({name: value})
    assert str(info.value) == other_launcher_message(name, value)


@pytest.mark.parametrize("extra", [
    {"GPU_COUNT": "2"}, {"N_GPUS": "1"}, {"BACKENDAI_SESSION_ID": "sess-1"},
    {"BACKENDAI_DIST_MASTER_PORT": "23456"},
], ids=lambda e: next(iter(e)))
def test_other_launcher_topology_refused_when_backendai_did_not_state_the_nodes(
    extra: dict[str, str],
) -> None:
    # Backend.AI variables, but none stating the nodes: still a single container as far as
    # derive-env knows, so WORLD_SIZE=4 contradicts it.
    environ = {**extra, "WORLD_SIZE": "4"}
    assert detected(environ)
    with pytest.raises(TopologyError) as info:
        topology_from(environ)
    assert str(info.value) == other_launcher_message("WORLD_SIZE", "4")
    topo = topology_from({**extra, "WORLD_SIZE": "1", "RANK": "0"})
    assert (topo.source, topo.num_nodes) == ("backendai", 1)
    assert "nodes" not in topo.inputs


@pytest.mark.parametrize(("environ", "nodes_inputs"), [
    ({SIZE: "1"}, (SIZE,)),
    ({SIZE: "1", HOST: "main1"}, (SIZE,)),
    ({SIZE: "1", HOSTS: "main1", HOST: "main1"}, (SIZE, HOSTS)),
], ids=["size", "size-host", "size-hosts"])
def test_backendai_single_container_session_keeps_other_launcher_values(
    environ: dict[str, str], nodes_inputs: tuple[str, ...]
) -> None:
    # The cluster manager stated one node: a launcher inside it (WORLD_SIZE=4 processes)
    # does not contradict that.
    topo = topology_from({**environ, "WORLD_SIZE": "4", "RANK": "2", "PET_NNODES": "2"})
    assert (topo.source, topo.num_nodes, topo.node_rank) == ("backendai", 1, 0)
    assert topo.inputs["nodes"] == nodes_inputs


def test_multi_node_session_keeps_other_launcher_values(sub2: dict[str, str]) -> None:
    topo = topology_from({**sub2, "WORLD_SIZE": "12", "RANK": "7"})
    assert (topo.num_nodes, topo.node_rank) == (3, 2)


# --- REPLICAS against SIZE, number lengths ---------------------------------------------------


def test_replicas_must_add_up_to_size_without_hosts() -> None:
    assert error_of({SIZE: "1", REPLICAS: "main:1,sub:3"}) == (
        "BACKENDAI_CLUSTER_REPLICAS='main:1,sub:3': expected counts adding up to "
        "BACKENDAI_CLUSTER_SIZE=1; they add up to 4"
    )
    assert error_of({SIZE: "1", REPLICAS: "main:0"}) == (
        "BACKENDAI_CLUSTER_REPLICAS='main:0': expected counts adding up to "
        "BACKENDAI_CLUSTER_SIZE=1; they add up to 0"
    )
    for replicas in ("main:1", "main:1,sub:0"):
        topo = topology({SIZE: "1", REPLICAS: replicas})
        assert topo.num_nodes == 1


@pytest.mark.parametrize(("name", "minimum"), [
    (SIZE, 1), (IDX, 1), (LOCAL_RANK, 0), ("GPU_COUNT", 0), ("N_GPUS", 0),
])
def test_numbers_over_18_digits_say_so(sub2: dict[str, str], name: str, minimum: int) -> None:
    value = "1" * 19
    assert error_of({**sub2, name: value}) == (
        f"{name}={value!r}: expected an integer >= {minimum} of at most 18 digits"
        + ("" if name == SIZE else ONLY_SUB2)  # SIZE is the same in every container
    )


def test_port_over_18_digits_says_so(sub2: dict[str, str]) -> None:
    value = "9" * 19
    assert error_of({**sub2, "BACKENDAI_DIST_MASTER_PORT": value}) == (
        f"BACKENDAI_DIST_MASTER_PORT={value!r}: expected a port number 1-65535 of at most 18 "
        "digits"
    )

