"""Golden tests over environments recorded from real Slurm 22.05, Open MPI 4.1 and MPICH 4.0.

The fixtures (tests/fixtures/recorded/<scenario>/<task>.env, written by
tests/e2e/record_envs.py; README.md there has the exact commands) are the oracle for the Slurm
and MPI sources: each test pins, with exact values, a fact sources.md 3.1-3.4 says a source
relies on. Every fixture's first line names the node the task really ran on (``uname -n`` in
its own namespace), so the node layer is checked against the truth, not against another
variable. Tables of per-task values are literal (from the recording), never computed by a rule
a source would also use. No root needed: this only reads files.
"""

from __future__ import annotations

import re

import pytest

from support.recorded import FIXTURES, RUN_DIR, dump_env, load_env, load_fixture, recorder

#: The recorders' scenarios: what the fixtures must hold.
SCENARIOS = recorder("record_envs").SCENARIOS
TORCHRUN_SCENARIOS = recorder("record_torchrun").SCENARIOS

N09, N10, N11 = "gpu-a100-09", "gpu-a100-10", "gpu-a100-11"
ALL3 = "gpu-a100-[09-11]"

#: Scenario -> its job id: a fresh slurmctld numbers jobs from 1, scenarios run in order
#: (None: over SSH, no Slurm job).
JOB_IDS: dict[str, str | None] = {
    "srun-block": "1", "srun-cyclic": "2", "srun-uneven": "3", "srun-arbitrary": "4",
    "sbatch-3node": "5", "sbatch-1node": "6", "salloc-shell": "7", "srun-pty": "8",
    "srun-pmi2": "9", "ompi-in-salloc": "10", "ompi-in-sbatch": "11", "mpich-in-salloc": "12",
    "mpich-in-sbatch": "13", "srun-pmix": "14", "srun-cray-shasta": "15", "ompi-ssh": None,
    "mpich-ssh": None,
}


def scenario(name: str) -> dict[str, tuple[str, dict[str, str]]]:
    """task name -> (node it ran on, variables) for one recorded scenario."""
    files = sorted((FIXTURES / name).glob("*.env"))
    assert files, f"no fixtures for {name} in {FIXTURES}; run tests/e2e/record_envs.py"
    return {f.stem: load_fixture(f) for f in files}


def step_table(name: str) -> list[tuple[str, str, str, str, str]]:
    """[(ran on, SLURM_PROCID, SLURM_NODEID, SLURM_LOCALID, SLURM_GTIDS)] by task file order."""
    return [
        (host, env["SLURM_PROCID"], env["SLURM_NODEID"], env["SLURM_LOCALID"], env["SLURM_GTIDS"])
        for host, env in scenario(name).values()
    ]


def common(name: str, key: str) -> str:
    """The one value ``key`` has in every task of ``name`` (fails when tasks differ)."""
    values = {env.get(key, "<unset>") for _, env in scenario(name).values()}
    assert len(values) == 1, f"{name}: {key} differs between tasks: {sorted(values)}"
    return values.pop()


# -- the fixtures themselves -------------------------------------------------------------------


def test_every_scenario_is_recorded() -> None:
    # torchrun-*: recorded by record_torchrun.py, checked by tests/sources/test_torchrun.py.
    recorded = {d.name for d in FIXTURES.iterdir() if d.is_dir()} - set(TORCHRUN_SCENARIOS)
    assert recorded == set(SCENARIOS) == set(JOB_IDS)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_job_id_and_its_alias(name: str) -> None:
    # SLURM_JOBID is the old name of SLURM_JOB_ID (env.c); a source checks they agree.
    assert common(name, "SLURM_JOB_ID") == (JOB_IDS[name] or "<unset>")
    assert common(name, "SLURM_JOBID") == (JOB_IDS[name] or "<unset>")


def test_dotenv_round_trip() -> None:
    tricky = {
        "A": "plain-1.2:3,4", "B": "with space", "C": "it's", "D": "line\nbreak",
        "E": "", "F": "0f;tcp://198.18.0.13:1", "G": 'say "hi"', "H": "gpu-a100-[09-11]",
    }
    assert load_env(dump_env(tricky)) == tricky
    assert dump_env({"B": "x y", "A": "1(x3)"}) == "A=1(x3)\nB='x y'\n"


def test_load_env_rejects_a_bad_line() -> None:
    with pytest.raises(ValueError, match=r"^line 2: expected KEY=value, got 'oops'$"):
        load_env("A=1\noops\n")


def test_recorded_paths_do_not_name_the_run() -> None:
    env = scenario("srun-block")["task0"][1]
    assert env["SLURM_CONF"] == f"{RUN_DIR}/slurm.conf"
    assert env["SLURM_SUBMIT_DIR"] == f"{RUN_DIR}/shared"


# -- 3.1 srun steps ----------------------------------------------------------------------------


def test_srun_block_layout() -> None:
    assert step_table("srun-block") == [
        (N09, "0", "0", "0", "0,1"), (N09, "1", "0", "1", "0,1"),
        (N10, "2", "1", "0", "2,3"), (N10, "3", "1", "1", "2,3"),
        (N11, "4", "2", "0", "4,5"), (N11, "5", "2", "1", "4,5"),
    ]
    assert common("srun-block", "SLURM_STEP_NODELIST") == ALL3
    assert common("srun-block", "SLURM_STEP_NUM_NODES") == "3"
    assert common("srun-block", "SLURM_STEP_NUM_TASKS") == "6"
    assert common("srun-block", "SLURM_STEP_TASKS_PER_NODE") == "2(x3)"
    assert common("srun-block", "SLURM_STEP_ID") == "0"
    # Block is the default: srun sets no SLURM_DISTRIBUTION then.
    assert common("srun-block", "SLURM_DISTRIBUTION") == "<unset>"


@pytest.mark.parametrize("name", ["srun-block", "srun-cyclic", "srun-uneven", "srun-arbitrary",
                                  "srun-pty", "srun-pmi2", "srun-pmix", "srun-cray-shasta"])
def test_slurmd_nodename_is_the_real_node_and_hostname_is_not(name: str) -> None:
    for host, env in scenario(name).values():
        assert env["SLURMD_NODENAME"] == host
        # HOSTNAME is copied from srun's environment (the login node) into every task: never
        # this node's identity.
        assert env["HOSTNAME"] == "login"
        assert env["SLURM_SUBMIT_HOST"] == "login"


def test_srun_cyclic_ranks_are_not_contiguous() -> None:
    assert step_table("srun-cyclic") == [
        (N09, "0", "0", "0", "0,3"), (N10, "1", "1", "0", "1,4"),
        (N11, "2", "2", "0", "2,5"), (N09, "3", "0", "1", "0,3"),
        (N10, "4", "1", "1", "1,4"), (N11, "5", "2", "1", "2,5"),
    ]
    assert common("srun-cyclic", "SLURM_DISTRIBUTION") == "cyclic"
    assert common("srun-cyclic", "SLURM_STEP_TASKS_PER_NODE") == "2(x3)"


def test_srun_uneven_tasks_per_node_syntax() -> None:
    # -N3 -n5 with 4 CPUs per node: block fills the first node (3,1,1), not 2,2,1.
    assert step_table("srun-uneven") == [
        (N09, "0", "0", "0", "0,1,2"), (N09, "1", "0", "1", "0,1,2"),
        (N09, "2", "0", "2", "0,1,2"), (N10, "3", "1", "0", "3"), (N11, "4", "2", "0", "4"),
    ]
    assert common("srun-uneven", "SLURM_STEP_TASKS_PER_NODE") == "3,1(x2)"
    assert common("srun-uneven", "SLURM_STEP_NUM_TASKS") == "5"
    assert common("srun-uneven", "SLURM_TASKS_PER_NODE") == "3,1(x2)"


def test_srun_arbitrary_puts_rank0_on_the_last_node() -> None:
    # SLURM_HOSTFILE lists gpu-a100-11, -09, -10, -11: rank 0 is on the node with NODEID 2,
    # so "master = first host of SLURM_STEP_NODELIST" is wrong here; GTIDS shows the truth.
    assert step_table("srun-arbitrary") == [
        (N11, "0", "2", "0", "0,3"), (N09, "1", "0", "0", "1"),
        (N10, "2", "1", "0", "2"), (N11, "3", "2", "1", "0,3"),
    ]
    assert common("srun-arbitrary", "SLURM_DISTRIBUTION") == "arbitrary"
    assert common("srun-arbitrary", "SLURM_STEP_NODELIST") == ALL3
    assert common("srun-arbitrary", "SLURM_STEP_TASKS_PER_NODE") == "1(x2),2"
    assert common("srun-arbitrary", "SLURM_HOSTFILE") == (
        f"{RUN_DIR}/shared/srun-arbitrary/hostfile"
    )


def test_srun_pty_is_one_task_with_a_pty_port() -> None:
    (host, env), = scenario("srun-pty").values()
    assert host == N09
    assert env["SLURM_PTY_PORT"].isdigit()
    assert (env["SLURM_STEP_NUM_TASKS"], env["SLURM_STEP_NUM_NODES"]) == ("1", "1")
    assert (env["SLURM_STEP_NODELIST"], env["SLURM_STEP_TASKS_PER_NODE"]) == (N09, "1")
    assert (env["SLURM_PROCID"], env["SLURM_LOCALID"], env["SLURM_GTIDS"]) == ("0", "0", "0")


def test_no_pty_port_outside_srun_pty() -> None:
    for name in SCENARIOS:
        if name != "srun-pty":
            assert common(name, "SLURM_PTY_PORT") == "<unset>", name


def test_srun_pmi2_adds_slurm_pmi_variables_that_agree() -> None:
    assert step_table("srun-pmi2") == step_table("srun-block")
    for task, (_, env) in scenario("srun-pmi2").items():
        assert env["PMI_RANK"] == env["SLURM_PROCID"] == task.removeprefix("task")
        assert env["PMI_SIZE"] == env["SLURM_STEP_NUM_TASKS"] == "6"
        assert env["PMI_FD"].isdigit()
    assert common("srun-pmi2", "PMI_JOBID") == "9.0"  # <job id>.<step id>
    assert common("srun-pmi2", "SLURM_MPI_TYPE") == "pmi2"
    # Slurm's PMI2 gives no local rank variable and no PROC_MAPPING in the environment (the
    # mapping is a PMI2 key, not a variable): a local rank never comes from PMI_* here.
    assert common("srun-pmi2", "MPI_LOCALRANKID") == "<unset>"
    assert common("srun-pmi2", "SLURM_PMI2_PROC_MAPPING") == "<unset>"


def test_srun_pmix_gives_a_rank_and_a_mapping_but_no_size() -> None:
    assert step_table("srun-pmix") == step_table("srun-block")
    for host, env in scenario("srun-pmix").values():
        assert env["PMIX_RANK"] == env["SLURM_PROCID"]
        assert env["PMIX_HOSTNAME"] == host
        # The PMIx server is node-local (loopback): never a master address (3.4).
        assert re.fullmatch(r"pmix-server\.\d+;tcp4://127\.0\.0\.1:\d+", env["PMIX_SERVER_URI41"])
        # PMIx alone gives a rank but no size; no PMI-1/2 variables either.
        assert [k for k in env if k.startswith("PMI_") or k.startswith("PMIX_SIZE")] == []
    assert common("srun-pmix", "PMIX_NAMESPACE") == "slurm.pmix.14.0"
    # Node layout vector: (vector,(first node, node count, tasks per node)).
    assert common("srun-pmix", "SLURM_PMIX_MAPPING_SERV") == "(vector,(0,3,2))"
    assert common("srun-pmix", "SLURM_MPI_TYPE") == "pmix"


def test_srun_cray_shasta_sets_only_pals_ids() -> None:
    # Slurm's plugin (src/plugins/mpi/cray_shasta/mpi_cray_shasta.c, mpi_p_slurmstepd_task)
    # sets PALS_APID, PALS_RANKID, PALS_NODEID, PALS_SPOOL_DIR, PALS_APINFO only: no
    # PALS_LOCAL_RANKID and no PMI_* (those come from HPE's own PALS launcher).
    assert step_table("srun-cray-shasta") == step_table("srun-block")
    for host, env in scenario("srun-cray-shasta").values():
        assert env["PALS_RANKID"] == env["SLURM_PROCID"]
        assert env["PALS_NODEID"] == env["SLURM_NODEID"]
        assert sorted(k for k in env if k.startswith(("PALS_", "PMI"))) == [
            "PALS_APID", "PALS_APINFO", "PALS_NODEID", "PALS_RANKID", "PALS_SPOOL_DIR"]
        assert env["PALS_SPOOL_DIR"] == f"{RUN_DIR}/spool/{host}/mpi_cray_shasta/15.0"
    assert common("srun-cray-shasta", "PALS_APID") == "15.0"  # <job id>.<step id>


# -- 3.2 batch script and salloc shell ---------------------------------------------------------


def test_sbatch_batch_script_has_no_step_variables() -> None:
    host, env = scenario("sbatch-3node")["batch"]
    assert host == N09  # runs once, on the first node of the allocation
    assert [k for k in env if k.startswith(("SLURM_STEP", "SLURM_STEPID"))] == []
    assert env["ENVIRONMENT"] == "BATCH"
    assert env["SLURM_JOB_NODELIST"] == ALL3
    assert env["SLURM_JOB_NUM_NODES"] == "3"
    assert env["SLURM_TASKS_PER_NODE"] == "1(x3)"
    # Present but misleading here (sources.md 3.2): they look like rank 0 of a step.
    assert (env["SLURM_PROCID"], env["SLURM_NODEID"], env["SLURM_LOCALID"]) == ("0", "0", "0")
    assert (env["SLURM_GTIDS"], env["SLURM_NTASKS"]) == ("0", "3")
    assert (env["SLURMD_NODENAME"], env["HOSTNAME"]) == (N09, N09)


def test_srun_inside_a_batch_script_inherits_environment_batch() -> None:
    steps = {t: v for t, v in scenario("sbatch-3node").items() if t.startswith("step-")}
    assert [(h, e["SLURM_PROCID"], e["SLURM_NODEID"]) for h, e in steps.values()] == [
        (N09, "0", "0"), (N10, "1", "1"), (N11, "2", "2"),
    ]
    for host, env in steps.values():
        assert env["ENVIRONMENT"] == "BATCH"  # so BATCH alone does not mean "batch script"
        assert env["SLURM_STEP_NUM_TASKS"] == "3"
        assert env["SLURM_STEP_TASKS_PER_NODE"] == "1(x3)"
        assert env["SLURMD_NODENAME"] == host
        assert env["HOSTNAME"] == N09  # the batch script's, copied


def test_sbatch_one_node() -> None:
    (host, env), = scenario("sbatch-1node").values()
    assert host == N09
    assert (env["SLURM_JOB_NUM_NODES"], env["SLURM_JOB_NODELIST"]) == ("1", N09)
    assert [k for k in env if k.startswith("SLURM_STEP")] == []
    assert env["ENVIRONMENT"] == "BATCH"


def test_salloc_shell_runs_on_the_login_node_outside_the_allocation() -> None:
    (host, env), = scenario("salloc-shell").values()
    assert host == "login"
    assert env["SLURM_JOB_NODELIST"] == "gpu-a100-[09-10]"
    assert env["SLURM_JOB_NUM_NODES"] == env["SLURM_NNODES"] == "2"
    assert env["SLURM_JOB_NAME"] == "interactive"
    absent = ["SLURMD_NODENAME", "SLURM_PROCID", "SLURM_NODEID", "SLURM_LOCALID",
              "SLURM_GTIDS", "SLURM_STEP_ID", "SLURM_STEP_NODELIST", "ENVIRONMENT"]
    assert [k for k in absent if k in env] == []


# -- 3.3 Open MPI mpirun inside an allocation --------------------------------------------------


def ompi_table(name: str) -> list[tuple[str, ...]]:
    """[(ran on, OMPI rank, size, local rank, local size, PMIX_RANK)] by task file order."""
    keys = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_RANK")
    return [(host, *(env[k] for k in keys)) for host, env in scenario(name).values()]


OMPI_6 = [
    (N09, "0", "6", "0", "2", "0"), (N09, "1", "6", "1", "2", "1"),
    (N10, "2", "6", "0", "2", "2"), (N10, "3", "6", "1", "2", "3"),
    (N11, "4", "6", "0", "2", "4"), (N11, "5", "6", "1", "2", "5"),
]


def test_ompi_in_salloc_ranks_and_the_orted_step() -> None:
    assert ompi_table("ompi-in-salloc") == OMPI_6
    # The SLURM_* of every rank describe mpirun's orted step (one task per node), not the
    # ranks: STEP_NUM_TASKS 3 != OMPI_COMM_WORLD_SIZE 6 is how a source sees it must defer.
    assert common("ompi-in-salloc", "SLURM_STEP_NUM_TASKS") == "3"
    assert common("ompi-in-salloc", "SLURM_STEP_TASKS_PER_NODE") == "1(x3)"
    assert common("ompi-in-salloc", "SLURM_STEP_NODELIST") == ALL3
    assert common("ompi-in-salloc", "SLURM_NTASKS") == "3"
    rows = [(h, e["SLURM_PROCID"], e["SLURM_NODEID"], e["SLURM_LOCALID"], e["SLURM_GTIDS"],
             e["SLURMD_NODENAME"], e["PMIX_HOSTNAME"])
            for h, e in scenario("ompi-in-salloc").values()]
    assert rows == [
        (N09, "0", "0", "0", "0", N09, N09), (N09, "0", "0", "0", "0", N09, N09),
        (N10, "1", "1", "0", "1", N10, N10), (N10, "1", "1", "0", "1", N10, N10),
        (N11, "2", "2", "0", "2", N11, N11), (N11, "2", "2", "0", "2", N11, N11),
    ]
    # OMPI_COMM_WORLD_NODE_RANK is NOT a node index (3.3): it is the local rank again.
    assert [e["OMPI_COMM_WORLD_NODE_RANK"] for _, e in scenario("ompi-in-salloc").values()] == [
        "0", "1", "0", "1", "0", "1"]
    assert common("ompi-in-salloc", "OMPI_UNIVERSE_SIZE") == "6"
    # The HNP URI names mpirun's host: the login node, which runs no rank.
    uri = common("ompi-in-salloc", "OMPI_MCA_orte_hnp_uri")
    assert ";tcp://198.18.0.13:" in uri


def test_ompi_in_sbatch_first_node_ranks_have_no_step() -> None:
    assert ompi_table("ompi-in-sbatch") == OMPI_6
    tasks = list(scenario("ompi-in-sbatch").values())
    # Ranks 0-1 are mpirun's own children on the batch node: only the batch environment.
    for host, env in tasks[:2]:
        assert host == N09
        assert [k for k in env if k.startswith("SLURM_STEP")] == []
        assert (env["ENVIRONMENT"], env["SLURM_NTASKS"]) == ("BATCH", "6")
    # Ranks 2-5 are under orted, started by a 2-node step on the OTHER nodes: SLURM_NODEID is
    # relative to that step, so it is 0 on gpu-a100-10.
    rows = [(h, e["SLURM_STEP_NODELIST"], e["SLURM_STEP_NUM_TASKS"], e["SLURM_NODEID"])
            for h, e in tasks[2:]]
    assert rows == [
        (N10, "gpu-a100-[10-11]", "2", "0"), (N10, "gpu-a100-[10-11]", "2", "0"),
        (N11, "gpu-a100-[10-11]", "2", "1"), (N11, "gpu-a100-[10-11]", "2", "1"),
    ]
    assert ";tcp://198.18.0.10:" in common("ompi-in-sbatch", "OMPI_MCA_orte_hnp_uri")


# -- 3.4 MPICH Hydra inside an allocation ------------------------------------------------------


def hydra_table(name: str) -> list[tuple[str, ...]]:
    """[(ran on, PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS, SLURM_PROCID)]."""
    keys = ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "SLURM_PROCID")
    return [(host, *(env[k] for k in keys)) for host, env in scenario(name).values()]


HYDRA_6 = [
    (N09, "0", "6", "0", "2", "0"), (N09, "1", "6", "1", "2", "0"),
    (N10, "2", "6", "0", "2", "1"), (N10, "3", "6", "1", "2", "1"),
    (N11, "4", "6", "0", "2", "2"), (N11, "5", "6", "1", "2", "2"),
]


@pytest.mark.parametrize("name", ["mpich-in-salloc", "mpich-in-sbatch"])
def test_mpich_hydra_ranks_over_a_proxy_step(name: str) -> None:
    assert hydra_table(name) == HYDRA_6
    # One hydra_pmi_proxy per node: PMI_SIZE 6 != SLURM_STEP_NUM_TASKS 3.
    assert common(name, "SLURM_STEP_NUM_TASKS") == "3"
    assert common(name, "SLURM_STEP_TASKS_PER_NODE") == "1(x3)"
    assert all(e["PMI_FD"].isdigit() for _, e in scenario(name).values())
    assert common(name, "OMPI_COMM_WORLD_SIZE") == "<unset>"


def test_mpich_in_salloc_keeps_each_nodes_slurmd_nodename() -> None:
    names = [e["SLURMD_NODENAME"] for _, e in scenario("mpich-in-salloc").values()]
    assert names == [N09, N09, N10, N10, N11, N11]


def test_mpich_in_sbatch_copies_mpiexecs_slurmd_nodename_to_every_rank() -> None:
    # Hydra 4.0 passes mpiexec's environment to every rank except a fixed list of SLURM_*
    # names (SLURM_PROCID, _NODEID, _LOCALID...; pmodels/mpich
    # src/pm/hydra/tools/bootstrap/external/slurm_env.c); SLURMD_NODENAME and SLURM_GTIDS are
    # not on it, so the batch script's values win on every node. "SLURMD_NODENAME ==
    # hosts[NODEID]" fails here: a source must defer to the MPI launcher before checking it.
    rows = [(h, e["SLURM_NODEID"], e["SLURMD_NODENAME"], e["SLURM_GTIDS"])
            for h, e in scenario("mpich-in-sbatch").values()]
    assert rows == [
        (N09, "0", N09, "0"), (N09, "0", N09, "0"), (N10, "1", N09, "0"),
        (N10, "1", N09, "0"), (N11, "2", N09, "0"), (N11, "2", N09, "0"),
    ]


# -- MPI over SSH, no Slurm job ----------------------------------------------------------------


def test_ompi_over_ssh_has_ranks_and_no_slurm() -> None:
    assert ompi_table("ompi-ssh") == OMPI_6
    for _, env in scenario("ompi-ssh").values():
        # Open MPI forwards only its own variables: nothing of Slurm, no HOSTNAME at all.
        assert [k for k in env if k.startswith(("SLURM", "PMI_", "MPI_LOCAL"))] == []
        assert "HOSTNAME" not in env
    assert common("ompi-ssh", "OMPI_MCA_plm") == "rsh"
    assert ";tcp://198.18.0.13:" in common("ompi-ssh", "OMPI_MCA_orte_hnp_uri")
    # Not a process count (3.3): 8 although -H lists 6 slots and 6 ranks run.
    assert common("ompi-ssh", "OMPI_UNIVERSE_SIZE") == "8"
    assert common("ompi-ssh", "OMPI_COMM_WORLD_SIZE") == "6"


def test_mpich_over_ssh_copies_mpiexecs_environment() -> None:
    rows = [(h, e["PMI_RANK"], e["PMI_SIZE"], e["MPI_LOCALRANKID"], e["MPI_LOCALNRANKS"])
            for h, e in scenario("mpich-ssh").values()]
    assert rows == [row[:5] for row in HYDRA_6]
    for _, env in scenario("mpich-ssh").values():
        # Only what mpiexec's own environment had (no job): SLURM_CONF, HOSTNAME=login.
        assert [k for k in env if k.startswith("SLURM")] == ["SLURM_CONF"]
        assert env["HOSTNAME"] == "login"
        assert env["PMI_FD"].isdigit()


# -- provenance: every derived variable names the inputs that gave it (issue 14) ---------------

#: Derived variables of one process-layer fact, and the fact's key in the topology's inputs.
_ONE_FACT = {"RANK": "rank", "LOCAL_RANK": "local_rank", "WORLD_SIZE": "world_size",
             "JAX_PROCESS_ID": "rank", "JAX_NUM_PROCESSES": "world_size"}


def _derivations():
    """Every recorded task, derived for PyTorch + JAX (+ TensorFlow), with and without a
    user-set MASTER_ADDR (MPI over SSH needs one): (where, derivation) for each that derives."""
    from derive_env.errors import DeriveEnvError
    from derive_env.pipeline import derive

    for path in sorted(FIXTURES.glob("*/*.env")):
        environ = load_fixture(path)[1]
        for frameworks in ("pytorch,jax", "pytorch,jax,tensorflow"):
            for extra in ({}, {"MASTER_ADDR": "gpu-a100-09"}):
                labels = {"ai.backend.distributed.frameworks": frameworks,
                          "ai.backend.distributed.tensorflow-port": "2223"}
                try:
                    derivation = derive({**environ, **extra}, labels)
                except DeriveEnvError:
                    continue
                yield f"{path.parent.name}/{path.stem} {frameworks} {sorted(extra)}", derivation


def test_every_recorded_provenance_names_its_inputs() -> None:
    seen = 0
    for where, derivation in _derivations():
        seen += 1
        for var in derivation.variables:
            assert var.provenance.strip(), (where, var.name)
            assert "(none)" not in var.provenance, (where, var.name, var.provenance)
        inputs = derivation.topology.inputs
        if derivation.topology.processes is not None:
            for fact in ("rank", "local_rank", "world_size"):
                assert len(inputs[fact]) == 1, (where, fact, inputs[fact])
        for var in derivation.variables:
            fact = _ONE_FACT.get(var.name)
            if fact is not None and derivation.topology.processes is not None:
                named = var.provenance.split(":")[0]
                assert named == inputs[fact][0], (where, var.name, var.provenance)
    assert seen >= 100  # every fixture derives for PyTorch + JAX at least with MASTER_ADDR


def test_open_mpi_rank_provenance_is_its_rank_variable() -> None:
    from derive_env.pipeline import derive

    environ = load_fixture(FIXTURES / "ompi-in-salloc" / "rank3.env")[1]
    derived = derive(environ, {"ai.backend.distributed.frameworks": "pytorch,jax"})
    assert derived is not None
    provenance = {v.name: v.provenance for v in derived.variables}
    assert provenance["RANK"] == "OMPI_COMM_WORLD_RANK: rank"
    assert provenance["LOCAL_RANK"] == "OMPI_COMM_WORLD_LOCAL_RANK: local rank"
    assert provenance["WORLD_SIZE"] == "OMPI_COMM_WORLD_SIZE: world size"
    assert provenance["JAX_PROCESS_ID"] == "OMPI_COMM_WORLD_RANK: rank"
