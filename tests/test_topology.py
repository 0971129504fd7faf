"""ClusterTopology, ProcessLayout and Node (derive_env.topology)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from derive_env.topology import (
    SINGLE_NODE_MASTER,
    ClusterTopology,
    Node,
    ProcessLayout,
    nodes_of,
    single_node_topology,
)


def nodes(*hosts: str) -> tuple[Node, ...]:
    return tuple(Node(host=h) for h in hosts)


def test_master_is_node_rank_zero_not_own_node() -> None:
    topo = ClusterTopology(source="test", nodes=nodes("main1", "sub1", "sub2"), node_rank=2)
    assert topo.master_addr == "main1"
    assert topo.num_nodes == 3
    assert topo.this_node == Node(host="sub2")


def test_single_node_master_is_loopback() -> None:
    topo = ClusterTopology(source="test", nodes=nodes("main1"), node_rank=0)
    assert SINGLE_NODE_MASTER == "127.0.0.1"
    assert topo.master_addr == "127.0.0.1"


def test_single_node_topology_defaults() -> None:
    topo = single_node_topology()
    assert topo.source == "standalone"
    assert topo.nodes == (Node(host="localhost"),)
    assert topo.node_rank == 0
    assert topo.master_addr == "127.0.0.1"
    assert (topo.gpus_per_node, topo.master_port, topo.session_id, topo.processes) == (
        None, None, None, None)


def test_ipv6_master_stays_bare() -> None:
    topo = ClusterTopology(source="test", nodes=nodes("2001:db8::1", "2001:db8::2"), node_rank=1)
    assert topo.master_addr == "2001:db8::1"


def test_node_rank_outside_nodes_is_rejected() -> None:
    with pytest.raises(ValidationError, match="node rank 3 is outside 3 nodes"):
        ClusterTopology(source="test", nodes=nodes("main1", "sub1", "sub2"), node_rank=3)


def test_negative_node_rank_is_rejected() -> None:
    with pytest.raises(ValidationError):
        ClusterTopology(source="test", nodes=nodes("main1"), node_rank=-1)


def test_no_host_list_is_a_partial_topology() -> None:
    """No host list (an MPI launcher over SSH): allowed, the master is then unknown."""
    topo = ClusterTopology(source="test", nodes=(), node_rank=None, node_count=2)
    assert (topo.num_nodes, topo.multi_node, topo.master_addr, topo.this_node) == (
        2, True, None, None)
    with pytest.raises(ValidationError, match="node rank 2 is outside 2 nodes"):
        ClusterTopology(source="test", nodes=(), node_rank=2, node_count=2)


def test_duplicate_hosts_are_rejected_case_insensitively() -> None:
    with pytest.raises(ValidationError, match="host SUB1 appears twice"):
        ClusterTopology(source="test", nodes=nodes("main1", "sub1", "SUB1"), node_rank=0)


@pytest.mark.parametrize("port", [0, 65536])
def test_master_port_range(port: int) -> None:
    with pytest.raises(ValidationError):
        ClusterTopology(source="test", nodes=nodes("main1"), node_rank=0, master_port=port)


def test_topology_is_frozen() -> None:
    topo = single_node_topology()
    with pytest.raises(ValidationError):
        topo.node_rank = 1  # type: ignore[misc]


def test_inputs_of_joins_variable_names() -> None:
    topo = ClusterTopology(
        source="test", nodes=nodes("main1", "sub1"), node_rank=0,
        inputs={"nodes": ("A", "B"), "gpus": ("GPU_COUNT",)},
    )
    assert topo.inputs_of("nodes") == "A + B"
    assert topo.inputs_of("gpus") == "GPU_COUNT"
    assert topo.inputs_of("master_port") == "(none)"


def test_node_index_is_one_based() -> None:
    assert Node(host="sub1", role="sub", index=1).index == 1
    with pytest.raises(ValidationError, match="node indices are 1-based"):
        ClusterTopology(source="test", nodes=(Node(host="sub0", role="sub", index=0),),
                        node_rank=0)


def test_process_layout_ranks_in_range() -> None:
    layout = ProcessLayout(rank=5, local_rank=1, world_size=8, local_world_size=2)
    assert (layout.rank, layout.local_rank) == (5, 1)
    with pytest.raises(ValidationError, match="rank and local rank must be below"):
        ProcessLayout(rank=8, local_rank=0, world_size=8, local_world_size=2)
    with pytest.raises(ValidationError, match="rank and local rank must be below"):
        ProcessLayout(rank=0, local_rank=2, world_size=8, local_world_size=2)


def test_nodes_of_builds_the_same_nodes_as_node() -> None:
    """One builder for the sources' host lists: equal to ``Node(...)``, with or without
    roles and indices."""
    assert nodes_of(["a1", "b2"]) == (Node("a1"), Node("b2"))
    assert nodes_of(("main1", "sub1"), ["main", "sub"], [1, 1]) == (
        Node("main1", "main", 1), Node("sub1", "sub", 1))
    assert all(type(node) is Node for node in nodes_of([f"n{i}" for i in range(4096)]))
    assert nodes_of([]) == ()
    with pytest.raises(ValueError):
        nodes_of(["a1", "b2"], ["a"], [1])


def test_processes_of_other_nodes_in_a_job_of_one_node_are_rejected() -> None:
    """A host list of one node under ranks of two nodes (a PBS node file of one host,
    mpirun -np 2 -npernode 1: the adversarial trial): never a single container."""
    layout = ProcessLayout(rank=1, local_rank=0, world_size=2, local_world_size=1)
    with pytest.raises(ValidationError, match="a job of 1 node holds 2 processes, but only 1 "
                                              "run on this node"):
        ClusterTopology(source="pbs", nodes=nodes_of(["n1"]), node_rank=0, processes=layout)
    alone = ProcessLayout(rank=1, local_rank=1, world_size=2, local_world_size=2)
    assert ClusterTopology(source="pbs", nodes=nodes_of(["n1"]), node_rank=0,
                           processes=alone).num_nodes == 1
