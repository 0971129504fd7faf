"""The HTCondor parallel-universe source (its roles, sources/roles.py): node number and count
only.

No HTCondor pool runs here (no Debian 12 package): each node's variables are TYPED from
htcondor/htcondor ``src/condor_starter.V6.1/parallel_proc.cpp`` (``ParallelProc``:
``_CONDOR_PROCNO`` = the node number, ``_CONDOR_NPROCS`` = the job ad's ``CurrentHosts``,
``_CONDOR_REMOTE_SPOOL_DIR`` = the job's spool directory on the submit side) and the
starter's ``_CONDOR_SCRATCH_DIR`` / ``_CONDOR_SLOT``.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.digest import digest_of, facts_of
from derive_env.errors import TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.sources import BY_NAME, roles, seen_sources
from derive_env.sources.compose import topology_from
from derive_env.sources.report import Report
from support.jobs import CONDOR_SPOOL as SPOOL
from support.jobs import htcondor_node as node

LABELS = {PREFIX + "frameworks": "pytorch,jax"}


def test_a_node_exactly() -> None:
    env = node(1, 3)
    assert [line.name for line in seen_sources(env)] == ["htcondor"]
    assert roles.read(env, BY_NAME["htcondor"]) == Report(
        source="htcondor", title="an HTCondor parallel-universe job", num_nodes=3, node_rank=1,
        job=("htcondor", SPOOL, ""), session_id=SPOOL,
        inputs={"num_nodes": ("_CONDOR_NPROCS",), "node_rank": ("_CONDOR_PROCNO",),
                "ports": ("_CONDOR_REMOTE_SPOOL_DIR",)},
        notes=("node 1 of 3 (_CONDOR_PROCNO, _CONDOR_NPROCS); HTCondor states no host list: "
               "the master is node 0's address, from MASTER_ADDR",))


def test_without_master_addr_the_fix_is_named() -> None:
    with pytest.raises(TopologyError) as caught:
        derive(node(1, 3), LABELS)
    assert str(caught.value) == (
        "MASTER_ADDR='': expected the host of rank 0 (it also gives JAX's coordinator): an "
        "HTCondor parallel-universe job states no host list, so the host of rank 0 is "
        "unknown: set MASTER_ADDR to it (the same value for every process, e.g. export "
        "MASTER_ADDR=<host of rank 0> in every node's wrapper (node 0 can publish it with "
        "condor_chirp set_job_attr)), or run the launcher inside a job whose manager states "
        "the hosts (Slurm, PBS, LSF, Grid Engine)")


def test_a_job_of_one_node_is_a_single_node() -> None:
    topology = topology_from(node(0, 1))
    assert (topology.num_nodes, topology.node_rank, topology.multi_node) == (1, 0, False)


def test_a_number_beyond_the_count_is_refused() -> None:
    with pytest.raises(TopologyError) as caught:
        roles.read(node(3, 3), BY_NAME["htcondor"])
    assert str(caught.value) == (
        "_CONDOR_PROCNO='3': expected a node rank below _CONDOR_NPROCS='3': the starter sets "
        "both for one node (parallel_proc.cpp), so one was set by hand: unset it")


@settings(max_examples=60, deadline=None)
@given(count=st.integers(2, 64))
def test_every_node_of_a_job_derives_one_job(count: int) -> None:
    derivations = [derive({**node(n, count), "MASTER_ADDR": "10.1.0.5"}, LABELS)
                   for n in range(count)]
    assert all(d is not None for d in derivations)
    changes = [d.changes() for d in derivations]
    assert "MASTER_ADDR" not in changes[0]  # the user's, kept
    assert len({c["JAX_COORDINATOR_ADDRESS"] for c in changes}) == 1
    assert changes[0]["JAX_COORDINATOR_ADDRESS"].startswith("10.1.0.5:")
    assert len({c["MASTER_PORT"] for c in changes}) == 1
    assert [c["NODE_RANK"] for c in changes] == [str(n) for n in range(count)]
    assert len({digest_of(facts_of(d.topology, d)) for d in derivations}) == 1


@settings(max_examples=60, deadline=None)
@given(count=st.integers(2, 64), data=st.data())
def test_no_job_of_several_nodes_derives_one_node(count: int, data: st.DataObject) -> None:
    try:
        derivation = derive(node(data.draw(st.integers(0, count - 1)), count), LABELS)
    except TopologyError as exc:
        assert exc.exit_code == 3
        return
    assert derivation is not None and derivation.topology.multi_node
