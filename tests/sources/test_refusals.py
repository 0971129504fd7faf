"""sources/refusals.py: other launchers' variables, refused with the launcher named, or read
by their source; never a traceback (sources.md 3, contract section 7)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from derive_env.errors import DeriveEnvError, TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.sources import SOURCES, topology_from
from helpers import SRUN_TASK_3

ALL = {PREFIX + "frameworks": "pytorch,tensorflow,jax"}
HOSTS = ["sub1", "main1", "sub2"]  # HOSTS order of the session; canonical: main1, sub1, sub2
PPC = {**ALL, PREFIX + "pytorch-mode": "process-per-container"}
PROPERTY = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def error(environ: dict[str, str], labels: dict[str, str] = ALL) -> str:
    with pytest.raises(TopologyError) as info:
        derive(environ, labels)
    assert info.value.exit_code == 3
    return str(info.value)


NO_SOURCE = "and derive-env has no source for it yet (planned); "
RUN_WITHOUT = ("Run the command without derive-env (set the framework variables from the "
               "launcher's), or set label ai.backend.distributed.on-error=warn to run the "
               "command with the environment unchanged")

def partial(name: str, value: str, single: str, launcher: str, missing: str) -> str:
    """The refusal of a launcher's partial set of variables (sources/__init__.py)."""
    return (
        f"{name}={value!r}: expected {single} or unset: {launcher} states a job of more than "
        f"one process, but only part of its variables are set (not set: {missing}), and a "
        "partial set is never used: it may be left over from another job. Run derive-env in "
        "the launcher's own process (the launcher sets all of them), or set label "
        "ai.backend.distributed.on-error=warn to run the command with the environment unchanged")


@pytest.mark.parametrize(("environ", "message"), [
    ({"OMPI_COMM_WORLD_SIZE": "8"},
     partial("OMPI_COMM_WORLD_SIZE", "8", "1", "Open MPI (mpirun)",
             "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE")),
    ({"SLURM_NTASKS": "8", "SLURM_PROCID": "3"},
     partial("SLURM_PROCID", "3", "0", "a Slurm step (srun)",
             "SLURM_JOB_ID, SLURM_STEP_ID, SLURM_STEP_NODELIST, SLURM_STEP_NUM_NODES, "
             "SLURM_STEP_NUM_TASKS, SLURM_STEP_TASKS_PER_NODE, SLURM_LOCALID, SLURM_NODEID")),
    ({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2",
      "SLURM_NTASKS": "2", "ENVIRONMENT": "BATCH"},
     "SLURM_JOB_NUM_NODES='2': expected 1 here: a batch script or salloc shell runs on one "
     "node; only srun starts the others: run derive-env inside an srun step instead (srun "
     "--ntasks-per-node=1 derive-env -- torchrun ...)"),
    ({"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1"},
     partial("PMI_SIZE", "4", "1", "a PMI launcher (MPICH Hydra, Intel MPI, srun --mpi=pmi2, "
             "Flux)", "MPI_LOCALNRANKS")),
    ({"PMIX_RANK": "0", "PMIX_NAMESPACE": "prterun-x-1@1"},
     "PMIX_RANK='0': expected unset: a PMIx launcher (srun --mpi=pmix, prterun without Open "
     "MPI's variables) started this process (PMIX_RANK and PMIX_NAMESPACE are set) without "
     "saying how many processes the job has, and derive-env has no source for it yet "
     "(planned); describing a job of one process could be wrong. " + RUN_WITHOUT),
    ({"TORCHELASTIC_RUN_ID": "r1", "WORLD_SIZE": "4", "RANK": "1", "GROUP_WORLD_SIZE": "2"},
     partial("GROUP_WORLD_SIZE", "2", "1", "torchrun (torchelastic)",
             "LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT")),
    ({"MV2_COMM_WORLD_RANK": "2"},
     partial("MV2_COMM_WORLD_RANK", "2", "0", "MVAPICH2 (mpirun_rsh)",
             "MV2_COMM_WORLD_SIZE, MV2_COMM_WORLD_LOCAL_RANK, MV2_COMM_WORLD_LOCAL_SIZE")),
    ({"PALS_RANKID": "5"},
     partial("PALS_RANKID", "5", "0", "Cray PALS (mpiexec)",
             "PALS_LOCAL_RANKID, PALS_LOCAL_SIZE, PALS_NODEID, PMI_SIZE")),
    ({"JOB_COMPLETION_INDEX": "0", "KUBERNETES_SERVICE_HOST": "10.96.0.1"},
     "JOB_COMPLETION_INDEX='0': expected unset: a Kubernetes indexed job started this process "
     "(JOB_COMPLETION_INDEX and KUBERNETES_SERVICE_HOST are set) without saying how many "
     "processes the job has, and derive-env has no source for it yet (planned); describing a "
     "job of one process could be wrong. " + RUN_WITHOUT),
    ({"SM_HOSTS": '["algo-1","algo-2"]', "SM_CURRENT_HOST": "algo-2"},
     "SM_HOSTS='[\"algo-1\",\"algo-2\"]': expected a JSON list of one host or unset: SageMaker "
     f"states a job of more than one host, {NO_SOURCE}derive-env would describe a job of one "
     "host. " + RUN_WITHOUT),
    ({"FLUX_JOB_SIZE": "4"}, None), ({"JSM_NAMESPACE_SIZE": "6"}, None),
    ({"AWS_BATCH_JOB_NUM_NODES": "3", "AWS_BATCH_JOB_NODE_INDEX": "0"}, None),
], ids=lambda v: next(iter(v)) if isinstance(v, dict) else "")
def test_another_launchers_multi_process_job_is_refused(environ, message) -> None:
    for labels in (ALL, PPC):
        text = error(environ, labels)
        if message is not None:
            assert text == message
        else:
            name = next(iter(environ))
            assert text.startswith(f"{name}={environ[name]!r}: expected ")
            assert NO_SOURCE in text


def test_an_srun_task_is_read_by_the_slurm_source() -> None:
    """srun -N2 -n8, task 3 (was refused before the Slurm source): per-process variables."""
    derivation = derive(SRUN_TASK_3, ALL)
    assert derivation is not None
    changes = derivation.changes()
    assert {k: changes[k] for k in ("MASTER_ADDR", "RANK", "LOCAL_RANK", "WORLD_SIZE",
                                    "LOCAL_WORLD_SIZE", "NODE_RANK")} == {
        "MASTER_ADDR": "node1", "RANK": "3", "LOCAL_RANK": "3", "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "4", "NODE_RANK": "0"}
    assert not any(name.startswith("PET_") for name in changes)


@pytest.mark.parametrize("environ", [
    {"SLURM_JOB_ID": "7"},  # an ssh session into an allocated node
    {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_NUM_NODES": "1",
     "SLURM_NTASKS": "8", "SLURM_PROCID": "0"},  # single-node batch script
    {**SRUN_TASK_3, "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_NUM_NODES": "1",
     "SLURM_STEP_TASKS_PER_NODE": "1", "SLURM_STEP_NODELIST": "node1",
     "SLURM_PROCID": "0", "SLURM_LOCALID": "0"},  # srun -n1 in a 2-node allocation
    {"OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0",
     "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"},
    # mpirun -np 1 (Open MPI 4.1, recorded): PMIx's variables too, Open MPI's say the size
    {"OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_NODE_RANK": "0",
     "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "PMIX_RANK": "0",
     "PMIX_NAMESPACE": "37879809"},
    {"SM_HOSTS": '["algo-1"]', "SM_CURRENT_HOST": "algo-1"},
    {"TORCHELASTIC_RUN_ID": "r", "WORLD_SIZE": "1", "RANK": "0", "GROUP_WORLD_SIZE": "1"},
    {"JOB_COMPLETION_INDEX": "0"}, {"KUBERNETES_SERVICE_HOST": "10.96.0.1"},
    {"OMPI_MCA_btl_tcp_if_exclude": "lo,docker0"},  # set by Backend.AI, not a launcher
], ids=lambda e: ",".join(sorted(e))[:60])
def test_single_process_or_no_launcher_is_a_single_container(environ) -> None:
    topology = topology_from(environ)
    assert (topology.num_nodes, topology.node_rank, topology.multi_node) == (1, 0, False)


def test_mpirun_inside_a_backendai_session_takes_ranks_from_mpirun(backendai_env) -> None:
    """Ranks from Open MPI, nodes from the session (was refused before the MPI source)."""
    environ = {**backendai_env(HOSTS, "sub1"), "OMPI_COMM_WORLD_SIZE": "6",
               "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
               "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    torch_jax = {PREFIX + "frameworks": "pytorch,jax"}
    derivation = derive(environ, torch_jax)
    assert derivation is not None
    changes = derivation.changes()
    assert {k: changes[k] for k in ("MASTER_ADDR", "RANK", "LOCAL_RANK", "WORLD_SIZE",
                                    "LOCAL_WORLD_SIZE", "NODE_RANK")} == {
        "MASTER_ADDR": "main1", "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "6",
        "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "1"}
    assert derivation.topology.layers == (
        "sources seen (innermost first): openmpi (Open MPI (mpirun)), backendai (a Backend.AI "
        "session)",
        "process layer: openmpi",
        "node layer: node count and rank from backendai; hosts from backendai",
    )
    rank0 = {**environ, "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}
    assert error(rank0, torch_jax).startswith(
        "rank 0 (OMPI_COMM_WORLD_RANK + OMPI_COMM_WORLD_LOCAL_RANK + OMPI_COMM_WORLD_SIZE + "
        "OMPI_COMM_WORLD_LOCAL_SIZE) runs on sub1, node rank 1 (checked there only), but every "
        "framework needs it on node rank 0 (main1). The launcher's node order differs from "
        "derive-env's: give it derive-env's, `derive-env --dry-run --format openmpi-hostfile > "
        "hosts; mpirun --hostfile hosts ...` (MPICH, Intel MPI: --format mpich-hostfile, "
        "mpiexec -f hosts)")
    # TensorFlow lists every task: Open MPI states only this node's processes.
    assert error(environ, ALL).startswith("TF_CONFIG cannot be built: it lists every task's")


def test_every_launcher_has_a_complete_set() -> None:
    assert all(launcher.detect for launcher in SOURCES)
    assert len({launcher.name for launcher in SOURCES}) == len(SOURCES)


LAUNCHER_NAMES = sorted({n for lnch in SOURCES if lnch.states or lnch.size
                         for n in (*(lnch.marker or lnch.detect), *dict(lnch.states))})


@given(
    launcher=st.dictionaries(st.sampled_from(LAUNCHER_NAMES),
                             st.one_of(st.sampled_from(["0", "1", "2", "01", "", "x", "[]",
                                                        '["a"]', "1:1"]), st.text(max_size=8)),
                             max_size=8),
    with_session=st.booleans(),
)
@PROPERTY
def test_launcher_variables_never_crash(backendai_env, launcher, with_session) -> None:
    environ = {**(backendai_env(HOSTS, "sub1") if with_session else {}), **launcher}
    try:
        derive(environ, ALL)
    except DeriveEnvError as exc:
        # Any message (a variable's, or two layers that disagree), never a traceback.
        assert isinstance(exc, TopologyError)
        assert str(exc)


def test_huge_launcher_value_is_an_error_not_a_traceback() -> None:
    """5000 digits (int() refuses past 4300): a TopologyError naming the variable."""
    huge = "1" * 5000
    with pytest.raises(TopologyError) as info:
        derive({"WORLD_SIZE": huge}, ALL)
    assert info.value.exit_code == 3
    assert str(info.value).startswith("WORLD_SIZE='" + "1" * 200 + "... (5000 characters)'")
