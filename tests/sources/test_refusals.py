"""sources/refusals.py: other launchers' variables, refused with the launcher named, or read
by their source; never a traceback (sources.md 3, contract section 7)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from derive_env.errors import DeriveEnvError, TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.sources import BY_NAME, SOURCES, has_size, seen_sources, states_of
from derive_env.sources.compose import topology_from
from helpers import SRUN_TASK_3
from support.jobs import JOBS
from support.k8s import lws_pod

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


NO_SOURCE = "and derive-env cannot read its job from these variables; "
RUN_WITHOUT = ("Run the command without derive-env (set the framework variables from the "
               "launcher's), or set label ai.backend.distributed.on-error=warn to run the "
               "command with the environment unchanged")

def torchrun_fix(how: str) -> str:
    """The fix of a node-level manager no module reads (sources/__init__.py)."""
    return (f"Start torchrun from its variables (torchrun {how} --no-python derive-env -- "
            "python train.py), so that derive-env reads each worker torchrun starts; or, for "
            "a job of one node, choose --source none (or DERIVE_ENV_SOURCE=none); or set label "
            "ai.backend.distributed.on-error=warn to run the command with the environment "
            "unchanged")


def partial(name: str, value: str, single: str, launcher: str, missing: str,
            unit: str = "process") -> str:
    """The refusal of a launcher's partial set of variables (sources/__init__.py)."""
    return (
        f"{name}={value!r}: expected {single} or unset: {launcher} states a job of more than "
        f"one {unit}, but only part of its variables are set (not set: {missing}), and a "
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
     "run derive-env inside srun, after it: srun --ntasks-per-node=1 derive-env -- torchrun "
     "..., or one task per GPU: srun --ntasks-per-node=<GPUs per node> derive-env -- python "
     "train.py. Here it runs in a batch script or salloc shell (no srun step; derive-env -- "
     "srun ... runs it there too), one process on one node of the job's "
     "SLURM_JOB_NUM_NODES='2': only srun starts processes on the others"),
    ({"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1"},
     partial("PMI_SIZE", "4", "1", "a PMI launcher (MPICH Hydra, Intel MPI, srun --mpi=pmi2, "
             "Flux)", "MPI_LOCALNRANKS")),
    ({"PMIX_RANK": "0", "PMIX_NAMESPACE": "prterun-x-1@1"},
     "PMIX_RANK='0': expected unset: a PMIx launcher (srun --mpi=pmix, prterun without Open "
     "MPI's variables) started this process (PMIX_RANK and PMIX_NAMESPACE are set) without "
     "saying how many processes the job has, and derive-env cannot read its job from these "
     "variables; describing a job of one process could be wrong. " + RUN_WITHOUT),
    ({"TORCHELASTIC_RUN_ID": "r1", "WORLD_SIZE": "4", "RANK": "1", "GROUP_WORLD_SIZE": "2"},
     partial("GROUP_WORLD_SIZE", "2", "1", "torchrun (torchelastic)",
             "LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT")),
    ({"MV2_COMM_WORLD_RANK": "2"},
     partial("MV2_COMM_WORLD_RANK", "2", "0", "MVAPICH2 (mpirun_rsh)",
             "MV2_COMM_WORLD_SIZE, MV2_COMM_WORLD_LOCAL_RANK, MV2_COMM_WORLD_LOCAL_SIZE")),
    ({"PALS_RANKID": "5"},
     partial("PALS_RANKID", "5", "0", "Cray PALS (mpiexec)",
             "PALS_LOCAL_RANKID, PALS_LOCAL_SIZE, PALS_NODEID, PMI_SIZE")),
    # Read now (sources/managers/jobset.py): refused without its pod count, on every index.
    ({"JOB_COMPLETION_INDEX": "0", "KUBERNETES_SERVICE_HOST": "10.96.0.1",
      "HOSTNAME": "train-0"},
     "DERIVE_ENV_NNODES='': expected the Job's spec.completions, set in the pod template's "
     "container env: `- name: DERIVE_ENV_NNODES` `value: \"<spec.completions of train>\"` "
     "(a Kubernetes Indexed Job does not put its pod count in the pod's environment)"),
    # Read now (sources/managers/flux.py, sources/managers/lsf.py): a partial set is refused
    # as such.
    ({"FLUX_JOB_SIZE": "4"},
     partial("FLUX_JOB_SIZE", "4", "1", "Flux", "FLUX_JOB_ID, FLUX_TASK_RANK")),
    ({"JSM_NAMESPACE_SIZE": "6"},
     partial("JSM_NAMESPACE_SIZE", "6", "1", "LSF jsrun",
             "JSM_NAMESPACE_RANK, LSB_JOBID, LSB_DJOB_RANKFILE")),
    # Read now (sources/managers/aws_batch.py): a partial set is refused, naming what is missing.
    ({"AWS_BATCH_JOB_NUM_NODES": "3", "AWS_BATCH_JOB_NODE_INDEX": "0"},
     "AWS_BATCH_JOB_NUM_NODES='3': expected 1 or unset: an AWS Batch multi-node parallel job "
     "states a job of more than one node, but only part of its variables are set (not set: "
     "AWS_BATCH_JOB_ID, AWS_BATCH_JOB_MAIN_NODE_INDEX), and a partial set is never used: it "
     "may be left over from another job. Run derive-env in the launcher's own process (the "
     "launcher sets all of them), or set label ai.backend.distributed.on-error=warn to run "
     "the command with the environment unchanged"),
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
    {"KUBERNETES_SERVICE_HOST": "10.96.0.1"},
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
        # the hook's path: no command; torchrun under 2 ranks per node would be refused
        "command: none (the hook's path): one worker per process (RANK, LOCAL_RANK, "
        "WORLD_SIZE ...); `-- torchrun ...`: refused (exit 3), each would start a job of its "
        "own; `-- python train.py`: one worker per process (RANK, LOCAL_RANK, WORLD_SIZE ...)",
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


LAUNCHER_NAMES = sorted({n for lnch in SOURCES if states_of(lnch) or has_size(lnch)
                         for n in (*(lnch.marker or lnch.detect), *dict(states_of(lnch)))})


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


# ------------------------------------------ every manager of sources-cloud.md 25: refused

TFJOB_CONFIG = ('{"cluster": {"chief": ["j-chief-0.ns.svc:2222"], "worker": '
                '["j-worker-0.ns.svc:2222", "j-worker-1.ns.svc:2222"]}, '
                '"task": {"type": "worker", "index": 1}, "environment": "cloud"}')
SAGEMAKER_FILE = "/opt/ml/input/config/resourceconfig.json"
RENDEZVOUS = "/run/determined/info/rendezvous.json"
#: manager -> (the environment of node 1 of a 2-node job (files: path -> text), the
#: variable named, its value, what a job of one holds, the title, the unit).
MANAGERS = {
    # sources/managers/gridengine.py: a task qrsh -inherit started without -V has no PE_HOSTFILE;
    # exec_job.c sets QRSH_PORT in it only when it belongs to a job of several hosts.
    "gridengine-task": ({"JOB_ID": "7", "PE": "mpi", "QRSH_PORT": "n1:4711"}, {},
                        "QRSH_PORT", None, "unset", "a Grid Engine task (qrsh -inherit)", "host"),
    "lws": ({"LWS_LEADER_ADDRESS": "lws-0.lws.default", "LWS_GROUP_SIZE": "2",
             "LWS_WORKER_INDEX": "1", "KUBERNETES_SERVICE_HOST": "10.96.0.1"}, {},
            "LWS_GROUP_SIZE", "2", "1 or unset", "a LeaderWorkerSet group", "node"),
    "tfjob": ({"TF_CONFIG": TFJOB_CONFIG, "KUBERNETES_SERVICE_HOST": "10.96.0.1"}, {},
              "TF_CONFIG", TFJOB_CONFIG, "a cluster of one task or unset",
              "a TF_CONFIG (Kubeflow TFJob, Volcano, Vertex AI)", "task"),
    "vertex": ({"CLOUD_ML_JOB_ID": "1", "CLUSTER_SPEC": '{"cluster": {"workerpool0": '
                '["cmle-0:2222"], "workerpool1": ["cmle-1:2222"]}, "task": {"type": '
                '"workerpool1", "index": 0}}'}, {}, "CLUSTER_SPEC", None,
               "a cluster of one task or unset", "a Vertex AI custom job", "task"),
    "tpu": ({"TPU_WORKER_ID": "1", "TPU_WORKER_HOSTNAMES": "t-0.svc,t-1.svc"}, {},
            "TPU_WORKER_HOSTNAMES", "t-0.svc,t-1.svc", "one host or unset",
            "a TPU slice (GKE, LeaderWorkerSet or KubeRay)", "host"),
    "determined": ({"DET_MASTER": "http://m:8080", "DET_ALLOCATION_ID": "a.1",
                    "DET_SLOT_IDS": "[0,1]", "DET_TASK_TYPE": "TRIAL"},
                   {RENDEZVOUS: '{"container_addrs": ["10.0.0.1", "10.0.0.2"], '
                    '"container_rank": 1, "container_slot_counts": [2, 2]}'},
                   f"container_addrs in {RENDEZVOUS}",
                   '["10.0.0.1", "10.0.0.2"]', "a list of one host or unset",
                   "a Determined trial", "container"),
    "aws-batch": ({"AWS_BATCH_JOB_ID": "j#1", "AWS_BATCH_JOB_NODE_INDEX": "1",
                   "AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
                   "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.0.1"}, {},
                  "AWS_BATCH_JOB_NUM_NODES", "2", "1 or unset",
                  "an AWS Batch multi-node parallel job", "node"),
    "azure-mpi": ({"AZ_BATCH_MASTER_NODE": "10.0.0.4:6105", "AZUREML_RUN_ID": "r",
                   "AZUREML_NODE_COUNT": "2", "OMPI_COMM_WORLD_SIZE": "2",
                   "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                   "OMPI_COMM_WORLD_LOCAL_SIZE": "1"}, {},
                  "AZ_BATCH_MASTER_NODE", "10.0.0.4:6105", "unset",
                  "an Azure ML MPI job (Azure Batch multi-instance)", "node"),
    "kubeflow-jax": ({"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1",
                      "JAX_COORDINATOR_ADDRESS": "tj-node-0-0.tj:6666"}, {},
                     "JAX_NUM_PROCESSES", "2", "1 or unset", "a Kubeflow TrainJob (JAX runtime)",
                     "process"),
    "kubeflow-jaxjob": ({"COORDINATOR_ADDRESS": "j-worker-0", "COORDINATOR_PORT": "6666",
                         "NUM_PROCESSES": "2", "PROCESS_ID": "1"}, {}, "NUM_PROCESSES", "2",
                        "1 or unset", "a Kubeflow JAXJob (v1)", "process"),
    "xgboost": ({"DMLC_TRACKER_URI": "tj-node-0-0.tj", "DMLC_TRACKER_PORT": "9091",
                 "DMLC_TASK_ID": "1", "DMLC_NUM_WORKER": "2", "DERIVE_ENV_NNODES": "2"}, {},
                "DMLC_NUM_WORKER", "2",
                "1 or unset", "a Kubeflow TrainJob (XGBoost runtime)", "process"),
    "htcondor": ({"_CONDOR_PROCNO": "1", "_CONDOR_NPROCS": "2",
                  "_CONDOR_REMOTE_SPOOL_DIR": "/spool"}, {}, "_CONDOR_NPROCS", "2",
                 "1 or unset", "an HTCondor parallel-universe job", "node"),
    "pbs": ({"PBS_JOBID": "7.pbs", "PBS_NODEFILE": "/var/spool/pbs/aux/7.pbs",
             "PBS_ENVIRONMENT": "PBS_BATCH", "PBS_NODENUM": "0"},
            {"/var/spool/pbs/aux/7.pbs": "n1\nn1\nn2\nn2\n"}, "PBS_NODEFILE",
            "/var/spool/pbs/aux/7.pbs", "a node file of one host or unset",
            "an OpenPBS/Torque job", "node"),
    "lsf": ({"LSB_JOBID": "7", "LSB_MCPU_HOSTS": "hostA 4 hostB 4"}, {}, "LSB_MCPU_HOSTS",
            "hostA 4 hostB 4", "one host and its slots or unset", "an LSF job", "host"),
    # A qrsh -inherit -V task on the second host (exec_job.c: NHOSTS and NSLOTS of its part).
    "gridengine": ({"JOB_ID": "7", "PE_HOSTFILE": "/opt/sge/pe_hostfile", "NSLOTS": "4",
                    "NHOSTS": "1", "PE": "mpi", "SGE_ROOT": "/opt/sge", "HOSTNAME": "n1"},
                   {"/opt/sge/pe_hostfile": "n0 4 all.q@n0 UNDEFINED\nn1 4 all.q@n1 UNDEFINED\n"},
                   "NHOSTS", "2", "1 or unset", "a Grid Engine parallel job", "host"),
    "mpi-operator": ({"K_MPI_JOB_ROLE": "launcher",
                      "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile"}, {},
                     "K_MPI_JOB_ROLE", "launcher", "worker (a rank mpirun started) or unset",
                     "a Kubeflow MPIJob launcher", "process"),
    "ray-train": ({"RAY_RAYLET_PID": "3100", "ACCELERATE_TORCH_DEVICE": "cuda:0",
                   "NODE_RANK": "1", "RANK": "2",
                   "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
                   "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "41000"}, {}, "WORLD_SIZE", "4",
                  "1 or unset", "a Ray Train worker", "process"),
    "azureml-pytorch": ({"AZUREML_RUN_ID": "r", "RANK": "1", "WORLD_SIZE": "2",
                         "LOCAL_RANK": "0", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.4",
                         "MASTER_PORT": "6105", "AZUREML_NODE_COUNT": "2"}, {}, "WORLD_SIZE",
                        "2", "1 or unset",
                        "an Azure ML PyTorch-distribution process", "process"),
}

#: The managers of sources-cloud.md 25 that a source now reads (same form as MANAGERS).
READ_MANAGERS = {
    "sagemaker-platform": ({"TRAINING_JOB_NAME": "j", "TRAINING_JOB_ARN": "arn:aws:sagemaker"},
                           {SAGEMAKER_FILE: '{"current_host": "algo-2", "hosts": ["algo-1", '
                            '"algo-2"]}'}, f"hosts in {SAGEMAKER_FILE}", '["algo-1", "algo-2"]',
                           "a list of one host or unset", "an Amazon SageMaker training job",
                           "host"),
    "skypilot": ({"SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2", "SKYPILOT_NODE_RANK": "1",
                  "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NUM_GPUS_PER_NODE": "8",
                  "SKYPILOT_TASK_ID": "sky-1"}, {},
                 "SKYPILOT_NUM_NODES", "2", "1 or unset", "a SkyPilot task", "node"),
    "dstack": ({"DSTACK_RUN_ID": "r", "DSTACK_NODES_IPS": "10.0.0.1\n10.0.0.2",
                "DSTACK_MASTER_NODE_IP": "10.0.0.1", "DSTACK_NODE_RANK": "1",
                "DSTACK_NODES_NUM": "2", "DSTACK_GPUS_PER_NODE": "8"}, {},
               "DSTACK_NODES_NUM", "2", "1 or unset", "a dstack task", "node"),
}


#: The managers of MANAGERS a source now reads (their environment derives their job).
NOW_READ = {"lws": ("lws", 2, 1), "tfjob": ("tf-config", 3, 2), "vertex": ("vertex", 2, 1),
            "tpu": ("gke-tpu", 2, 1),
            "determined": ("determined", 2, 1), "ray-train": ("ray-train", None, 1),
            "aws-batch": ("aws-batch", 2, 1), "azure-mpi": ("azureml-mpi", 2, None),
            "azureml-pytorch": ("azureml-pytorch", 2, 1), "gridengine": ("gridengine", 2, 1),
            "kubeflow-jax": ("kubeflow-jax", 2, 1), "kubeflow-jaxjob": ("kubeflow-jaxjob", 2, 1),
            "xgboost": ("kubeflow-xgboost", 2, 1)}
#: Of those, the ones that state no host list: TensorFlow's TF_CONFIG is refused, saying so.
NO_HOST_LIST = {"ray-train", "aws-batch", "azure-mpi", "azureml-pytorch"}
#: The managers of MANAGERS a source now reads and that refuse this node's environment with
#: the source's own fix: a batch script of several hosts (sources/managers/pbs.py,
#: sources/managers/lsf.py),
#: a node whose master no variable states (htcondor, its roles), -> the message's start.
READ_AND_REFUSED = {
    "pbs": "run derive-env inside the launcher, after it: pbsdsh -u derive-env -- torchrun "
           "... (one task per host), or mpiexec ... derive-env -- python train.py. Here",
    "lsf": "run derive-env inside jsrun or mpirun, after it: jsrun ... derive-env -- python "
           "train.py. Here it runs in the batch script",
    "htcondor": "MASTER_ADDR='': expected the host of rank 0 (it also gives JAX's "
                "coordinator): an HTCondor parallel-universe job states no host list",
}
#: Refused by its own source (tests/sources/test_mpi_operator.py): the launcher process.
OWN_REFUSAL = {"mpi-operator"}
REFUSED = sorted(m for m in MANAGERS
                 if m not in NOW_READ and m not in READ_AND_REFUSED and m not in OWN_REFUSAL)


def reader(contents: dict[str, str]):
    """The edge's file reader (cli.read_files) as the tests give it: path -> text or None."""
    return lambda paths: {path: contents.get(path) for path in paths}


@pytest.mark.parametrize("manager", REFUSED)
def test_a_manager_without_a_source_is_refused_naming_it_and_the_fix(manager: str) -> None:
    """Never a silent single-node job: PyTorch-only, JAX-only and TF images alike, exit 3;
    the message names the variable, the manager, and ends in the line's fix."""
    from derive_env.sources import SOURCES

    environ, files, name, value, expected, title, unit = MANAGERS[manager]
    line = next(line for line in SOURCES if line.title == title)
    value = environ.get(name, value) if value is None else value
    for frameworks in ("pytorch", "jax", "tensorflow"):
        with pytest.raises(TopologyError) as info:
            derive(environ, {PREFIX + "frameworks": frameworks}, files=reader(files))
        assert info.value.exit_code == 3
        assert str(info.value) == (
            f"{name}={value!r}: expected {expected}: {title} states a job of more than one "
            f"{unit}, {NO_SOURCE}derive-env would describe a job of one {unit}. {line.fix}")


@pytest.mark.parametrize("manager", sorted(READ_MANAGERS))
def test_a_manager_with_a_source_is_read_not_refused(manager: str) -> None:
    """SkyPilot and dstack (sources/managers/launchtools.py), SageMaker
    (sources/managers/sagemaker.py): node
    1 of 2 is read, master = the first host, for every framework."""
    environ, files, *_ = READ_MANAGERS[manager]
    for frameworks in ("pytorch", "jax", "tensorflow"):
        derivation = derive(environ, {PREFIX + "frameworks": frameworks}, files=reader(files))
        assert derivation is not None
        topology = derivation.topology
        assert (topology.source, topology.num_nodes, topology.node_rank) == (manager, 2, 1)
        assert topology.nodes[0].host in ("10.0.0.1", "algo-1")


@pytest.mark.parametrize("manager", sorted(NOW_READ))
def test_a_manager_a_source_reads_derives_its_job(manager: str) -> None:
    """No longer refused: its source reads the job (node rank, nodes as NOW_READ says)."""
    environ, files, *_ = MANAGERS[manager]
    # The Kubeflow JAX and XGBoost pods know only the coordinator's host: no TF_CONFIG.
    kubeflow = manager in ("kubeflow-jax", "kubeflow-jaxjob", "xgboost")
    for frameworks in ("pytorch", "jax") if kubeflow else ("pytorch", "jax", "tensorflow"):
        if frameworks == "tensorflow" and manager in NO_HOST_LIST:
            with pytest.raises(TopologyError, match=r"^TF_CONFIG cannot be built: "):
                derive(environ, {PREFIX + "frameworks": frameworks}, files=reader(files))
            continue
        derivation = derive(environ, {PREFIX + "frameworks": frameworks}, files=reader(files))
        assert derivation is not None
        topology = derivation.topology
        assert (topology.source, topology.num_nodes, topology.node_rank) == NOW_READ[manager]


@pytest.mark.parametrize("manager", sorted(READ_AND_REFUSED))
def test_a_read_manager_refuses_what_it_cannot_describe_with_its_fix(manager: str) -> None:
    """PBS and LSF batch scripts of two hosts, an HTCondor node without MASTER_ADDR: read,
    and refused with the source's fix (never the "no source" refusal, never one node)."""
    environ, files, *_ = MANAGERS[manager]
    for frameworks in ("pytorch", "jax"):
        with pytest.raises(TopologyError) as info:
            derive(environ, {PREFIX + "frameworks": frameworks}, files=reader(files))
        assert info.value.exit_code == 3
        assert str(info.value).startswith(READ_AND_REFUSED[manager])
        assert NO_SOURCE not in str(info.value)


def test_the_fixes_say_what_to_set() -> None:
    from derive_env.sources import BY_NAME

    assert BY_NAME["skypilot"].fix == torchrun_fix(
        "--nnodes=$SKYPILOT_NUM_NODES --node-rank=$SKYPILOT_NODE_RANK "
        "--master-addr=$(echo \"$SKYPILOT_NODE_IPS\" | head -n1)")
    assert BY_NAME["dstack"].fix == torchrun_fix(
        "--nnodes=$DSTACK_NODES_NUM --node-rank=$DSTACK_NODE_RANK "
        "--master-addr=$DSTACK_MASTER_NODE_IP")
    assert BY_NAME["lws"].fix == torchrun_fix(
        "--nnodes=$LWS_GROUP_SIZE --node-rank=$LWS_WORKER_INDEX "
        "--master-addr=$LWS_LEADER_ADDRESS")
    assert BY_NAME["tf-config"].fix == (
        "Run the command without derive-env (TensorFlow reads the TF_CONFIG its manager set), "
        "or, for a job of one node, choose --source none (or DERIVE_ENV_SOURCE=none); or set "
        "label ai.backend.distributed.on-error=warn to run the command with the environment "
        "unchanged")
    assert BY_NAME["mpi-operator-launcher"].fix == (
        "Run derive-env in the command mpirun starts (mpirun ... derive-env -- python "
        "train.py), not around mpirun; or set label ai.backend.distributed.on-error=warn to "
        "run the command with the environment unchanged")


@pytest.mark.parametrize("manager", sorted(MANAGERS))
def test_a_managers_job_of_one_is_a_single_container(manager: str) -> None:
    """The same managers stating a job of one node (or process): a single container."""
    one = {"SKYPILOT_NUM_NODES": "1", "SKYPILOT_NODE_RANK": "0", "DSTACK_NODES_NUM": "1",
           "DSTACK_NODE_RANK": "0", "LWS_GROUP_SIZE": "1", "LWS_WORKER_INDEX": "0",
           "VC_WORKER_NUM": "0", "TF_CONFIG": '{"cluster": {"worker": ["localhost:2222"]}, '
           '"task": {"type": "worker", "index": 0}}', "CLUSTER_SPEC": '{"cluster": '
           '{"workerpool0": ["cmle-0:2222"]}, "task": {"type": "workerpool0", "index": 0}}',
           "TPU_WORKER_HOSTNAMES": "t-0.svc",
           "TPU_WORKER_ID": "0", "AWS_BATCH_JOB_NUM_NODES": "1",
           "AWS_BATCH_JOB_NODE_INDEX": "0", "JAX_NUM_PROCESSES": "1", "JAX_PROCESS_ID": "0",
           "NUM_PROCESSES": "1", "PROCESS_ID": "0", "DMLC_NUM_WORKER": "1", "DMLC_TASK_ID": "0",
           "DERIVE_ENV_NNODES": "1",
           "_CONDOR_NPROCS": "1", "_CONDOR_PROCNO": "0", "LSB_MCPU_HOSTS": "hostA 4",
           "NHOSTS": "1", "K_MPI_JOB_ROLE": "worker", "WORLD_SIZE": "1", "RANK": "0",
           "NODE_RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "AWS_BATCH_JOB_ID": "j#0", "OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0",
           "AZUREML_NODE_COUNT": "1", "QRSH_PORT": ""}
    environ, files, *_ = MANAGERS[manager]
    environ = {**environ, **{k: v for k, v in one.items() if k in environ}}
    files = {path: text.replace('"algo-1", "algo-2"', '"algo-1"').replace(
        '"10.0.0.1", "10.0.0.2"', '"10.0.0.1"').replace("n2\nn2\n", "").replace(
        '"container_rank": 1, "container_slot_counts": [2, 2]',
        '"container_rank": 0, "container_slot_counts": [2]').replace(
        "n0 4 all.q@n0 UNDEFINED\n", "")
        for path, text in files.items()}
    environ.pop("AZ_BATCH_MASTER_NODE", None)  # set only for a job of several nodes
    topology = topology_from(environ, files=reader(files))
    assert (topology.num_nodes, topology.node_rank, topology.multi_node) == (1, 0, False)


def test_a_pbs_node_file_that_cannot_be_read_is_refused_with_the_fix() -> None:
    """Read now (sources/managers/pbs.py): an unreadable node file (a sister MoM without
    gen_nodefile_on_sister_mom) says what to set, on every node alike."""
    assert error({"PBS_JOBID": "7", "PBS_NODEFILE": "/nodes"}) == (
        "PBS_NODEFILE='/nodes': expected a file this process can read (the job's hosts; the "
        "master is its first line): the MoM writes it on the first host only, unless the MoM "
        "option gen_nodefile_on_sister_mom is 1 (set it, and make $PBS_HOME/aux visible "
        "inside the container), or set MASTER_ADDR to the first host of the node file for "
        "every process")


@pytest.mark.parametrize("name", ["JOB_COMPLETION_INDEX", "PMIX_RANK"])
@pytest.mark.parametrize("index", ["0", "1", "7"])
def test_a_lone_index_is_refused_on_every_index_alike(name: str, index: str) -> None:
    """Contract section 7: index 0 must not train alone while the others stop."""
    title = {"JOB_COMPLETION_INDEX": "a Kubernetes Indexed Job",
             "PMIX_RANK": "a PMIx launcher (srun --mpi=pmix, prterun without Open MPI's "
                          "variables)"}[name]
    unit, units = ("pod", "pods") if name == "JOB_COMPLETION_INDEX" else ("process",
                                                                           "processes")
    why = ("and only part of its variables are set (not set: KUBERNETES_SERVICE_HOST); "
           if name == "JOB_COMPLETION_INDEX" else NO_SOURCE)
    text = error({name: index})
    assert text.startswith(
        f"{name}={index!r}: expected unset: {title} started this process ({name} is set) "
        f"without saying how many {units} the job has, {why}describing a job of one "
        f"{unit} could be wrong. ")


def test_a_manager_inside_a_job_another_source_states_is_that_jobs() -> None:
    """The fix works: torchrun started from SkyPilot's variables, derive-env in a worker."""
    environ = {**READ_MANAGERS["skypilot"][0], "TORCHELASTIC_RUN_ID": "r", "RANK": "9",
               "LOCAL_RANK": "1", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8",
               "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1",
               "MASTER_PORT": "29500"}
    topology = topology_from(environ)
    assert (topology.num_nodes, topology.node_rank) == (2, 1)


def test_a_kept_tf_config_is_not_said_unset() -> None:
    """--explain says what was kept: a one-task TF_CONFIG is kept, never "not set"."""
    one = '{"cluster": {"worker": ["localhost:2222"]}, "task": {"type": "worker", "index": 0}}'
    derivation = derive({"TF_CONFIG": one}, {PREFIX + "frameworks": "tensorflow"})
    assert derivation is not None
    notes = [n for n in derivation.notes if "TF_CONFIG" in n]
    assert notes == ["TF_CONFIG kept as set (a single node: derive-env derives "
                     "none, and TensorFlow reads the one set)"]


def test_source_none_in_a_larger_job_warns() -> None:
    """--source none wins, but not silently (contract section 11)."""
    environ = {"JOB_ID": "7", "PE": "mpi", "QRSH_PORT": "n1:4711"}  # a refused line
    topology = topology_from(environ, "none")
    assert topology.num_nodes == 1
    assert topology.warnings == (
        "source none chosen (--source or DERIVE_ENV_SOURCE): a Grid Engine task (qrsh "
        "-inherit) states a job of more than one host (QRSH_PORT='n1:4711'), and this process "
        "derives a job of one; if that job has more than one node, each trains alone",)
    # A manager a source reads: its variables are named as set and ignored.
    assert topology_from(READ_MANAGERS["skypilot"][0], "none").warnings == (
        "source none chosen (--source or DERIVE_ENV_SOURCE): the variables of skypilot are "
        "set and ignored; if they describe this job, every process may derive another job "
        "than its launcher started",)
    assert topology_from({}, "none").warnings == ()


def _manager_environments():
    """Hypothesis: any listed manager's job of n > 1 nodes, any node of it, with the
    variables of the other managers' single-node form or absent."""
    return st.tuples(st.sampled_from(sorted(MANAGERS)), st.integers(2, 64),
                     st.data())


@given(case=_manager_environments())
@PROPERTY
def test_no_managers_multi_node_job_derives_a_single_node_topology(case) -> None:
    """No environment a listed manager sets for a job of more than one node derives a
    single-node topology with exit 0: it is read or refused."""
    from derive_env.sources import SOURCES

    manager, nodes, data = case
    environ, files, name, _, _, title, _ = MANAGERS[manager]
    line = next(line for line in SOURCES if line.title == title)
    rank = data.draw(st.integers(0, nodes - 1))
    sized = {"SKYPILOT_NUM_NODES": str(nodes), "SKYPILOT_NODE_RANK": str(rank),
             "DSTACK_NODES_NUM": str(nodes), "DSTACK_NODE_RANK": str(rank),
             "LWS_GROUP_SIZE": str(nodes), "LWS_WORKER_INDEX": str(rank),
             "AWS_BATCH_JOB_NUM_NODES": str(nodes), "AWS_BATCH_JOB_NODE_INDEX": str(rank),
             "JAX_NUM_PROCESSES": str(nodes), "JAX_PROCESS_ID": str(rank),
             "NUM_PROCESSES": str(nodes), "PROCESS_ID": str(rank),
             "DMLC_NUM_WORKER": str(nodes), "DMLC_TASK_ID": str(rank),
             "_CONDOR_NPROCS": str(nodes), "_CONDOR_PROCNO": str(rank),
             "NHOSTS": str(nodes), "WORLD_SIZE": str(nodes), "RANK": str(rank),
             "JOB_COMPLETION_INDEX": str(rank), "PMIX_RANK": str(rank),
             "VC_TASK_INDEX": str(rank), "VC_WORKER_NUM": str(nodes - 1),
             "TPU_WORKER_ID": str(rank),
             "TPU_WORKER_HOSTNAMES": ",".join(f"t-{i}" for i in range(nodes)),
             "LSB_MCPU_HOSTS": " ".join(f"h{i} 4" for i in range(nodes))}
    environ = {**environ, **{k: v for k, v in sized.items() if k in environ}}
    # The manager sets its whole set; anything else it sets may be missing (user-unset).
    optional = sorted(k for k in set(environ) - {name, *line.detect, *(line.marker or ())}
                      if not k.endswith("_NUM"))
    drop = data.draw(st.sets(st.sampled_from(optional))) if optional else set()
    environ = {k: v for k, v in environ.items() if k not in drop}
    frameworks = data.draw(st.sampled_from(["pytorch", "jax", "tensorflow", "pytorch,jax"]))
    try:
        derivation = derive(environ, {PREFIX + "frameworks": frameworks}, files=reader(files))
    except DeriveEnvError as exc:
        assert exc.exit_code == 3
        return
    assert derivation is not None
    assert derivation.topology.multi_node, (manager, environ)


def test_a_tf_config_of_three_tasks_in_a_single_container_session_is_refused(
        backendai_env) -> None:
    """Backend.AI states one node; a TFJob's TF_CONFIG of 3 tasks beside it is refused, not
    kept beside single-node PyTorch values."""
    environ = {**backendai_env(["main1"], "main1"), "TF_CONFIG": TFJOB_CONFIG}
    assert error(environ, {PREFIX + "frameworks": "pytorch"}) == (
        f"TF_CONFIG={TFJOB_CONFIG!r}: expected a cluster of one task or unset: a TF_CONFIG "
        "(Kubeflow TFJob, Volcano, Vertex AI) states a job of more than one task, but a "
        "Backend.AI session of 1 node(s) states a job of one node: the two disagree (a value "
        "left over from another job?). " + BY_NAME["tf-config"].fix)


def test_mpirun_ranks_inside_a_skypilot_task_are_mpiruns() -> None:
    """Ranks without a node count (mpirun over SSH from SkyPilot's IPs): the ranks' job,
    not SkyPilot's refusal; MASTER_ADDR given, a per-process topology."""
    environ = {**READ_MANAGERS["skypilot"][0], "OMPI_COMM_WORLD_SIZE": "16",
               "OMPI_COMM_WORLD_RANK": "9", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
               "OMPI_COMM_WORLD_LOCAL_SIZE": "8", "MASTER_ADDR": "10.0.0.1"}
    derivation = derive(environ, {PREFIX + "frameworks": "pytorch"})
    assert derivation is not None
    assert {k: derivation.changes()[k] for k in ("RANK", "WORLD_SIZE")} == {
        "RANK": "9", "WORLD_SIZE": "16"}


@pytest.mark.parametrize("index", ["0", "1"])
def test_volcano_is_read_now_and_refused_without_its_task_lists(index: str) -> None:
    """sources/managers/volcano.py reads a Volcano pod; without the svc plugin's lists every pod is
    refused alike, naming the plugin to add."""
    text = error({"VC_TASK_INDEX": index, "VK_TASK_INDEX": index})
    assert text == (
        f"VC_TASK_INDEX={index!r}: expected VC_<TASK>_HOSTS and VC_<TASK>_NUM beside it: a "
        "Volcano Job states its pods only through the svc plugin; add `svc: []` to the job's "
        "spec.plugins (and do not set --inject-hosts-env=false); the same on every pod")
    environ = {"VC_TASK_INDEX": "0", "VK_TASK_INDEX": "0", "HOSTNAME": "j-worker-0",
               "VC_MASTER_NUM": "1", "VC_MASTER_HOSTS": "j-master-0.j", "VC_WORKER_NUM": "1",
               "VC_WORKER_HOSTS": "j-worker-0.j"}
    topology = topology_from(environ)
    assert (topology.num_nodes, topology.node_rank, topology.nodes[0].host) == (
        2, 1, "j-master-0.j")


@pytest.mark.parametrize("stray", [{"JAX_PROCESS_ID": "1"}, {"TPU_WORKER_ID": "0"},
                                   {"DMLC_TASK_ID": "1"}, {"LWS_WORKER_INDEX": "0"},
                                   {"PET_NNODES": "1"}])
def test_an_indexed_job_pod_beside_a_stray_variable_is_no_single_container(stray) -> None:
    """Found by the adversarial trial of issue 16: a variable of the Indexed Job line's
    `unless` set it aside, and pod 1 of 4 derived a job of one (exit 0)."""
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "JOB_COMPLETION_INDEX": "1",
               "HOSTNAME": "train-1", "DERIVE_ENV_NNODES": "4", "DERIVE_ENV_SUBDOMAIN": "t",
               **stray}
    text = error(environ)
    assert text.endswith(" or give the container its cluster manager's variables")
    name = next(iter(stray))
    assert text.startswith(("JOB_COMPLETION_INDEX='1': expected unset: ", f"{name}="))
    assert f"(closest: a Kubernetes Indexed Job, not read beside {name})" in text


@pytest.mark.parametrize(("environ", "message"), [
    ({"TF_CONFIG": '{"cluster":{"worker":["a:1","A:2"]},"task":{"type":"worker","index":1}}'},
     "TF_CONFIG: expected every node once, and a master the other nodes can reach: host A "
     "appears twice"),
    ({"TF_CONFIG": '{"cluster":{"worker":["localhost:1","b:1"]},'
                   '"task":{"type":"worker","index":1}}'},
     "TF_CONFIG: expected every node once, and a master the other nodes can reach: the master "
     "localhost is a loopback address, which the other 1 node(s) cannot reach"),
    ({"VC_TASK_INDEX": "0", "VK_TASK_INDEX": "0", "HOSTNAME": "j-a-0",
      "VC_A_HOSTS": "j-a-0.j,j-a-0.j", "VC_A_NUM": "2"},
     "VC_A_HOSTS: expected every node once, and a master the other nodes can reach: host "
     "j-a-0.j appears twice"),
])
def test_nodes_the_topology_refuses_are_an_error_not_a_traceback(environ, message) -> None:
    """Found by the adversarial trial: a host twice (or a loopback master of several nodes)
    in TF_CONFIG, CLUSTER_SPEC or Volcano's lists raised pydantic's ValidationError."""
    with pytest.raises(TopologyError) as info:
        derive(environ, ALL)
    assert (str(info.value), info.value.exit_code) == (message, 3)


#: A manager's host list alone, without the rest of its set (a user copied it, or the
#: manager's other variables were dropped): (environment, files, the variable, what a job
#: of one holds, the line's title, unit, the variables not set).
LISTS_ALONE = [
    ({"SM_HOSTS": '["algo-1","algo-2"]'}, {}, "SM_HOSTS", "a JSON list of one host",
     "SageMaker", "host", "SM_CURRENT_HOST"),
    ({"SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2"}, {}, "SKYPILOT_NODE_IPS", "one IP",
     "a SkyPilot task", "node", "SKYPILOT_NODE_RANK, SKYPILOT_NUM_NODES"),
    ({"DSTACK_NODES_IPS": "10.0.0.1\n10.0.0.2", "DSTACK_GPUS_PER_NODE": "8"}, {},
     "DSTACK_NODES_IPS", "one IP", "a dstack task", "node",
     "DSTACK_MASTER_NODE_IP, DSTACK_NODE_RANK, DSTACK_NODES_NUM"),
    ({"CLUSTER_SPEC": '{"cluster": {"workerpool0": ["a:1"], "workerpool1": ["b:1"]}}'}, {},
     "CLUSTER_SPEC", "a cluster of one task", "a Vertex AI custom job", "task",
     "CLOUD_ML_JOB_ID"),
    # the batch schedulers' (the new-user trial found these three deriving one node)
    ({"JOB_ID": "4", "PE": "rr", "NSLOTS": "4", "PE_HOSTFILE": "/pe"},
     {"/pe": "sge-a1 2 all.q@sge-a1 UNDEFINED\nsge-b2 2 all.q@sge-b2 UNDEFINED\n"},
     "PE_HOSTFILE", "a PE host file of one host", "a Grid Engine parallel job", "host",
     "NHOSTS"),
    ({"PBS_NODEFILE": "/nodes", "PBS_NODENUM": "1"}, {"/nodes": "n1\nn1\nn2\nn3\n"},
     "PBS_NODEFILE", "a node file of one host", "an OpenPBS/Torque job", "node", "PBS_JOBID"),
    ({"LSB_MCPU_HOSTS": "a 2 b 2", "LSB_HOSTS": "a a b b"}, {}, "LSB_MCPU_HOSTS",
     "one host and its slots", "an LSF job", "host", "LSB_JOBID"),
]


@pytest.mark.parametrize(("environ", "files", "shown", "single", "title", "unit", "missing"),
                         LISTS_ALONE)
def test_a_host_list_alone_states_its_size(environ, files, shown, single, title, unit,
                                           missing) -> None:
    """Still a job larger than one: refused as a partial set, never a single container."""
    with pytest.raises(TopologyError) as info:
        derive(environ, ALL, files=reader(files))
    assert str(info.value) == partial(shown, environ[shown], single, title, missing, unit)
    if shown in ("SKYPILOT_NODE_IPS", "DSTACK_NODES_IPS"):  # one line: one node
        one = {name: value.split("\n")[0] for name, value in environ.items()}
        assert derive(one, ALL).topology.num_nodes == 1


# -- two complete node-level managers: one rule for every pair ------------------------------

#: Every node-level line (depth 4) that a job builder of the conformance suite covers, but
#: those seen only alone (``fallback``: TF_CONFIG is also what derive-env exports).
_NODE_LEVEL = sorted(name for name in JOBS
                     if BY_NAME[name].depth == 4 and not BY_NAME[name].fallback)
_PAIRS = [(a, b) for i, a in enumerate(_NODE_LEVEL) for b in _NODE_LEVEL[i + 1:]]


def _facts(name: str, env: dict[str, str], files: dict) -> tuple:
    """``(node count, node rank, hosts)`` that line alone states for this node."""
    from derive_env.sources.compose import _read

    report = _read(BY_NAME[name], env, lambda paths: {p: files.get(p) for p in paths})
    return (report.count(), report.node_rank,
            tuple(n.host.lower() for n in report.nodes) or None)


@pytest.mark.parametrize(("first", "second"), _PAIRS)
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_pair_of_node_level_managers_is_refused_alike(first: str, second: str,
                                                            data) -> None:
    """Both managers' variables in one container (one set left over from another job, or
    two managers of one job): when they state different node counts, node ranks or host
    lists, the container is refused naming both (SkyPilot and dstack were settled silently
    while LeaderWorkerSet and AWS Batch were refused); when they state the same job, no
    refusal of that rule."""
    a_job, b_job = data.draw(JOBS[first]), data.draw(JOBS[second])
    (a_env, a_files) = data.draw(st.sampled_from(a_job))
    (b_env, b_files) = data.draw(st.sampled_from(b_job))
    env, files = {**b_env, **a_env}, {**b_files, **a_files}
    seen = {s.name for s in seen_sources(env)}
    assume({first, second} <= seen)
    read = lambda paths: {p: files.get(p) for p in paths}  # noqa: E731
    try:
        a, b = _facts(first, env, files), _facts(second, env, files)
    except TopologyError:  # one refuses the mixture on its own (a variable both set)
        with pytest.raises(TopologyError):
            topology_from(env, files=read)
        return
    differ = [k for k in range(3) if None not in (a[k], b[k]) and a[k] != b[k]]
    try:
        topology_from(env, files=read)
    except TopologyError as err:
        if differ:  # refused by this rule, naming both, whichever the pair
            text, titles = str(err), (BY_NAME[first].title, BY_NAME[second].title)
            assert any(text.startswith(f"{x} and {y} state two different jobs: they disagree "
                                       "on the ") for x, y in (titles, titles[::-1])), text
        return  # the same job as far as both state it: another rule may still refuse
    assert not differ, (first, second, a, b)


def test_skypilot_and_dstack_that_state_two_jobs_are_refused_naming_both() -> None:
    """They were settled silently (SkyPilot's list used), while LWS and AWS Batch were
    refused: now both pairs by the same rule and words."""
    from support.jobs import dstack_node, ipv4s, skypilot_node

    env = {**skypilot_node(ipv4s(4), 1), **dstack_node(ipv4s(2), 0)}
    with pytest.raises(TopologyError) as err:
        topology_from(env)
    assert str(err.value) == (
        "a SkyPilot task and a dstack task state two different jobs: they disagree on the "
        "number of nodes: SKYPILOT_NUM_NODES say 4, DSTACK_NODES_NUM say 2. derive-env does "
        "not guess which one is right: the variables of one are left over from another job "
        "(an image's ENV, a wrapper's export); unset them, or choose the manager with "
        "--source NAME (or DERIVE_ENV_SOURCE)")
    same_count = {**skypilot_node(ipv4s(4), 1), **dstack_node(ipv4s(4)[::-1], 1)}
    with pytest.raises(TopologyError) as err:
        topology_from(same_count)
    assert "they disagree on the hosts (in node order): SKYPILOT_NODE_IPS say 10.0.0.1," in (
        str(err.value))
    aws = {"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "1",
           "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0", "AWS_BATCH_JOB_ID": "j#1",
           "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.0.1"}
    with pytest.raises(TopologyError) as err:
        topology_from({**lws_pod("set", 0, 1, 4, "ns"), **aws})
    assert str(err.value).startswith(
        "an AWS Batch multi-node parallel job and a LeaderWorkerSet group state two different "
        "jobs: they disagree on the number of nodes: AWS_BATCH_JOB_NUM_NODES say 2, "
        "LWS_GROUP_SIZE say 4. ")


def test_skypilot_and_dstack_that_state_one_job_agree() -> None:
    from support.jobs import dstack_node, ipv4s, skypilot_node

    topology = topology_from({**skypilot_node(ipv4s(4), 2), **dstack_node(ipv4s(4), 2)})
    assert (topology.source, topology.node_rank, topology.nodes[0].host) == (
        "skypilot", 2, "10.0.0.1")


def test_the_single_container_values_agree_with_the_table() -> None:
    """A variable that both the single-container check and a table line's ``states`` name has
    one single value in both (an index of a line that does not say its size: none)."""
    from derive_env.sources.refusals import _SINGLE_VALUES

    shared = {(line.name, name): (_SINGLE_VALUES[name], single if line.sized else None)
              for line in SOURCES for name, single in states_of(line) if name in _SINGLE_VALUES}
    assert len(shared) >= 10
    assert {key: pair for key, pair in shared.items() if pair[0] != pair[1]} == {}
