"""Slurm's consistency rules (sources/managers/slurm.py), shared by the step and allocation
lines.

The job id and its old name, the refusal of a heterogeneous job, host lists (expanded and
every host checked), the step's node and task variables against each other and the job's,
Slurm's own MPI plugins' variables and ``SLURM_GPUS_ON_NODE``: exact messages, through the
Slurm source's ``read`` on environments recorded from real Slurm 22.05 (the helpers are in
tests/support/slurm.py).
"""

from __future__ import annotations

import pytest

from derive_env.sources import seen_sources
from derive_env.topology import Node
from support.slurm import N10, alloc, block, extra, raises, step, tasks

# -- the job id and heterogeneous jobs ---------------------------------------------------------


def test_job_id_and_its_old_name_disagree() -> None:
    env = block()
    env["SLURM_JOBID"] = "7"
    assert raises(env) == (
        "SLURM_JOBID='7': expected the same job id as SLURM_JOB_ID='1' (Slurm sets both from "
        "one value); one of them was inherited from another job or set by hand: unset the "
        "stale one")
    assert raises(env, "slurm-allocation").startswith("SLURM_JOBID='7'")


def test_group_zero_of_an_ordinary_step_is_not_heterogeneous() -> None:
    env = dict(tasks("sbatch-3node")["step-task1"][1])
    assert env["SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0"] == "1(x3)"  # recorded, not het
    assert step(env).node_rank == 1


# -- host lists, and a step's nodes against its job's ------------------------------------------


@pytest.mark.parametrize(("nodelist", "message"), [
    ("10.0.0.[254-256]", "SLURM_JOB_NODELIST='10.0.0.[254-256]': expected a host name or an "
     "IPv4 address (four numbers 0-255), not '10.0.0.256'"),
    ("fe80::[1-2]", "SLURM_JOB_NODELIST='fe80::[1-2]': expected a host name or a routable IP "
     "address; a link-local IPv6 address needs a zone, which cannot be carried in host:port "
     "values, not 'fe80::1'"),
    ("n[1-2],m[1-2]-,x", "SLURM_JOB_NODELIST='n[1-2],m[1-2]-,x': expected a host name "
     "(letters, digits, '-' and '.') or an IP address, not 'm1-'"),
])
def test_every_host_is_checked_also_in_large_lists(nodelist: str, message: str) -> None:
    env = dict(tasks("sbatch-3node")["batch"][1])
    env["SLURM_JOB_NODELIST"] = nodelist
    assert raises(env, "slurm-allocation") == message


def test_addresses_are_hosts_too() -> None:
    env = dict(tasks("salloc-shell")["shell"][1])
    env["SLURM_JOB_NODELIST"] = "10.0.0.[8-9]"
    assert alloc(env).nodes == (Node("10.0.0.8"), Node("10.0.0.9"))


def test_a_node_listed_twice_in_another_case_is_refused() -> None:
    """Host names compare as DNS compares them (hosts.repeated_host, the one rule of every
    source and of ClusterTopology): gpu-a100-09 and GPU-A100-09 are one node twice."""
    env = block()
    del env["SLURM_JOB_NODELIST"]
    env["SLURM_STEP_NODELIST"] = "gpu-a100-09,GPU-A100-09,gpu-a100-10"
    assert raises(env) == (
        "SLURM_STEP_NODELIST='gpu-a100-09,GPU-A100-09,gpu-a100-10': expected every node once "
        "(Slurm never lists a node twice), not 'GPU-A100-09' twice")


def test_step_variables_inherited_from_another_job() -> None:
    env = block()
    env["SLURM_JOB_NODELIST"] = "gpu-a100-[20-22]"
    assert raises(env) == (
        "SLURM_STEP_NODELIST='gpu-a100-[09-11]': expected nodes of this job's "
        "SLURM_JOB_NODELIST='gpu-a100-[20-22]', not 'gpu-a100-09': the step variables were "
        "inherited from another job (a job submitted from inside a step); unset SLURM_STEP_* "
        "before sbatch/salloc, or submit with --export=NONE")


def test_a_job_submitted_from_a_step_keeps_that_steps_variables() -> None:
    # Recorded (tests/data/slurm-extra/README.md): job 2's batch script, on gpu-a100-10.
    ran_on, env = extra("inherited-batch")
    assert ran_on == N10 and env["SLURM_JOB_ID"] == "2"
    assert [s.name for s in seen_sources(env)] == ["slurm-step", "slurm-allocation"]
    message = (
        "SLURM_STEP_NODELIST='gpu-a100-[09-10]': expected nodes of this job's "
        "SLURM_JOB_NODELIST='gpu-a100-10', not 'gpu-a100-09': the step variables were "
        "inherited from another job (a job submitted from inside a step); unset SLURM_STEP_* "
        "before sbatch/salloc, or submit with --export=NONE")
    assert raises(env) == message
    assert raises(env, "slurm-allocation") == message


# -- the step's nodes and tasks, GPUs on the node: exact messages ------------------------------


@pytest.mark.parametrize(("var", "value", "message"), [
    ("SLURM_STEP_NUM_NODES", "2",
     "SLURM_STEP_NUM_NODES='2': expected the number of nodes in SLURM_STEP_NODELIST="
     "'gpu-a100-[09-11]' (3); srun writes both for one step (src/common/env.c "
     "env_array_for_step), so one was set by hand or inherited"),
    ("SLURM_STEP_TASKS_PER_NODE", "2(x2)",
     "SLURM_STEP_TASKS_PER_NODE='2(x2)': expected one task count per node of the step, "
     "SLURM_STEP_NUM_NODES=3, not 2"),
    ("SLURM_STEP_TASKS_PER_NODE", "2,2,1",
     "SLURM_STEP_TASKS_PER_NODE='2,2,1': expected task counts adding up to "
     "SLURM_STEP_NUM_TASKS=6, not 5"),
    ("SLURM_STEP_TASKS_PER_NODE", "2(x0)",
     "SLURM_STEP_TASKS_PER_NODE='2(x0)': expected items N or N(xK) with K >= 1, not '2(x0)'"),
    ("SLURM_PROCID", "6", "SLURM_PROCID='6': expected a rank below SLURM_STEP_NUM_TASKS=6"),
    ("SLURM_PROCID", "-1", "SLURM_PROCID='-1': expected an integer >= 0"),
    ("SLURM_NODEID", "3", "SLURM_NODEID='3': expected a node index below "
     "SLURM_STEP_NUM_NODES=3"),
    ("SLURM_LOCALID", "2", "SLURM_LOCALID='2': expected a local rank below 2, the task count "
     "of node SLURM_NODEID=1 in SLURM_STEP_TASKS_PER_NODE='2(x3)'"),
    ("SLURM_STEP_NODELIST", "gpu-a100-[11-09]",
     "SLURM_STEP_NODELIST='gpu-a100-[11-09]': expected a range lo-hi with lo <= hi, "
     "not '11-09'"),
    ("SLURM_STEP_NODELIST", "gpu-a100-09,gpu-a100-09,gpu-a100-10",
     "SLURM_STEP_NODELIST='gpu-a100-09,gpu-a100-09,gpu-a100-10': expected every node once "
     "(Slurm never lists a node twice), not 'gpu-a100-09' twice"),
    ("SLURM_STEP_NODELIST", "n_1,n2,n3",
     "SLURM_STEP_NODELIST='n_1,n2,n3': expected a host name (letters, digits, '-' and '.') "
     "or an IP address, not 'n_1'"),
    ("SLURM_GPUS_ON_NODE", "a100:4", "SLURM_GPUS_ON_NODE='a100:4': expected an integer >= 0"),
    ("SLURM_HET_SIZE", "2",
     "SLURM_HET_SIZE='2': expected unset: this is a heterogeneous Slurm job (srun ... : ..., "
     "#SBATCH hetjob), whose ranks and node lists span its components, and derive-env does "
     "not read those yet; run one homogeneous step per derive-env (srun --het-group=0 "
     "derive-env -- ...), or set the framework variables yourself"),
    ("SLURM_JOB_NODELIST_HET_GROUP_1", "gpu-a100-11", "SLURM_JOB_NODELIST_HET_GROUP_1="),
])
def test_malformed_step_values(var: str, value: str, message: str) -> None:
    env = block()
    env[var] = value
    if var == "SLURM_STEP_NODELIST":
        del env["SLURM_JOB_NODELIST"]  # checked on its own: the step's list is named
    if message.endswith("="):
        assert raises(env).startswith(message)
    else:
        assert raises(env) == message


def test_integers_are_read_by_the_shared_reader() -> None:
    """validation.variable_int, as every source reads integers: at most 18 digits."""
    env = block()
    env["SLURM_PROCID"] = "1" * 19
    assert raises(env) == (
        f"SLURM_PROCID='{'1' * 19}': expected an integer >= 0 of at most 18 digits")


def test_world_size_never_from_the_jobs_task_count() -> None:
    env = block()
    env.update(SLURM_NTASKS="12", SLURM_NPROCS="12")  # srun -E keeps the job's values
    assert step(env).processes.world_size == 6


# -- Slurm's own MPI plugins -------------------------------------------------------------------


@pytest.mark.parametrize(("var", "value", "message"), [
    ("PMI_RANK", "3", "PMI_RANK='3': expected 2, as SLURM_PROCID='2': both are Slurm's own "
     "for this step, so one was set by hand or inherited"),
    ("PMI_SIZE", "5", "PMI_SIZE='5': expected 6, as SLURM_STEP_NUM_TASKS='6': both are "
     "Slurm's own for this step, so one was set by hand or inherited"),
])
def test_pmi2_variables_of_this_step_must_agree(var: str, value: str, message: str) -> None:
    env = dict(tasks("srun-pmi2")["task2"][1])
    env[var] = value
    assert raises(env) == message
    env["PMI_JOBID"] = "9.1"  # another step's (a launcher inside): not Slurm's for this one
    assert step(env).processes.rank == 2


def test_pmix_and_pals_of_this_step_must_agree() -> None:
    env = dict(tasks("srun-pmix")["task2"][1])
    env["PMIX_RANK"] = "0"
    assert raises(env).startswith("PMIX_RANK='0': expected 2, as SLURM_PROCID='2'")
    env = dict(tasks("srun-cray-shasta")["task2"][1])
    assert env["PALS_APID"] == "15.0"  # recorded: <job>.<step>
    env["PALS_NODEID"] = "0"
    assert raises(env).startswith("PALS_NODEID='0': expected 1, as SLURM_NODEID='1'")
