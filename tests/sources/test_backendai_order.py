"""Backend.AI's canonical node order (sources/managers/backendai_order.py, contract section 5).

The same order in every container of a session of several nodes, whatever order
BACKENDAI_CLUSTER_HOSTS has: role main first, then the roles in REPLICAS order, each role's
hosts {role}1 to {role}{count} rebuilt from REPLICAS and matched to HOSTS case-insensitively;
without REPLICAS, {role}{index} parsed from the HOSTS names. Through the program's door
(``topology_from``), with the helpers of test_backendai.py.
"""

from __future__ import annotations

import itertools

import pytest

from derive_env.errors import TopologyError
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

# --- REPLICAS: main first, then the roles in REPLICAS order ---------------------------------


@pytest.mark.parametrize("order", list(itertools.permutations(THREE)))
def test_canonical_order_whatever_hosts_order(backendai_env, order: tuple[str, ...]) -> None:
    for rank, host in enumerate(THREE):
        topo = topology(backendai_env(order, host))
        assert hosts_of(topo) == THREE
        assert topo.node_rank == rank
        assert topo.master_addr == "main1"
        assert topo.this_node.host == host


def test_master_is_never_first_hosts_entry(backendai_env) -> None:
    topo = topology(backendai_env(["sub1", "main1"], "sub1"))
    assert topo.master_addr == "main1"
    assert topo.node_rank == 1


def test_numeric_index_order(backendai_env) -> None:
    hosts = ["main1"] + [f"sub{i}" for i in range(1, 12)]
    listed = sorted(hosts, reverse=True)  # sub9, ..., sub2, sub11, sub10, sub1, main1
    topo = topology(backendai_env(listed, "sub10"))
    assert hosts_of(topo) == hosts
    assert topo.node_rank == 10
    assert [n.index for n in topo.nodes] == [1, *range(1, 12)]


def test_sub2_before_sub10(backendai_env) -> None:
    hosts = ["main1"] + [f"sub{i}" for i in range(1, 11)]
    topo = topology(backendai_env(["sub10", "sub2", *hosts[:2], *hosts[3:10]], "sub2"))
    assert hosts_of(topo).index("sub2") == 2
    assert hosts_of(topo).index("sub10") == 10


def test_extra_roles_follow_replicas_order(backendai_env) -> None:
    env = backendai_env(["worker2", "ps1", "worker1", "main1"], "worker1",
                        replicas="main:1,ps:1,worker:2")
    topo = topology(env)
    assert hosts_of(topo) == ["main1", "ps1", "worker1", "worker2"]
    assert [n.role for n in topo.nodes] == ["main", "ps", "worker", "worker"]
    assert topo.node_rank == 2


def test_replicas_order_is_used_not_alphabetical(backendai_env) -> None:
    env = backendai_env(["ps1", "worker2", "main1", "worker1"], "ps1",
                        replicas="main:1,worker:2,ps:1")
    assert env[LOCAL_RANK] == "3"
    topo = topology(env)
    assert hosts_of(topo) == ["main1", "worker1", "worker2", "ps1"]
    assert topo.node_rank == 3


def test_main_first_even_when_replicas_lists_it_later(backendai_env) -> None:
    env = backendai_env(["sub1", "main1", "aux1"], "aux1", replicas="aux:1,main:1,sub:1")
    topo = topology(env)
    assert hosts_of(topo) == ["main1", "aux1", "sub1"]
    assert topo.node_rank == 1


def test_replicas_not_starting_with_main(backendai_env) -> None:
    """Backend.AI sorts REPLICAS by role name: aux before main."""
    hosts = ["aux1", "main1", "sub1", "sub2"]
    for listed in (hosts, ["main1", "sub1", "aux1", "sub2"]):
        ranks = {}
        for host in hosts:
            env = backendai_env(listed, host, "aux:1,main:1,sub:2")
            topo = topology(env)
            assert hosts_of(topo) == ["main1", "aux1", "sub1", "sub2"]
            assert topo.master_addr == "main1"
            assert topo.warnings == ()
            ranks[host] = topo.node_rank
        assert ranks == {"main1": 0, "aux1": 1, "sub1": 2, "sub2": 3}


def test_roles_and_indices_recorded(sub2: dict[str, str]) -> None:
    topo = topology(sub2)
    assert [(n.role, n.index) for n in topo.nodes] == [("main", 1), ("sub", 1), ("sub", 2)]
    assert topo.source == "backendai"
    assert topo.session_id == "sess-0123"


def test_order_rule_is_recorded(sub2: dict[str, str]) -> None:
    assert topology(sub2).order == (
        "from BACKENDAI_CLUSTER_REPLICAS: role main first, then the roles in REPLICAS order, "
        "each role's hosts {role}1 to {role}{count}"
    )
    assert topology({**sub2, REPLICAS: ""}).order == (
        "no BACKENDAI_CLUSTER_REPLICAS: roles and indices parsed from the "
        "BACKENDAI_CLUSTER_HOSTS names {role}{index}; role main first, then roles by name, "
        "each by numeric index"
    )
    assert topology({SIZE: "1", HOST: "main1"}).order is None


# --- role names: the host names rebuilt from REPLICAS, never split --------------------------


def test_roles_ending_in_digits(backendai_env) -> None:
    """Host names are f"{role}{idx}": role a100 gives a1001, a1002 (never a #1001)."""
    hosts = ["a1001", "main1", "a1002", "b21"]
    env = backendai_env(hosts, "a1002", "a100:2,b2:1,main:1")
    assert (env[ROLE], env[IDX], env[LOCAL_RANK]) == ("a100", "2", "2")
    topo = topology(env)
    assert hosts_of(topo) == ["main1", "a1001", "a1002", "b21"]
    assert [(n.role, n.index) for n in topo.nodes] == [
        ("main", 1), ("a100", 1), ("a100", 2), ("b2", 1)]
    assert topo.node_rank == 2
    assert topo.warnings == ()


def test_roles_with_hyphens(backendai_env) -> None:
    hosts = ["gpu-21", "main1", "gpu-22", "cpu-1"]
    env = backendai_env(hosts, "cpu-1", "cpu-:1,gpu-2:2,main:1")
    topo = topology(env)
    assert hosts_of(topo) == ["main1", "cpu-1", "gpu-21", "gpu-22"]
    assert [(n.role, n.index) for n in topo.nodes] == [
        ("main", 1), ("cpu-", 1), ("gpu-2", 1), ("gpu-2", 2)]
    assert topo.node_rank == 1


def test_role_starting_with_a_digit(backendai_env) -> None:
    env = backendai_env(["8gpu1", "main1"], "8gpu1", "8gpu:1,main:1")
    topo = topology(env)
    assert [(n.host, n.role, n.index) for n in topo.nodes] == [
        ("main1", "main", 1), ("8gpu1", "8gpu", 1)]


def test_role_of_sixteen_characters(backendai_env) -> None:
    """Backend.AI's longest role (a 16-character column, models/kernel/row.py)."""
    role = "gpu-a100-80g-sx4"
    env = backendai_env([f"{role}1", "main1", f"{role}2"], f"{role}2", f"{role}:2,main:1")
    topo = topology(env)
    assert hosts_of(topo) == ["main1", f"{role}1", f"{role}2"]
    assert (topo.node_rank, topo.this_node.role) == (2, role)


# --- HOSTS against the names REPLICAS gives -------------------------------------------------


def test_hosts_compared_case_insensitively(backendai_env) -> None:
    env = backendai_env(["SUB1", "Main1", "sub2"], "SUB1", "main:1,sub:2")
    topo = topology(env)
    assert hosts_of(topo) == ["Main1", "SUB1", "sub2"]  # spelled as HOSTS spells them
    assert topo.node_rank == 1
    assert topo.master_addr == "Main1"
    assert topology({**env, HOST: "sub1"}).node_rank == 1


def test_replicas_role_with_zero_count_is_fine(sub2: dict[str, str]) -> None:
    topo = topology({**sub2, REPLICAS: "main:1,ps:0,sub:2"})
    assert hosts_of(topo) == THREE


def test_hosts_not_the_names_replicas_gives(sub2: dict[str, str]) -> None:
    assert error_of({**sub2, HOSTS: "sub01,main1,sub1", HOST: "sub1", IDX: "1",
                     LOCAL_RANK: ""}) == (
        "BACKENDAI_CLUSTER_HOSTS='sub01,main1,sub1': expected exactly the host names "
        "BACKENDAI_CLUSTER_REPLICAS=main:1,sub:2 gives ({role}1 to {role}{count} for each "
        "role); missing: sub2; not from BACKENDAI_CLUSTER_REPLICAS: sub01"
    )


def test_replicas_count_of_a_role_differs_from_hosts(sub2: dict[str, str]) -> None:
    message = error_of({**sub2, REPLICAS: "main:2,sub:1"})
    assert message == (
        "BACKENDAI_CLUSTER_HOSTS='sub1,main1,sub2': expected exactly the host names "
        "BACKENDAI_CLUSTER_REPLICAS=main:2,sub:1 gives ({role}1 to {role}{count} for each "
        "role); missing: main2; not from BACKENDAI_CLUSTER_REPLICAS: sub2"
    )


def test_replicas_missing_a_role_of_hosts(backendai_env) -> None:
    env = backendai_env(["main1", "sub1", "ps1"], "sub1", local_rank=False)
    env[REPLICAS] = "main:1,sub:2"
    assert error_of(env) == (
        "BACKENDAI_CLUSTER_HOSTS='main1,sub1,ps1': expected exactly the host names "
        "BACKENDAI_CLUSTER_REPLICAS=main:1,sub:2 gives ({role}1 to {role}{count} for each "
        "role); missing: sub2; not from BACKENDAI_CLUSTER_REPLICAS: ps1"
    )


def test_hosts_mismatch_lists_at_most_eight_names(backendai_env) -> None:
    hosts = ["main1"] + [f"w{i}" for i in range(1, 11)]
    env = backendai_env(hosts, "main1", "main:1,sub:10", local_rank=False)
    message = error_of(env)
    assert message.endswith(
        "missing: sub1, sub2, sub3, sub4, sub5, sub6, sub7, sub8, ... (10 in all); not from "
        "BACKENDAI_CLUSTER_REPLICAS: w1, w2, w3, w4, w5, w6, w7, w8, ... (10 in all)"
    )


@pytest.mark.parametrize(("replicas", "name", "first", "second"), [
    ("a:11,a1:1,main:1", "a11", "a #11", "a1 #1"),  # met in canonical order: main, a, a1
    ("Sub:1,main:1,sub:1", "sub1", "Sub #1", "sub #1"),
    ("gpu-1:11,gpu-11:1,main:1", "gpu-111", "gpu-1 #11", "gpu-11 #1"),
])
def test_replicas_names_colliding(replicas: str, name: str, first: str, second: str) -> None:
    size = sum(int(pair.rsplit(":", 1)[1]) for pair in replicas.split(","))
    hosts = ",".join(["main1"] + [f"h{i}" for i in range(1, size)])
    assert error_of({SIZE: str(size), HOSTS: hosts, HOST: "main1", REPLICAS: replicas}) == (
        f"BACKENDAI_CLUSTER_REPLICAS={replicas!r}: expected roles whose host names "
        "{role}{index} are all different (compared case-insensitively, as DNS does); "
        f"{name!r} is both {first} and {second}"
    )


# --- without REPLICAS: {role}{index} parsed from the HOSTS names ----------------------------


def test_without_replicas_roles_sorted_main_first(backendai_env) -> None:
    env = backendai_env(["worker1", "ps1", "main1"], "worker1")
    del env[REPLICAS]
    topo = topology(env)
    assert hosts_of(topo) == ["main1", "ps1", "worker1"]
    assert topo.node_rank == 2
    assert topo.inputs["nodes"] == (HOSTS,)


def test_without_replicas_roles_ending_in_digits_fall_back(backendai_env) -> None:
    """Without REPLICAS the names are split: a1001 and a1002 number no role from 1 as a
    #1001 and #1002, only as a100 #1 and #2, which every container finds alike; the groups
    (main:1, a100:2) are then known, so LOCAL_RANK is checked against them."""
    env = backendai_env(["a1002", "main1", "a1001"], "a1002", "a100:2,main:1")
    del env[REPLICAS]
    topo = topology(env)
    assert hosts_of(topo) == ["main1", "a1001", "a1002"]
    assert topo.node_rank == 2
    assert topo.order.startswith("no BACKENDAI_CLUSTER_REPLICAS: ")
    assert topo.warnings == ()
    assert [(n.role, n.index) for n in topo.nodes] == [("main", 1), ("a100", 1), ("a100", 2)]
    other_order = topology({**env, LOCAL_RANK: "1"})  # contract 5: a note, no warning
    assert (other_order.warnings, other_order.notes) == ((), lr_notes(1, "a1002", 2))
    for local_rank in ("0", "3"):
        assert error_of({**env, LOCAL_RANK: local_rank}) == (
            f"BACKENDAI_CLUSTER_LOCAL_RANK='{local_rank}': expected one of 1, 2 for container "
            "a1002 (role 'a100', index 2): Backend.AI gives its index - 1 plus the summed "
            "counts of the role groups the session's request listed before its role, in any "
            "order (other groups: main:1)"
        )


def test_hosts_not_in_role_index_form(sub2: dict[str, str]) -> None:
    environ = {**sub2, HOSTS: "10.0.0.1,main1,sub2", REPLICAS: ""}
    assert error_of(environ) == (
        "BACKENDAI_CLUSTER_HOSTS='10.0.0.1,main1,sub2': expected every entry in Backend.AI's "
        "{role}{index} form (main1, sub2) so that every container computes the same node "
        "order; '10.0.0.1' is not"
    )


def test_hosts_same_role_and_index_without_replicas(sub2: dict[str, str]) -> None:
    assert error_of({**sub2, HOSTS: "sub01,main1,sub1", HOST: "sub1", IDX: "1",
                     LOCAL_RANK: "", REPLICAS: ""}) == (
        "BACKENDAI_CLUSTER_HOSTS='sub01,main1,sub1': expected one host per role and index; "
        "'sub01' and 'sub1' are both sub #1"
    )


@pytest.mark.parametrize("hosts", ["main1,sub0", "main0,sub1"])
def test_hosts_index_zero_is_a_topology_error(hosts: str) -> None:
    """Backend.AI indices are 1-based; ``sub0`` must be a TopologyError, not a traceback."""
    with pytest.raises(TopologyError) as info:
        topology({SIZE: "2", HOSTS: hosts, HOST: "sub1" if "sub1" in hosts
                            else "main1"})
    assert str(info.value).startswith(f"BACKENDAI_CLUSTER_HOSTS={hosts!r}: expected ")


def test_the_order_names_the_variables_the_source_reads() -> None:
    """backendai_order imports no source module: its names are the Backend.AI source's."""
    from derive_env.sources.managers import backendai, backendai_order

    assert (backendai_order.HOSTS, backendai_order.REPLICAS, backendai_order.MAIN) == (
        backendai.HOSTS, backendai.REPLICAS, backendai.MAIN)
    assert "derive_env.sources.managers.backendai" not in backendai_order.__dict__.values()
    assert not any(getattr(value, "__module__", "") == "derive_env.sources.managers.backendai"
                   for value in vars(backendai_order).values())


# --- without REPLICAS: names that a role ending in digits numbers (HOSTS alone decides) ----

CONTAINERS = [("a11", "a1", "1", "0"), ("a1", "a", "1", "1"), ("a2", "a", "2", "2")]


@pytest.mark.parametrize(("host", "role", "idx", "local_rank"), CONTAINERS)
def test_a_role_ending_in_a_digit_numbers_hosts_alike_in_every_container(
        host: str, role: str, idx: str, local_rank: str) -> None:
    """Roles a1 x1 and a x2 (the request listing a1 first): HOSTS a11,a1,a2 numbers the
    roles from 1 in one way only, a:2 (a1, a2) and a1:1 (a11), which every container finds
    from HOSTS alone; each starts, in one order, its own ROLE, IDX and LOCAL_RANK accepted."""
    from support.dry_run import dry_run

    rank = ["a1", "a2", "a11"].index(host)
    status, out, err = dry_run([
        "BACKENDAI_CLUSTER_SIZE=3", "BACKENDAI_CLUSTER_HOSTS=a11,a1,a2",
        f"BACKENDAI_CLUSTER_HOST={host}", f"BACKENDAI_CLUSTER_ROLE={role}",
        f"BACKENDAI_CLUSTER_IDX={idx}", f"BACKENDAI_CLUSTER_LOCAL_RANK={local_rank}"])
    assert (status, err) == (0, "")
    assert out.splitlines()[:5] == ["MASTER_ADDR=a1", "MASTER_PORT=29500", f"NODE_RANK={rank}",
                                    "PET_NNODES=3", f"PET_NODE_RANK={rank}"]


def test_the_numbering_found_gives_the_role_groups() -> None:
    topo = topology({SIZE: "3", HOSTS: "a11,a1,a2", HOST: "a11"})
    assert [(n.host, n.role, n.index) for n in topo.nodes] == [
        ("a1", "a", 1), ("a2", "a", 2), ("a11", "a1", 1)]
    assert error_of({SIZE: "3", HOSTS: "a11,a1,a2", HOST: "a1", LOCAL_RANK: "2"}) == (
        "BACKENDAI_CLUSTER_LOCAL_RANK='2': expected one of 0, 1 for container a1 (role 'a', "
        "index 1): Backend.AI gives its index - 1 plus the summed counts of the role groups the "
        "session's request listed before its role, in any order (other groups: a1:1)")


@pytest.mark.parametrize(("local_rank", "status"), [("0", 0), ("1", 3), ("2", 3), ("3", 0)])
def test_a_host_only_a_role_ending_in_a_digit_numbers(local_rank: str, status: int) -> None:
    """main2,main1,a11,main3: a11 is role a1 #1 (a #11 would need a1 to a10), so Backend.AI
    gives it LOCAL_RANK 0 (a1's group listed first) or 3 (after main's 3), never 1 or 2."""
    from support.dry_run import dry_run

    got = dry_run(["BACKENDAI_CLUSTER_SIZE=4", "BACKENDAI_CLUSTER_HOSTS=main2,main1,a11,main3",
                   "BACKENDAI_CLUSTER_HOST=a11", f"BACKENDAI_CLUSTER_LOCAL_RANK={local_rank}"])
    if status == 0:
        assert (got[0], got[2]) == (0, "")
        assert "NODE_RANK=3\nPET_NNODES=4\n" in got[1]
        return
    assert got == (3, "", (
        f"derive-env: error: BACKENDAI_CLUSTER_LOCAL_RANK='{local_rank}': expected one of 0, 3 "
        "for container a11 (role 'a1', index 1): Backend.AI gives its index - 1 plus the summed "
        "counts of the role groups the session's request listed before its role, in any order "
        "(other groups: main:3)\n"))


def test_two_containers_a_host_of_a_role_ending_in_a_digit() -> None:
    from support.dry_run import dry_run

    status, out, err = dry_run(["BACKENDAI_CLUSTER_SIZE=2", "BACKENDAI_CLUSTER_HOSTS=main1,a11",
                                "BACKENDAI_CLUSTER_HOST=a11", "BACKENDAI_CLUSTER_LOCAL_RANK=0"])
    assert (status, err) == (0, "")
    assert "NODE_RANK=1\n" in out


NUMBERED = ("expected host names that number each role's hosts {role}1 to {role}{count} in "
            "exactly one way (a role may end in digits: a11 is a #11 or a1 #1); ")
SET_REPLICAS = (": set BACKENDAI_CLUSTER_REPLICAS (role:count pairs, as Backend.AI sets it) so "
                "that every container computes the same node order")


@pytest.mark.parametrize(("hosts", "names", "fit"), [
    ("main1,sub2,sub3", "sub2, sub3", "no"),
    ("main1,a1,a2,a3,a11,a12,a13,a14,a15,a16,a17,a18,a19,a110,a111",
     "a1, a2, a3, a11, a12, a13, a14, a15, ... (14 in all)", "more than one"),
])
def test_names_that_fit_no_numbering_or_several_stop_every_container(
        hosts: str, names: str, fit: str) -> None:
    """Decided from HOSTS alone: every container refuses alike, whatever its own ROLE."""
    size = str(len(hosts.split(",")))
    for host in hosts.split(","):
        assert error_of({SIZE: size, HOSTS: hosts, HOST: host}) == (
            f"BACKENDAI_CLUSTER_HOSTS={hosts!r}: {NUMBERED}{names} fit {fit} way{SET_REPLICAS}")


def test_twelve_hosts_of_one_role_keep_their_order_and_any_local_rank_in_range() -> None:
    """sub1..sub12 may be sub x12 or sub x10 + sub1 x2 (one order): the groups are unknown,
    so LOCAL_RANK is only checked against the session's size."""
    hosts = ",".join(["main1"] + [f"sub{i}" for i in range(1, 13)])
    topo = topology({SIZE: "13", HOSTS: hosts, HOST: "sub12", LOCAL_RANK: "1"})
    assert (hosts_of(topo)[-3:], topo.node_rank) == (["sub10", "sub11", "sub12"], 12)
    assert error_of({SIZE: "13", HOSTS: hosts, HOST: "sub12", LOCAL_RANK: "13"}).startswith(
        "BACKENDAI_CLUSTER_LOCAL_RANK='13': expected one of 0, 1, 2, 3, 4, 5, 6, 7, ... (13 in "
        "all) for container sub12 (role 'sub', index 12): a position among the 13 containers")
