"""The Slurm source (sources/managers/slurm.py) on environments recorded from real Slurm 22.05.

Exact facts for every task of every Slurm recording (tests/fixtures/recorded, README there),
checked against the node each task really ran on; exact messages for malformed and
misleading input; two hypothesis properties over a model of Slurm's task layout, the model
itself checked against the recordings of the same layouts.

The consistency rules both lines share (job id, heterogeneous jobs, host lists, the step's
nodes and tasks, MPI plugins, GPUs) are tested in test_slurm_checks.py; the
builders and the model both use are in tests/support/slurm.py.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from derive_env.errors import TopologyError
from derive_env.hosts import host_problem
from derive_env.sources import BY_NAME, seen_sources
from derive_env.sources.managers import slurm, slurm_hostlist
from derive_env.sources.managers.slurm_hostlist import expand_hostlist
from derive_env.sources.report import Processes
from derive_env.topology import Node
from support.slurm import (
    ALL3,
    HOSTFILE,
    HOSTFILE_TEXT,
    N09,
    N10,
    N11,
    alloc,
    block,
    extra,
    job_envs,
    mpi_in_allocation,
    raises,
    slurm_jobs,
    step,
    tasks,
)

# -- every task of every recording -------------------------------------------------------------

#: scenario -> task -> (SLURM_NODEID, Processes without tasks_per_node, problem?), literal
#: from the recordings (the daemon steps of mpirun/mpiexec are shown as Slurm states them).
STEP_FACTS = {
    "srun-block": {f"task{r}": (r // 2, (r, r % 2, 6, 2), False) for r in range(6)},
    "srun-cyclic": {"task0": (0, (0, 0, 6, 2), False), "task1": (1, (1, 0, 6, 2), False),
                    "task2": (2, (2, 0, 6, 2), False), "task3": (0, (3, 1, 6, 2), False),
                    "task4": (1, (4, 1, 6, 2), False), "task5": (2, (5, 1, 6, 2), False)},
    "srun-uneven": {"task0": (0, (0, 0, 5, 3), False), "task1": (0, (1, 1, 5, 3), False),
                    "task2": (0, (2, 2, 5, 3), False), "task3": (1, (3, 0, 5, 1), False),
                    "task4": (2, (4, 0, 5, 1), False)},
    "srun-arbitrary": {"task0": (2, (0, 0, 4, 2), False), "task1": (0, (1, 0, 4, 1), False),
                       "task2": (1, (2, 0, 4, 1), False), "task3": (2, (3, 1, 4, 2), False)},
    "srun-pmi2": {f"task{r}": (r // 2, (r, r % 2, 6, 2), False) for r in range(6)},
    "srun-pmix": {f"task{r}": (r // 2, (r, r % 2, 6, 2), False) for r in range(6)},
    "srun-cray-shasta": {f"task{r}": (r // 2, (r, r % 2, 6, 2), False) for r in range(6)},
    "srun-pty": {"task0": (0, (0, 0, 1, 1), False)},
    "sbatch-3node": {f"step-task{r}": (r, (r, 0, 3, 1), False) for r in range(3)},
    # mpirun's orted step: one task per node.
    "ompi-in-salloc": {f"rank{r}": (r // 2, (r // 2, 0, 3, 1), False) for r in range(6)},
    "ompi-in-sbatch": {f"rank{r}": (r // 2 - 1, (r // 2 - 1, 0, 2, 1), False)
                       for r in range(2, 6)},
    "mpich-in-salloc": {f"rank{r}": (r // 2, (r // 2, 0, 3, 1), False) for r in range(6)},
    # Hydra copied mpiexec's SLURMD_NODENAME and SLURM_GTIDS: a problem off the batch node.
    "mpich-in-sbatch": {f"rank{r}": (r // 2, (r // 2, 0, 3, 1), r >= 2) for r in range(6)},
}
TPN = {"srun-uneven": (3, 1, 1), "srun-arbitrary": (1, 1, 2), "srun-pty": (1,),
       "sbatch-3node": (1, 1, 1), "ompi-in-salloc": (1, 1, 1), "ompi-in-sbatch": (1, 1),
       "mpich-in-salloc": (1, 1, 1), "mpich-in-sbatch": (1, 1, 1)}
JOBS = {"srun-block": "1", "srun-cyclic": "2", "srun-uneven": "3", "srun-arbitrary": "4",
        "sbatch-3node": "5", "sbatch-1node": "6", "salloc-shell": "7", "srun-pty": "8",
        "srun-pmi2": "9", "ompi-in-salloc": "10", "ompi-in-sbatch": "11",
        "mpich-in-salloc": "12", "mpich-in-sbatch": "13", "srun-pmix": "14",
        "srun-cray-shasta": "15"}


@pytest.mark.parametrize("scenario", list(STEP_FACTS))
def test_step_facts_of_every_recorded_task(scenario: str) -> None:
    seen_step = set()
    for task, (ran_on, env) in tasks(scenario).items():
        if "slurm-step" not in [s.name for s in seen_sources(env)]:
            continue
        seen_step.add(task)
        node_id, procs, problem = STEP_FACTS[scenario][task]
        report = step(env, {HOSTFILE: HOSTFILE_TEXT})
        nodes = (ALL3[1:] if scenario == "ompi-in-sbatch" else
                 ALL3[:1] if scenario == "srun-pty" else ALL3)
        assert report.nodes == nodes
        assert report.node_rank == node_id
        assert report.nodes[node_id].host == ran_on  # where it really ran
        assert report.processes == Processes(*procs, TPN.get(scenario, (2, 2, 2)))
        assert report.master == (N11 if scenario == "srun-arbitrary" else None)
        assert (report.problem is not None) == problem
        assert report.job == ("slurm", JOBS[scenario], "0")
        assert report.session_id == JOBS[scenario]
        assert report.reserved_ports == () and report.gpus is None
        assert report.inputs["processes"] == ("SLURM_PROCID", "SLURM_LOCALID",
                                              "SLURM_STEP_NUM_TASKS",
                                              "SLURM_STEP_TASKS_PER_NODE")
    assert seen_step == set(STEP_FACTS[scenario])


#: scenario -> task -> allocation node rank (None: not proven), literal from the recordings.
ALLOC_FACTS = {
    "sbatch-1node": {"batch": 0},
    "sbatch-3node": {"batch": 0, "step-task0": 0, "step-task1": 1, "step-task2": 2},
    "salloc-shell": {"shell": None},
    # The four cases where the resolver uses this line's hosts for MPI ranks.
    "ompi-in-sbatch": {f"rank{r}": r // 2 for r in range(6)},
    "ompi-in-salloc": {f"rank{r}": r // 2 for r in range(6)},
    "mpich-in-sbatch": {f"rank{r}": r // 2 for r in range(6)},
    "mpich-in-salloc": {f"rank{r}": r // 2 for r in range(6)},
    "srun-arbitrary": {"task0": 2, "task1": 0, "task2": 1, "task3": 2},
    "srun-pty": {"task0": 0},
}


@pytest.mark.parametrize("scenario", list(ALLOC_FACTS))
def test_allocation_facts_of_every_recorded_task(scenario: str) -> None:
    recorded = tasks(scenario)
    assert set(recorded) == set(ALLOC_FACTS[scenario])
    for task, (ran_on, env) in recorded.items():
        assert "slurm-allocation" in [s.name for s in seen_sources(env)]
        report = alloc(env)
        expected = ALLOC_FACTS[scenario][task]
        assert report.node_rank == expected, task
        one = scenario in ("sbatch-1node", "srun-pty")
        hosts = (ALL3[:1] if one else ALL3[:2] if scenario == "salloc-shell" else ALL3)
        assert report.nodes == hosts
        if expected is not None:
            assert report.nodes[expected].host == ran_on, task  # never a wrong node
        in_step = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_STEP_ID")
        step = env.get("SLURM_STEP_ID", "?") if in_step else None
        assert report.problem == (
            None if one else slurm.alloc_problem(env["SLURM_JOB_NUM_NODES"], step))
        assert report.job == ("slurm", JOBS[scenario], "allocation")
        assert report.processes is None and report.master is None


def test_the_multi_node_allocation_problem_prints_the_fix() -> None:
    assert alloc(tasks("sbatch-3node")["batch"][1]).problem == (
        "run derive-env inside srun, after it: srun --ntasks-per-node=1 derive-env -- "
        "torchrun ..., or one task per GPU: srun --ntasks-per-node=<GPUs per node> derive-env "
        "-- python train.py. Here it runs in a batch script or salloc shell (no srun step; "
        "derive-env -- srun ... runs it there too), one process on one node of the job's "
        "SLURM_JOB_NUM_NODES='3': only srun starts processes on the others")


def test_salloc_shell_is_not_a_step_and_has_no_node() -> None:
    env = tasks("salloc-shell")["shell"][1]
    assert [s.name for s in seen_sources(env)] == ["slurm-allocation"]
    report = alloc(env)
    assert (report.node_rank, report.inputs) == (None, {
        "nodes": ("SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES"), "ports": ("SLURM_JOB_ID",)})


def test_batch_script_node_rank_needs_its_own_node_name() -> None:
    env = dict(tasks("sbatch-3node")["batch"][1])
    assert alloc(env).inputs["node_rank"] == ("ENVIRONMENT", "SLURMD_NODENAME")
    env["SLURMD_NODENAME"] = N10  # not the first node: not the batch script itself
    assert alloc(env).node_rank is None
    del env["ENVIRONMENT"]
    env["SLURMD_NODENAME"] = N09
    assert alloc(env).node_rank is None


def test_a_lone_job_id_is_no_source() -> None:
    assert seen_sources({"SLURM_JOB_ID": "5"}) == []
    assert seen_sources({"SLURM_JOB_ID": "5", "SLURM_JOBID": "5", "SLURM_PROCID": "0"}) == []


# -- misleading and malformed input: exact messages -------------------------------------------


@pytest.mark.parametrize(("var", "value", "message"), [
    ("SLURM_GTIDS", "2,x", "SLURM_GTIDS='2,x': expected a comma-separated list of task ids "
     "such as 0,1"),
    ("SLURM_STEP_RESV_PORTS", "70000", "SLURM_STEP_RESV_PORTS='70000': expected TCP ports "
     "1-65535, not 70000-70000"),
])
def test_malformed_step_values(var: str, value: str, message: str) -> None:
    """The values slurm.py reads itself; the consistency rules' cases are in
    test_slurm_checks.py."""
    env = block()
    env[var] = value
    assert raises(env) == message


def test_gpus_and_reserved_ports() -> None:
    env = block()
    env.update(SLURM_GPUS_ON_NODE="4", SLURM_GPUS_PER_NODE="a100:4",
               SLURM_STEP_RESV_PORTS="12000-12001,12005")
    report = step(env)
    assert (report.gpus, report.reserved_ports) == (4, (12000, 12001, 12005))
    assert report.inputs["gpus"] == ("SLURM_GPUS_ON_NODE",)
    assert report.inputs["ports"] == ("SLURM_STEP_RESV_PORTS",)


def test_mpich_copied_variables_are_a_problem_not_an_error() -> None:
    env = tasks("mpich-in-sbatch")["rank2"][1]
    assert step(env).problem == (
        "SLURM_GTIDS='0': expected SLURM_PROCID=1 at position SLURM_LOCALID=0; "
        "SLURMD_NODENAME='gpu-a100-09': expected 'gpu-a100-10', node SLURM_NODEID=1 of "
        "SLURM_STEP_NODELIST='gpu-a100-[09-11]'; SLURM_GTIDS='0' on node 'gpu-a100-10' "
        "(SLURM_NODEID=1): expected rank 0 on 'gpu-a100-09', the first node of the step for "
        "distribution cyclic: this task's own Slurm variables contradict the step it names, "
        "as when a launcher inside the step (MPICH's mpiexec) copied them from another "
        "process; run derive-env directly under srun, or under an MPI launcher derive-env "
        "reads")


def arbitrary(task: str = "task0") -> dict[str, str]:
    return dict(tasks("srun-arbitrary")[task][1])


def test_arbitrary_master_is_the_first_hostfile_line() -> None:
    env = arbitrary()
    assert slurm.files_needed(env, "slurm-step") == (HOSTFILE,)
    assert slurm.files_needed(env, "slurm-allocation") == ()
    assert slurm.files_needed(block(), "slurm-step") == ()
    report = step(env, {HOSTFILE: "# topology order\n gpu-a100-11 \ngpu-a100-09,gpu-a100-10"
                        "*2\n"})
    assert report.master == N11
    assert report.inputs["master"] == ("SLURM_DISTRIBUTION", "SLURM_HOSTFILE")


def test_arbitrary_without_a_readable_hostfile() -> None:
    message = (
        f"SLURM_HOSTFILE='{HOSTFILE}': expected a regular file of at most 16 MiB this "
        "process can read (not a directory, FIFO or device): with "
        "SLURM_DISTRIBUTION=arbitrary rank 0 runs on its first host, which no variable "
        "states; make the file visible at the same path inside the container (bind-mount "
        "its folder) or use another distribution (-m block)")
    assert raises(arbitrary(), files={HOSTFILE: None}) == message
    assert raises(arbitrary(), files={}) == message
    env = arbitrary()
    del env["SLURM_HOSTFILE"]
    assert raises(env) == (
        "SLURM_DISTRIBUTION='arbitrary': expected SLURM_HOSTFILE to be set as well: with "
        "arbitrary distribution rank 0 runs on the first host of that file, which no other "
        "variable states; set SLURM_HOSTFILE to the file srun used")


@pytest.mark.parametrize(("text", "message"), [
    ("", "expected at least one node name (the file is empty)"),
    ("# only a comment\n\n", "expected at least one node name (the file is empty)"),
    ("-bad\n", "expected lines of Slurm node names (src/api/allocate.c slurm_read_hostfile), "
     "not line 1 '-bad'"),
    ("gpu-a100-11*x\n", "expected name or name*N on line 1, not 'gpu-a100-11*x'"),
    ("gpu-a100-12\n", "expected its first host 'gpu-a100-12' (rank 0's) to be a node of the "
     "step, SLURM_STEP_NODELIST='gpu-a100-[09-11]': the file was changed after srun read it, "
     "or belongs to another step"),
])
def test_malformed_hostfile(text: str, message: str) -> None:
    assert raises(arbitrary(), files={HOSTFILE: text}) == f"SLURM_HOSTFILE='{HOSTFILE}': " \
        + message


def test_arbitrary_local_checks_name_the_node() -> None:
    # A hostfile whose rank 0 is on gpu-a100-09: task0 ran on gpu-a100-11 (its GTIDS hold 0).
    problem = step(arbitrary(), {HOSTFILE: f"{N09}\n{N09}\n{N10}\n{N11}\n"}).problem
    assert problem is not None
    assert problem.startswith(
        f"SLURM_HOSTFILE='{HOSTFILE}': expected line 1 (rank SLURM_PROCID=0) to name this "
        "task's node 'gpu-a100-11' (SLURM_NODEID=2), not 'gpu-a100-09'; SLURM_PROCID=0 on "
        "node 'gpu-a100-11' (SLURM_NODEID=2): expected rank 0 on 'gpu-a100-09', the first "
        "host of SLURM_HOSTFILE")


def test_srun_pty_of_one_task() -> None:
    env = tasks("srun-pty")["task0"][1]
    report = step(env)
    assert (report.nodes, report.node_rank, report.processes) == (
        (Node(N09),), 0, Processes(0, 0, 1, 1, (1,)))
    assert report.warnings == ()
    assert alloc(env).problem is None


def test_srun_pty_of_two_tasks_is_the_step_it_is() -> None:
    # Recorded: srun -N2 --pty runs the command on both tasks (tests/data/slurm-extra).
    for task in ("pty2-0", "pty2-1"):
        ran_on, env = extra(task)
        report = step(env)
        assert report.nodes[report.node_rank].host == ran_on
        assert report.processes.world_size == 2 and report.problem is None
    assert step(extra("pty2-0")[1]).warnings == (
        "SLURM_PTY_PORT is set and the step has 2 tasks: if derive-env runs from an "
        "interactive srun --pty shell, the other tasks' shells ended at once (srun.1 --pty: "
        "only task 0 has the terminal) and the job will wait for them; start the shell with "
        "srun -N1 -n1 --pty and the job with srun from it",)
    assert step(extra("pty2-1")[1]).warnings == ()


def test_a_step_started_from_a_pty_shell_inherits_its_port() -> None:
    for task in ("nested-0", "nested-1"):
        ran_on, env = extra(task)
        assert env["SLURM_STEP_ID"] == "1" and env["SLURM_PTY_PORT"]
        report = step(env)
        assert report.nodes[report.node_rank].host == ran_on
        assert report.job == ("slurm", env["SLURM_JOB_ID"], "1")


def test_allocation_counts_must_agree() -> None:
    env = dict(tasks("sbatch-3node")["batch"][1])
    env["SLURM_JOB_NUM_NODES"] = "2"
    assert raises(env, "slurm-allocation") == (
        "SLURM_JOB_NUM_NODES='2': expected the number of nodes in SLURM_JOB_NODELIST="
        "'gpu-a100-[09-11]' (3); Slurm writes both for one job (src/common/env.c), so one was "
        "set by hand or inherited")
    env = dict(tasks("sbatch-3node")["batch"][1])
    env["SLURM_NNODES"] = "2"
    assert raises(env, "slurm-allocation") == (
        "SLURM_NNODES='2': expected 3, as SLURM_JOB_NUM_NODES='3': both are Slurm's own for "
        "this step, so one was set by hand or inherited")
    # In a step SLURM_NNODES is the step's (recorded: ompi-in-sbatch): not compared.
    assert alloc(tasks("ompi-in-sbatch")["rank2"][1]).node_rank == 1


# -- a model of Slurm's layouts, and the properties --------------------------------------------


KEYS = ("SLURM_PROCID", "SLURM_NODEID", "SLURM_LOCALID", "SLURM_GTIDS",
        "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS", "SLURMD_NODENAME")


@pytest.mark.parametrize(("scenario", "tpn", "dist", "order"), [
    ("srun-block", [2, 2, 2], "block", None),
    ("srun-cyclic", [2, 2, 2], "cyclic", None),
    ("srun-uneven", [3, 1, 1], "block", None),
    ("srun-arbitrary", [1, 1, 2], "arbitrary", [N11, N09, N10, N11]),
])
def test_the_model_matches_the_recordings(scenario, tpn, dist, order) -> None:
    hosts = [N09, N10, N11]
    model = job_envs(hosts, hosts, tpn, dist, order)
    for rank, (host, env) in enumerate(model):
        ran_on, recorded = tasks(scenario)[f"task{rank}"]
        assert host == ran_on
        assert {k: env[k] for k in KEYS} == {k: recorded[k] for k in KEYS}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slurm_jobs())
def test_every_task_of_a_step_agrees(job) -> None:
    job_hosts, hosts, tpn, dist, order = job
    files = {"/h": "\n".join(order) + "\n"} if order else {}
    reports = [(host, step(env, files), alloc(env))
               for host, env in job_envs(job_hosts, hosts, tpn, dist, order)]
    first = reports[0][1]
    master = order[0] if order else hosts[0]
    ranks = []
    for host, report, allocation in reports:
        assert report.problem is None
        assert report.nodes == first.nodes == tuple(Node(h) for h in hosts)
        assert (report.master or report.nodes[0].host) == master
        assert report.processes.world_size == sum(tpn)
        assert report.processes.tasks_per_node == tuple(tpn)
        assert report.job == first.job
        assert report.nodes[report.node_rank].host == host
        assert allocation.nodes[allocation.node_rank].host == host
        assert allocation.job == reports[0][2].job
        ranks.append(report.processes.rank)
    assert sorted(ranks) == list(range(sum(tpn)))
    # the rank placed first on the master's node is rank 0 (master = rank 0's host)
    assert [h for h, r, _ in reports if r.processes.rank == 0] == [master]


#: Every variable the module reads.
VARS = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEP_NODELIST",
        "SLURM_STEP_NUM_NODES", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE",
        "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_JOB_NODELIST",
        "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_GTIDS", "SLURMD_NODENAME",
        "SLURM_DISTRIBUTION", "SLURM_HOSTFILE", "SLURM_PTY_PORT", "SLURM_GPUS_ON_NODE",
        "SLURM_STEP_RESV_PORTS", "SLURM_HET_SIZE", "SLURM_JOB_NODELIST_HET_GROUP_1",
        "PMI_JOBID", "PMI_RANK", "PMI_SIZE", "PMIX_NAMESPACE", "PMIX_RANK", "PALS_APID",
        "PALS_RANKID", "PALS_NODEID", "ENVIRONMENT")
_TEXT = st.one_of(st.text(max_size=30), st.sampled_from(
    ["0", "1", "2", "3", "6", "1(x3)", "2(x3)", "n[1-3]", "n1,n2", "arbitrary", "BATCH",
     "1.0", "n1", "0,1", "slurm.pmix.1.0", "/h"]))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["slurm-step", "slurm-allocation"]),
       st.dictionaries(st.sampled_from(VARS), _TEXT),
       st.one_of(st.none(), st.text(max_size=40)), st.data())
def test_arbitrary_text_gives_a_report_or_a_topology_error(name, extra, hostfile, data):
    line = next(s for s in slurm_lines() if s.name == name)
    env = {var: data.draw(_TEXT.filter(bool)) for var in line.detect}
    env.update(extra)
    env.update({var: env[var] or "x" for var in line.detect})  # the line is seen
    try:
        report = slurm.read(env, BY_NAME[name], {"/h": hostfile})
    except TopologyError as exc:
        assert str(exc)
    else:
        assert report.source == name


def slurm_lines():
    from derive_env.sources import SOURCES

    return [s for s in SOURCES if s.module == "managers.slurm"]


# -- MPI launchers inside an allocation: a model, checked against the four recordings ----------


MPI_KEYS = ("SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES", "SLURM_STEP_NUM_TASKS",
            "SLURM_STEP_TASKS_PER_NODE", "SLURM_PROCID", "SLURM_NODEID", "SLURM_LOCALID",
            "SLURM_GTIDS", "SLURMD_NODENAME", "SLURM_NNODES", "ENVIRONMENT",
            "SLURM_JOB_NUM_NODES")


@pytest.mark.parametrize("kind", ["ompi-in-sbatch", "ompi-in-salloc", "mpich-in-sbatch",
                                  "mpich-in-salloc"])
def test_the_mpi_model_matches_the_recordings(kind: str) -> None:
    model = mpi_in_allocation([N09, N10, N11], [2, 2, 2], kind)
    recorded = tasks(kind)
    for rank, (host, env) in enumerate(model):
        ran_on, real = recorded[f"rank{rank}"]
        assert host == ran_on
        real = {k: real[k] for k in MPI_KEYS if k in real}
        if "SLURM_STEP_NODELIST" in real:  # the model writes lists uncompressed
            real["SLURM_STEP_NODELIST"] = ",".join(expand_hostlist(
                real["SLURM_STEP_NODELIST"]))
        assert {k: env[k] for k in MPI_KEYS if k in env} == real


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 9), st.lists(st.integers(1, 4), min_size=1, max_size=9),
       st.sampled_from(["ompi-in-sbatch", "ompi-in-salloc", "mpich-in-sbatch",
                        "mpich-in-salloc"]))
def test_allocation_never_gives_an_mpi_rank_a_wrong_node(first, per_node, kind) -> None:
    hosts = [f"node-{first + i:03d}" for i in range(len(per_node))]
    for host, env in mpi_in_allocation(hosts, per_node, kind):
        report = alloc(env)
        assert report.nodes == tuple(Node(h) for h in hosts)
        if report.node_rank is not None:
            assert report.nodes[report.node_rank].host == host
        if kind != "ompi-in-sbatch" or host != hosts[0]:
            assert report.node_rank is not None  # proven by the daemon step or the batch
        if "SLURM_STEP_NODELIST" in env:
            own = step(env)  # the daemon step: never an error, at most a problem
            assert (own.problem is not None) == (kind == "mpich-in-sbatch" and
                                                 host != hosts[0])


def test_a_hostfile_with_fewer_lines_than_tasks_is_not_this_steps() -> None:
    with pytest.raises(TopologyError) as caught:
        step(arbitrary("task1"), {HOSTFILE: "gpu-a100-11\n"})
    assert str(caught.value) == (
        f"SLURM_HOSTFILE='{HOSTFILE}': expected a line for each of the SLURM_STEP_NUM_TASKS=4 "
        "tasks (srun places task r on line r+1), not 1: the file was changed after srun read "
        "it, or belongs to another step")


def test_hostfile_comments_and_escaped_hashes() -> None:
    """slurm_read_hostfile: ``#`` starts a comment, ``\\#`` is a literal ``#`` (which no host
    name may hold: refused naming it)."""
    hosts = slurm_hostlist.expand_hostfile("a1 # rank 0\n# all\nb2*2,a1\n", host_problem)
    assert hosts == ["a1", "b2", "b2", "a1"]
    with pytest.raises(TopologyError) as caught:
        slurm_hostlist.arbitrary_master({"SLURM_HOSTFILE": "/h"}, {"/h": "a\\#1\n"}, ("a1",), 0)
    assert str(caught.value).startswith("SLURM_HOSTFILE='/h': expected ")
    assert str(caught.value).endswith("on line 1, not 'a#1'")


def test_allocation_alone_inside_a_step_says_read_the_step() -> None:
    """Issue 15, item 7: --source slurm-allocation inside an srun step said "run derive-env
    inside an srun step"."""
    _, env = tasks("srun-block")["task3"]
    assert alloc(env).problem == (
        "SLURM_JOB_NUM_NODES='3': expected 1 when the allocation is read alone: this process "
        f"runs in srun step {env['SLURM_STEP_ID']} (SLURM_STEP_ID), and the step, not the "
        "allocation, states the nodes that run the job's processes. Read the step: --source "
        "slurm-step (or DERIVE_ENV_SOURCE=slurm-step), or no --source")
