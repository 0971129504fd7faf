"""Counts with a bound (validation.at_most, MAX_PER_NODE; sources/lists.py MAX_COUNTED_NODES).

Before: ``N_GPUS=4294967296`` with ``--frameworks jax`` was a MemoryError traceback
(``list(range(visible))``), ``N_GPUS=10000000`` gave ``PET_NPROC_PER_NODE=10000000``, the
``nproc-per-node`` label took 4294967296, and ``_CONDOR_NPROCS=999999999999999`` and
``MEGASCALE_NUM_SLICES=99999999999`` were node counts.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derive_env.errors import DeriveEnvError, LabelError, TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.validation import MAX_PER_NODE

PER_NODE = ("GPUs or processes on a node (no node has more GPUs; a larger count is a "
            "corrupted value)")
NODES = "nodes (the largest job a manager is known to name: Slurm's MAX_SLURM_NODES)"

#: A Backend.AI session of two containers, seen from the main one.
BACKENDAI = {"BACKENDAI_CLUSTER_SIZE": "2", "BACKENDAI_CLUSTER_HOSTS": "main1,sub1",
             "BACKENDAI_CLUSTER_HOST": "main1", "BACKENDAI_CLUSTER_ROLE": "main",
             "BACKENDAI_CLUSTER_IDX": "1", "BACKENDAI_SESSION_ID": "s1"}
ONLY_HERE = (" (set for container main1 only: it stops alone while the other containers of "
             "the session may start and wait for it)")
SLURM = {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "a[1-2]", "SLURM_JOB_NUM_NODES": "2",
         "SLURM_NODEID": "0", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "a[1-2]",
         "SLURM_STEP_NUM_NODES": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "2",
         "SLURM_LOCALID": "0", "SLURM_STEP_NUM_TASKS": "2",
         "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURMD_NODENAME": "a1"}
CONDOR = {"_CONDOR_PROCNO": "0", "MASTER_ADDR": "h0"}
TPU = {"TPU_WORKER_ID": "0", "TPU_WORKER_HOSTNAMES": "t0,t1", "MEGASCALE_SLICE_ID": "0",
       "MEGASCALE_COORDINATOR_ADDRESS": "t0"}


def values(env: dict[str, str], frameworks: str = "pytorch",
           **labels: str) -> dict[str, str]:
    derivation = derive(env, {PREFIX + "frameworks": frameworks,
                              **{PREFIX + k.replace("_", "-"): v for k, v in labels.items()}})
    assert derivation is not None
    return {v.name: v.value for v in derivation.variables}


@pytest.mark.parametrize("frameworks", ["jax", "pytorch"])
def test_a_backendai_gpu_count_past_the_bound_is_refused(frameworks: str) -> None:
    with pytest.raises(TopologyError) as info:
        values({**BACKENDAI, "N_GPUS": "4294967296"}, frameworks)
    assert str(info.value) == f"N_GPUS='4294967296': expected at most 1024 {PER_NODE}{ONLY_HERE}"
    assert info.value.exit_code == 3


def test_the_bound_itself_is_a_gpu_count() -> None:
    assert values({**BACKENDAI, "GPU_COUNT": str(MAX_PER_NODE)})["PET_NPROC_PER_NODE"] == "1024"
    with pytest.raises(TopologyError) as info:
        values({**BACKENDAI, "GPU_COUNT": "1025"})
    assert str(info.value) == f"GPU_COUNT='1025': expected at most 1024 {PER_NODE}{ONLY_HERE}"


def test_slurm_gpus_on_node_past_the_bound() -> None:
    with pytest.raises(TopologyError) as info:
        values({**SLURM, "SLURM_GPUS_ON_NODE": "10000000"})
    assert str(info.value) == f"SLURM_GPUS_ON_NODE='10000000': expected at most 1024 {PER_NODE}"


def test_the_nproc_per_node_label_past_the_bound_is_a_label_error() -> None:
    with pytest.raises(LabelError) as info:
        values(BACKENDAI, nproc_per_node="4294967296")
    assert str(info.value) == (f"label {PREFIX}nproc-per-node='4294967296': expected at most "
                               f"1024 {PER_NODE}")
    assert info.value.exit_code == 4
    assert values(BACKENDAI, nproc_per_node="1024")["PET_NPROC_PER_NODE"] == "1024"


def test_htcondors_node_count_past_the_bound() -> None:
    with pytest.raises(TopologyError) as info:
        values({**CONDOR, "_CONDOR_NPROCS": "999999999999999"})
    assert str(info.value) == (
        f"_CONDOR_NPROCS='999999999999999': expected at most 65536 {NODES}; the starter sets "
        "both for one node (parallel_proc.cpp), so one was set by hand: unset it")
    assert values({**CONDOR, "_CONDOR_NPROCS": "65536"})["PET_NNODES"] == "65536"


def test_tpu_slices_past_the_bound() -> None:
    with pytest.raises(TopologyError) as info:
        values({**TPU, "MEGASCALE_NUM_SLICES": "99999999999"}, "jax")
    assert str(info.value) == (f"MEGASCALE_NUM_SLICES='99999999999': expected at most 65536 "
                               f"slices (each of one host or more; {NODES})")



def test_tpu_slices_times_their_hosts_past_the_bound() -> None:
    """Each slice within the bound, the job's hosts (slices x hosts per slice) not."""
    with pytest.raises(TopologyError) as info:
        values({**TPU, "MEGASCALE_NUM_SLICES": "32769"}, "jax")
    assert str(info.value) == ("MEGASCALE_NUM_SLICES='32769': expected at most 32768 slices "
                               f"of 2 hosts (TPU_WORKER_HOSTNAMES): at most 65536 {NODES}")
    assert values({**TPU, "MEGASCALE_NUM_SLICES": "32768"}, "jax")


COUNTS = st.integers(0, 2**70) | st.sampled_from(
    [0, 1, 1023, 1024, 1025, 65536, 65537, 2**31, 2**32, 2**63, 10**18, 10**19])
CASES = [(BACKENDAI, "N_GPUS"), (BACKENDAI, "GPU_COUNT"), (SLURM, "SLURM_GPUS_ON_NODE"),
         (CONDOR, "_CONDOR_NPROCS"), (TPU, "MEGASCALE_NUM_SLICES")]


@settings(max_examples=150, deadline=None)
@given(case=st.sampled_from(CASES), count=COUNTS, frameworks=st.sampled_from(["jax", "pytorch"]),
       label=st.none() | COUNTS)
def test_no_integer_in_a_count_is_a_traceback(case: tuple[dict[str, str], str], count: int,
                                              frameworks: str, label: int | None) -> None:
    """Any integer: derived (within the bounds) or refused with an exit code, no other
    exception (MemoryError, OverflowError)."""
    env, name = case
    extra = {} if label is None else {"nproc_per_node": str(label)}
    try:
        got = values({**env, name: str(count)}, frameworks, **extra)
    except DeriveEnvError as exc:
        assert exc.exit_code in (3, 4)
        return
    if "PET_NPROC_PER_NODE" in got:
        assert int(got["PET_NPROC_PER_NODE"]) <= MAX_PER_NODE
    if "PET_NNODES" in got:
        assert int(got["PET_NNODES"]) <= 65536
