"""Sources: the table of every cluster manager and launcher, each a declaration.

:data:`SOURCES` has one line per manager or launcher: its variables (by role), its depth in
the launch, its title, and how it states a multi-process job. :func:`seen_sources` finds
the lines whose variables are all set without importing any module. A seen line is read by
its roles (sources/roles.py) or its own module under sources/managers/ (``read(environ,
line, files=None) -> Report``); sources/compose.py composes one topology; a launcher
derive-env cannot read is refused (sources/refusals.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from derive_env.errors import ON_ERROR_WARN, TopologyError, UsageError, describe

#: The variable that chooses a source for every node of a session (``--source`` wins).
SOURCE_VARIABLE = "DERIVE_ENV_SOURCE"
#: The choices besides a source name.
AUTO, NONE = "auto", "none"
_RUN_WITHOUT = ("Run the command without derive-env (set the framework variables from the "
                f"launcher's), {ON_ERROR_WARN}")


def _start_torchrun(how: str) -> str:
    """The fix for a node-level manager no module reads: torchrun from its variables."""
    return (f"Start torchrun from its variables (torchrun {how} --no-python derive-env -- "
            "python train.py), so that derive-env reads each worker torchrun starts; or, for "
            "a job of one node, choose --source none (or DERIVE_ENV_SOURCE=none); "
            + ON_ERROR_WARN)


#: How a variable reaches every process of a launcher by default (Open MPI's ``-x``).
PASS_ENV = "mpirun -x {name}={value}"
#: The rule of an MPI launcher's variables (after the launcher's name), ending its messages.
_MPI_WHY = ("sets both for each process, so one of them was exported by hand (a wrapper) or "
            "inherited from another job: unset the stale one")


class Source:
    """One line of the source table (docs/sources/README.md). By position: ``name``
    (``--source NAME``), ``title`` (for a person), ``module`` (``roles``, or
    ``managers.<module>``, imported only when the line is seen; ``None``: only refused),
    ``detect`` (its variables, each non-empty), ``depth`` (0 torchrun, 1 an MPI launcher, 2 an
    srun step, 3 an allocation, 4 a node-level manager). The others by
    keyword: the comment below, their defaults in the signature."""

    # Fields by keyword (their defaults in the signature): ``unless``: variables that mean
    # another context (a Slurm step): the line is neither seen nor refused. ``fallback``:
    # seen only when no other source is (Kubeflow's variables are also derive-env's output).
    # ``any_of``: seen when ANY of ``detect`` (or a variable starting with ``prefix``) is set;
    # the module names what is missing (Backend.AI, docs/behaviour.md section 5). ``roles``:
    # its variables by role (sources/roles.py); ``hosts``: ``(where, form[, key])``, a
    # variable or a file (``$VARIABLE[:default]``: :func:`file_path`).
    # The refusals (sources/refusals.py): ``marker``: the variables that alone say "this
    # launcher started us" (empty: ``detect``). ``states``: ``(variable, single-process
    # value)``: one set to another value states more than one process (``None``: set at all,
    # it does); unset: from ``roles`` (:func:`states_of`). ``partial``: whether ``states``
    # count without the complete marker. ``sized``: False when the complete marker cannot
    # tell the size (PMIx): the marker is refused. ``unit``: what the size counts
    # (``process``, ``node``, ``host``). ``size``: a function of sources/sizes.py for a size
    # no variable states (a Volcano Job's pods). ``counts``: variables whose value above 1
    # states a larger job, for an image that did not opt in. ``part_of``: for a line without
    # a module, the line that reads these variables (alone, a partial set). ``fix``: ends the
    # refusal of a launcher no module reads, or of one that states no size. ``pass_env``: how
    # to give one variable to every process it starts, for a partial topology's fix.
    # The composition (sources/compose.py): ``daemons``: what starts its processes on each
    # node (orted): an outer launcher's step of one task per node is their daemon step, not
    # the job; at one depth, the inner line. ``per_node``: how it is told one task per node,
    # and one per GPU (the fix of torchrun under it).

    # Slots and one store each, not a named tuple (whose constructor eval() costs every
    # start 0.8M instructions) nor class defaults (an instance dict costs 0.25M).
    __slots__ = ("any_of", "counts", "daemons", "depth", "detect", "fallback", "fix", "marker",
                 "module", "name", "part_of", "partial", "pass_env", "per_node", "prefix",
                 "roles", "size", "sized", "states", "title", "unit", "unless")

    def __init__(self, name: str, title: str, module: str | None, detect: tuple[str, ...],
                 depth: int, unless: tuple[str, ...] = (), fallback: bool = False,
                 any_of: bool = False, prefix: str | None = None, marker: tuple[str, ...] = (),
                 states: tuple | None = None, partial: bool = True, sized: bool = True,
                 unit: str = "process", size: str | None = None, part_of: str | None = None,
                 fix: str = _RUN_WITHOUT, pass_env: str = PASS_ENV, counts: tuple[str, ...] = (),
                 roles: dict | None = None, daemons: str | None = None,
                 per_node: tuple[str, str] = ("one task per node", "one task per GPU")) -> None:
        self.name = name
        self.title = title
        self.module = module
        self.detect = detect
        self.depth = depth
        self.unless = unless
        self.fallback = fallback
        self.any_of = any_of
        self.prefix = prefix
        self.marker = marker
        self.states = states
        self.partial = partial
        self.sized = sized
        self.unit = unit
        self.size = size
        self.part_of = part_of
        self.fix = fix
        self.pass_env = pass_env
        self.counts = counts
        self.roles = roles
        self.daemons = daemons
        self.per_node = per_node


#: The files of the managers whose size only a file states (read in cli/, on demand), each
#: with the variable that chooses another path (tests, operators; not a label).
SAGEMAKER_CONFIG = "/opt/ml/input/config/resourceconfig.json"
SAGEMAKER_CONFIG_VARIABLE = "DERIVE_ENV_SAGEMAKER_RESOURCE_CONFIG"
DETERMINED_RENDEZVOUS = "/run/determined/info/rendezvous.json"
DETERMINED_VARIABLE = "DERIVE_ENV_DETERMINED_RENDEZVOUS"

#: Every manager and launcher, innermost first; ties keep table order, which is also the
#: order of the refusals (the first line that states more than one process is named).
SOURCES: tuple[Source, ...] = (
    Source("torchrun", "torchrun (torchelastic)", "managers.torchrun",
           ("TORCHELASTIC_RUN_ID", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
            "GROUP_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"), 0,
           marker=("TORCHELASTIC_RUN_ID",),
           states=(("GROUP_WORLD_SIZE", 1), ("GROUP_RANK", 0), ("WORLD_SIZE", 1), ("RANK", 0),
                   ("LOCAL_WORLD_SIZE", 1)), partial=False),
    # DeepSpeed's per-node launcher (sources/managers/deepspeed.py): like torchrun, no host list.
    Source("deepspeed", "DeepSpeed's launcher (deepspeed)", "managers.deepspeed",
           ("CROSS_RANK", "CROSS_SIZE", "LOCAL_SIZE", "RANK", "LOCAL_RANK", "WORLD_SIZE",
            "MASTER_ADDR", "MASTER_PORT"), 0, unless=("TORCHELASTIC_RUN_ID",),
           marker=("CROSS_RANK", "CROSS_SIZE", "LOCAL_SIZE"), partial=False,
           roles={"rank": "RANK", "local_rank": "LOCAL_RANK", "world_size": "WORLD_SIZE",
                  "local_world_size": "LOCAL_SIZE", "num_nodes": "CROSS_SIZE",
                  "node_rank": "CROSS_RANK",
                  "why": "DeepSpeed's launcher sets both for each process "
                         "(deepspeed/launcher/launch.py), so one was changed after it"}),
    # The MPI launchers (docs/sources/mpi.md). Open MPI: docs/tuning-apps/environment-var.rst
    # (recorded: ompi-ssh, ompi-in-*), PMIX_* from its own PMIx server.
    Source("openmpi", "Open MPI (mpirun)", "roles",
           ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE"), 1,
           roles={"rank": "OMPI_COMM_WORLD_RANK", "local_rank": "OMPI_COMM_WORLD_LOCAL_RANK",
                  "world_size": "OMPI_COMM_WORLD_SIZE",
                  "local_world_size": "OMPI_COMM_WORLD_LOCAL_SIZE", "job": "PMIX_NAMESPACE",
                  "same": (("PMIX_RANK", "rank"),), "why": "mpirun " + _MPI_WHY},
           daemons="Open MPI's daemons (orted, prted)",
           per_node=("mpirun --map-by ppr:1:node", "mpirun --map-by ppr:<GPUs per node>:node")),
    # MVAPICH2 2.3 user guide; mpispawn.c also sets PMI_ID and MPIRUN_NPROCS.
    Source("mvapich2", "MVAPICH2 (mpirun_rsh)", "roles",
           ("MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
            "MV2_COMM_WORLD_LOCAL_SIZE"), 1,
           roles={"rank": "MV2_COMM_WORLD_RANK", "local_rank": "MV2_COMM_WORLD_LOCAL_RANK",
                  "world_size": "MV2_COMM_WORLD_SIZE",
                  "local_world_size": "MV2_COMM_WORLD_LOCAL_SIZE",
                  "same": (("PMI_RANK", "rank"), ("PMI_ID", "rank"), ("PMI_SIZE", "world_size"),
                           ("MPIRUN_NPROCS", "world_size")),
                  "why": "mpirun_rsh " + _MPI_WHY},
           daemons="MVAPICH2's mpispawn",
           per_node=("mpirun_rsh with each host once", "mpirun_rsh with each host once per GPU")),
    # mpich pmip_cb.c launch_procs (recorded: mpich-*), Intel MPI's the same; no job id.
    # Its states are the pmi line's (a partial set is refused as a PMI launcher's).
    Source("hydra", "MPICH Hydra or Intel MPI (mpiexec)", "roles",
           ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"), 1, states=(),
           pass_env="mpiexec -genv {name} {value}",
           roles={"rank": "PMI_RANK", "local_rank": "MPI_LOCALRANKID", "world_size": "PMI_SIZE",
                  "local_world_size": "MPI_LOCALNRANKS", "why": "mpiexec " + _MPI_WHY},
           daemons="Hydra's proxies (hydra_pmi_proxy)",
           per_node=("mpiexec -ppn 1", "mpiexec -ppn <GPUs per node>")),
    # HPE Cray PALS (ALCF user guides): PALS_* and Cray PMI's PMI_* (PMI_SIZE: the pmi line's).
    Source("pals", "Cray PALS (mpiexec)", "roles",
           ("PALS_RANKID", "PALS_LOCAL_RANKID", "PALS_LOCAL_SIZE", "PALS_NODEID",
            "PMI_SIZE"), 1,
           states=(("PALS_RANKID", 0), ("PALS_LOCAL_RANKID", 0), ("PALS_NODEID", 0)),
           roles={"rank": "PALS_RANKID", "local_rank": "PALS_LOCAL_RANKID",
                  "world_size": "PMI_SIZE", "local_world_size": "PALS_LOCAL_SIZE",
                  "node_rank": "PALS_NODEID", "job": "PALS_APID",
                  "same": (("PMI_RANK", "rank"), ("PMI_LOCAL_RANK", "local_rank"),
                           ("PMI_LOCAL_SIZE", "local_world_size")),
                  "why": "PALS's mpiexec " + _MPI_WHY},
           daemons="PALS's daemons", per_node=("mpiexec --ppn 1", "mpiexec --ppn <GPUs per node>")),
    Source("pmi", "a PMI launcher (MPICH Hydra, Intel MPI, srun --mpi=pmi2, Flux)", None,
           ("PMI_RANK", "PMI_SIZE"), 1, part_of="hydra",
           states=(("PMI_SIZE", 1), ("PMI_RANK", 0), ("PMI_LOCAL_SIZE", 1),
                   ("PMI_LOCAL_RANK", 0), ("MPI_LOCALNRANKS", 1), ("MPI_LOCALRANKID", 0))),
    # Open MPI 4 and 5 set these too (its own PMIx server), and srun --mpi=pmix.
    Source("pmix", "a PMIx launcher (srun --mpi=pmix, prterun without Open MPI's variables)",
           None, ("PMIX_RANK", "PMIX_NAMESPACE"), 1, part_of="openmpi",
           states=(("PMIX_RANK", 0),), sized=False),
    Source("slurm-step", "a Slurm step (srun)", "managers.slurm",
           ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES",
            "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_PROCID",
            "SLURM_LOCALID", "SLURM_NODEID"), 2,
           states=(("SLURM_STEP_NUM_TASKS", 1), ("SLURM_STEP_NUM_NODES", 1),
                   ("SLURM_PROCID", 0), ("SLURM_NODEID", 0), ("SLURM_LOCALID", 0)),
           per_node=("srun --ntasks-per-node=1", "srun --ntasks-per-node=<GPUs per node>")),
    # Not in a SkyPilot task: its own line states that job's nodes (sky/skylet/executor/
    # slurm.py runs it in an srun step whose step variables newer releases unset).
    Source("slurm-allocation", "a Slurm allocation (batch script or salloc shell)",
           "managers.slurm",
           ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES"), 3, unit="node",
           unless=("SKYPILOT_NODE_RANK",), counts=("SLURM_JOB_NUM_NODES",)),
    # The allocation's variables outside a step, when another source was chosen.
    Source("slurm-batch", "a Slurm batch script or salloc shell", None,
           ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES"), 3,
           unless=("SLURM_STEP_ID", "SLURM_STEP_NODELIST", "SKYPILOT_NODE_RANK"),
           part_of="slurm-allocation",
           states=(("SLURM_JOB_NUM_NODES", 1), ("SLURM_NNODES", 1)), partial=False,
           unit="node"),
    Source("backendai", "a Backend.AI session", "managers.backendai",
           ("BACKENDAI_CLUSTER_SIZE", "BACKENDAI_CLUSTER_HOSTS", "BACKENDAI_CLUSTER_HOST",
            "BACKENDAI_CLUSTER_ROLE", "BACKENDAI_CLUSTER_IDX", "BACKENDAI_CLUSTER_LOCAL_RANK",
            "BACKENDAI_CLUSTER_REPLICAS", "BACKENDAI_SESSION_ID", "GPU_COUNT", "N_GPUS",
            "BACKENDAI_DIST_MASTER_PORT"), 4, any_of=True, prefix="BACKENDAI_CLUSTER_",
           unit="node", counts=("BACKENDAI_CLUSTER_SIZE",)),
    Source("kubeflow-pytorchjob", "a Kubeflow PyTorchJob (v1)", "managers.kubeflow",
           ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "PET_NODE_RANK",
            "PET_NNODES", "PET_NPROC_PER_NODE"), 4,
           unless=("TORCHELASTIC_RUN_ID",), fallback=True, unit="node", counts=("PET_NNODES",)),
    Source("kubeflow-trainjob", "a Kubeflow TrainJob (v2)", "managers.kubeflow",
           ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
            "PET_NPROC_PER_NODE"), 4,
           unless=("TORCHELASTIC_RUN_ID", "RANK"), fallback=True, unit="node",
           counts=("PET_NNODES",)),
    # An elastic PyTorchJob without a Master: torchrun's rendezvous (sources/managers/kubeflow.py).
    Source("kubeflow-elastic", "an elastic Kubeflow PyTorchJob (v1, no Master)",
           "managers.kubeflow",
           ("PET_RDZV_ENDPOINT", "PET_RDZV_BACKEND", "PET_NNODES"), 4, unit="node",
           unless=("TORCHELASTIC_RUN_ID", "PET_NODE_RANK"), fallback=True),
    # The v1 set of operators before PET_* (one process per pod; docs/sources/README.md).
    Source("kubeflow-pytorchjob-classic", "a Kubeflow PyTorchJob (v1, no PET_*)",
           "managers.kubeflow",
           ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"), 4, unit="node",
           unless=("TORCHELASTIC_RUN_ID", "LOCAL_RANK", "NODE_RANK", "PET_NODE_RANK",
                   "PET_NNODES", "AZUREML_RUN_ID"), fallback=True, counts=("WORLD_SIZE",)),
    # Inside `srun -N4 flux start` that step is its brokers' (daemons: seen_sources).
    Source("flux", "Flux", "managers.flux", ("FLUX_JOB_ID", "FLUX_JOB_SIZE", "FLUX_TASK_RANK"), 2,
           pass_env="flux run --env={name}={value}", daemons="Flux's brokers",
           per_node=("flux run --tasks-per-node=1", "flux run --tasks-per-node=<GPUs per node>"),
           states=(("FLUX_JOB_SIZE", 1), ("FLUX_TASK_RANK", 0), ("FLUX_JOB_NNODES", 1))),
    Source("jsrun", "LSF jsrun", "managers.lsf",
           ("JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_RANK", "LSB_JOBID", "LSB_DJOB_RANKFILE"), 2,
           states=(("JSM_NAMESPACE_SIZE", 1), ("JSM_NAMESPACE_RANK", 0),
                   ("JSM_NAMESPACE_LOCAL_RANK", 0)),
           per_node=("jsrun --rs_per_host 1 --tasks_per_rs 1",
                     "jsrun --rs_per_host 1 --tasks_per_rs <GPUs per node>")),
    # Not for the more specific pods that are Indexed Jobs too (LeaderWorkerSet, Volcano, a
    # TrainJob, a TPU slice, a JobSet), and only when no other source is seen (torchrun inside).
    Source("kubernetes-indexed-job", "a Kubernetes Indexed Job", "managers.jobset",
           ("JOB_COMPLETION_INDEX", "KUBERNETES_SERVICE_HOST"), 4,
           unless=("LWS_WORKER_INDEX", "VC_TASK_INDEX", "PET_NNODES", "JAX_PROCESS_ID",
                   "DMLC_TASK_ID", "TPU_WORKER_ID", "JOBSET_NAME"), fallback=True,
           states=(("JOB_COMPLETION_INDEX", 0),), sized=False, unit="pod",
           counts=("DERIVE_ENV_NNODES",),
           fix=_start_torchrun("--nnodes=<completions> --node-rank=$JOB_COMPLETION_INDEX "
                               "--master-addr=<the hostname of index 0>")),
    # A JobSet's pods: its labels passed as env by the downward API (sources/managers/jobset.py).
    Source("jobset", "a JobSet", "managers.jobset",
           ("JOB_COMPLETION_INDEX", "KUBERNETES_SERVICE_HOST", "JOBSET_NAME"), 4, fallback=True,
           states=(("JOB_COMPLETION_INDEX", 0), ("JOBSET_JOB_GLOBAL_INDEX", 0)), sized=False,
           partial=False, unit="pod", counts=("JOBSET_GLOBAL_REPLICAS",),
           fix=_start_torchrun("--nnodes=<pods of the JobSet> --node-rank=<this pod's place> "
                               "--master-addr=<the hostname of the first pod>")),
    # The training toolkit's SM_* without the platform's variables (sources/managers/sagemaker.py).
    Source("sagemaker", "SageMaker", "managers.sagemaker", ("SM_HOSTS", "SM_CURRENT_HOST"), 4,
           unless=("TRAINING_JOB_ARN",), unit="host", marker=("SM_HOSTS",),
           roles={"hosts": ("SM_HOSTS", "json")},
           fix=_start_torchrun("--nnodes=<length of $SM_HOSTS> --node-rank=<position of "
                               "$SM_CURRENT_HOST in $SM_HOSTS> --master-addr=<first of "
                               "$SM_HOSTS>")),
    Source("aws-batch", "an AWS Batch multi-node parallel job", "managers.aws_batch",
           ("AWS_BATCH_JOB_ID", "AWS_BATCH_JOB_NUM_NODES", "AWS_BATCH_JOB_NODE_INDEX",
            "AWS_BATCH_JOB_MAIN_NODE_INDEX"), 4, unit="node", counts=("AWS_BATCH_JOB_NUM_NODES",),
           roles={"num_nodes": "AWS_BATCH_JOB_NUM_NODES", "node_rank": "AWS_BATCH_JOB_NODE_INDEX",
                  "why": "AWS Batch sets it in every node of a multi-node parallel job (AWS "
                         "Batch User Guide, \"Environment variables\" of multi-node parallel "
                         "jobs); do not set it by hand"},
           fix=_start_torchrun("--nnodes=$AWS_BATCH_JOB_NUM_NODES --node-rank="
                               "$AWS_BATCH_JOB_NODE_INDEX --master-addr=<the main node's "
                               "address>")),
    # The platform's resourceconfig.json, read in cli/ (sources/managers/sagemaker.py).
    Source("sagemaker-platform", "an Amazon SageMaker training job", "managers.sagemaker",
           ("TRAINING_JOB_NAME", "TRAINING_JOB_ARN"), 4, unit="host",
           roles={"hosts": (f"${SAGEMAKER_CONFIG_VARIABLE}:{SAGEMAKER_CONFIG}", "json", "hosts")},
           fix=_start_torchrun("--nnodes=<length of hosts> --node-rank=<position of "
                               f"current_host in hosts, {SAGEMAKER_CONFIG}> "
                               "--master-addr=<first of hosts>")),
    # The launch tools (sources/managers/launchtools.py); then managers no module reads: refused.
    Source("skypilot", "a SkyPilot task", "managers.launchtools",
           ("SKYPILOT_NODE_IPS", "SKYPILOT_NODE_RANK", "SKYPILOT_NUM_NODES"), 4, unit="node",
           states=(("SKYPILOT_NUM_NODES", 1), ("SKYPILOT_NODE_RANK", 0)),
           marker=("SKYPILOT_NODE_IPS",),
           roles={"hosts": ("SKYPILOT_NODE_IPS", "ips"), "num_nodes": "SKYPILOT_NUM_NODES",
                  "node_rank": "SKYPILOT_NODE_RANK", "job": "SKYPILOT_TASK_ID",
                  "why": "SkyPilot sets it for every node of the task (sky/backends/"
                         "task_codegen.py); do not set it in the task's envs"},
           pass_env="sky launch --env {name}={value}",
           fix=_start_torchrun("--nnodes=$SKYPILOT_NUM_NODES --node-rank=$SKYPILOT_NODE_RANK "
                               "--master-addr=$(echo \"$SKYPILOT_NODE_IPS\" | head -n1)")),
    Source("dstack", "a dstack task", "managers.launchtools",
           ("DSTACK_NODES_IPS", "DSTACK_MASTER_NODE_IP", "DSTACK_NODE_RANK",
            "DSTACK_NODES_NUM"), 4, unit="node",
           states=(("DSTACK_NODES_NUM", 1), ("DSTACK_NODE_RANK", 0)),
           marker=("DSTACK_NODES_IPS",),
           roles={"hosts": ("DSTACK_NODES_IPS", "ips"), "num_nodes": "DSTACK_NODES_NUM",
                  "node_rank": "DSTACK_NODE_RANK", "job": "DSTACK_RUN_ID",
                  "why": "dstack's runner sets it for every node of the task (runner/internal/"
                         "runner/executor/executor.go); do not set it in the task's env"},
           fix=_start_torchrun("--nnodes=$DSTACK_NODES_NUM --node-rank=$DSTACK_NODE_RANK "
                               "--master-addr=$DSTACK_MASTER_NODE_IP")),
    Source("lws", "a LeaderWorkerSet group", "managers.lws",  # a TPU group: its slice (gke-tpu)
           ("LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX"), 4, unit="node",
           unless=("TPU_WORKER_ID",),
           roles={"num_nodes": "LWS_GROUP_SIZE", "node_rank": "LWS_WORKER_INDEX",
                  "why": "the LeaderWorkerSet controller sets it in every container (kubernetes-"
                         "sigs/lws pkg/utils/pod/pod_utils.go, AddLWSVariables); do not set it "
                         "in the template's env"},
           fix=_start_torchrun("--nnodes=$LWS_GROUP_SIZE --node-rank=$LWS_WORKER_INDEX "
                               "--master-addr=$LWS_LEADER_ADDRESS")),
    # Seen by its env plugin's index; the svc plugin's task lists are checked by the module.
    # Its states: the pod counts of the usual tasks (a partial set: the svc plugin alone).
    Source("volcano", "a Volcano Job", "managers.volcano", ("VC_TASK_INDEX",), 4, unit="pod",
           size="volcano_pods", states=(("VC_WORKER_NUM", 1), ("VC_MASTER_NUM", 1)),
           fix=_start_torchrun("--nnodes=<pods of every task> --node-rank=<the pod's place "
                               "among them> --master-addr=<first of $VC_MASTER_HOSTS>")),
    Source("tf-config", "a TF_CONFIG (Kubeflow TFJob, Volcano, Vertex AI)", "managers.tfconfig",
           ("TF_CONFIG",), 4, unit="task", size="tf_config_tasks", fallback=True,
           fix="Run the command without derive-env (TensorFlow reads the TF_CONFIG its "
               "manager set), or, for a job of one node, choose --source none (or "
               f"DERIVE_ENV_SOURCE=none); {ON_ERROR_WARN}"),
    Source("vertex", "a Vertex AI custom job", "managers.tfconfig",
           ("CLUSTER_SPEC", "CLOUD_ML_JOB_ID"), 4,
           unit="task", size="cluster_spec_tasks", marker=("CLUSTER_SPEC",),
           fix=_start_torchrun("--nnodes=<tasks of workerpool0 and workerpool1> "
                               "--node-rank=<this task's place> --master-addr=<first of "
                               "workerpool0 in $CLUSTER_SPEC>")),
    Source("gke-tpu", "a TPU slice (GKE, LeaderWorkerSet or KubeRay)", "managers.tpu",
           ("TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES"), 4, unit="host",
           marker=("TPU_WORKER_HOSTNAMES",),
           states=(("MEGASCALE_NUM_SLICES", 1), ("MEGASCALE_SLICE_ID", 0)),
           roles={"hosts": ("TPU_WORKER_HOSTNAMES", "comma")},
           fix="Run the command without derive-env (JAX reads TPU_WORKER_ID and "
               "TPU_WORKER_HOSTNAMES itself), or, for a slice of one host, choose --source "
               f"none (or DERIVE_ENV_SOURCE=none); {ON_ERROR_WARN}"),
    Source("azureml-mpi", "an Azure ML MPI job (Azure Batch multi-instance)", "managers.azureml",
           ("AZ_BATCH_MASTER_NODE",), 4, unit="node",
           states=(("AZ_BATCH_MASTER_NODE", None),),
           fix=_start_torchrun("--nnodes=<the node count> --node-rank=<this node's> "
                               "--master-addr=<host part of $AZ_BATCH_MASTER_NODE>")),
    Source("determined", "a Determined trial", "managers.determined",
           ("DET_MASTER", "DET_ALLOCATION_ID", "DET_SLOT_IDS"), 4, unit="container",
           marker=("DET_MASTER", "DET_ALLOCATION_ID"),  # its agent always sets DET_SLOT_IDS
           roles={"hosts": (f"${DETERMINED_VARIABLE}:{DETERMINED_RENDEZVOUS}", "json",
                            "container_addrs")},
           fix="Start it with Determined's launcher (python3 -m determined.launch."
               "torch_distributed), which runs torchrun, and run derive-env in each worker "
               "it starts; or, for a trial of one container, choose --source none (or "
               f"DERIVE_ENV_SOURCE=none); {ON_ERROR_WARN}"),
    # The JAX and XGBoost pods of Kubeflow (sources/managers/kubeflow_runtimes.py): JAX_* are also
    # derive-env's own output, COORDINATOR_* / NUM_PROCESSES generic names: fallback.
    Source("kubeflow-jax", "a Kubeflow TrainJob (JAX runtime)", "managers.kubeflow_runtimes",
           ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_COORDINATOR_ADDRESS"), 4, unit="node",
           partial=False, fallback=True,
           roles={"num_nodes": "JAX_NUM_PROCESSES", "node_rank": "JAX_PROCESS_ID",
                  "why": "the trainer sets it for every node (kubeflow/trainer pkg/runtime/"
                         "framework/plugins/jax/jax.go); do not set it in the TrainJob's or "
                         "runtime's env"}),
    Source("kubeflow-jaxjob", "a Kubeflow JAXJob (v1)", "managers.kubeflow_runtimes",
           ("COORDINATOR_ADDRESS", "COORDINATOR_PORT", "NUM_PROCESSES", "PROCESS_ID"), 4,
           # Generic names: a partial set is refused only with the three set together.
           marker=("COORDINATOR_ADDRESS", "COORDINATOR_PORT", "NUM_PROCESSES"),
           partial=False, unit="node", fallback=True,
           roles={"num_nodes": "NUM_PROCESSES", "node_rank": "PROCESS_ID",
                  "why": "the training operator sets it for every pod (kubeflow/training-"
                         "operator pkg/controller.v1/jax/envvar.go); do not set it in the pod "
                         "template's env"}),
    Source("kubeflow-xgboost", "a Kubeflow TrainJob (XGBoost runtime)",
           "managers.kubeflow_runtimes",
           ("DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER"), 4,
           states=(("DMLC_NUM_WORKER", 1), ("DMLC_TASK_ID", 0)), partial=False, unit="node",
           roles={"why": "the trainer sets it for every node (kubeflow/trainer pkg/runtime/"
                         "framework/plugins/xgboost/xgboost.go); do not set it in the "
                         "TrainJob's or runtime's env"}),
    # parallel_proc.cpp ParallelProc::addEnvVars: no host list, no master (condor_chirp).
    Source("htcondor", "an HTCondor parallel-universe job", "roles",
           ("_CONDOR_PROCNO", "_CONDOR_NPROCS"), 4, unit="node",
           roles={"num_nodes": "_CONDOR_NPROCS", "node_rank": "_CONDOR_PROCNO",
                  "job": "_CONDOR_REMOTE_SPOOL_DIR",
                  "note": "HTCondor states no host list: the master is node 0's address, "
                          "from MASTER_ADDR",
                  "why": "the starter sets both for one node (parallel_proc.cpp), so one was "
                         "set by hand: unset it"},
           pass_env="export {name}={value} in every node's wrapper (node 0 can publish it "
                    "with condor_chirp set_job_attr)",
           fix=_start_torchrun("--nnodes=$_CONDOR_NPROCS --node-rank=$_CONDOR_PROCNO "
                               "--master-addr=<the host of node 0>")),
    Source("pbs", "an OpenPBS/Torque job", "managers.pbs", ("PBS_JOBID", "PBS_NODEFILE"), 3,
           unit="node", states=(("PBS_NUM_NODES", 1), ("PBS_NODENUM", 0)), partial=False,
           marker=("PBS_NODEFILE",), roles={"hosts": ("$PBS_NODEFILE", "slots")},
           fix="Start the processes with an MPI launcher (mpiexec ... derive-env -- python "
               "train.py) and run derive-env in each rank; or, for a job of one node, choose "
               f"--source none (or DERIVE_ENV_SOURCE=none); {ON_ERROR_WARN}"),
    # A Torque pbsdsh task on a sister host: no node file there. The mother superior's is
    # seen as pbs and read as this line too: one job, one digest (sources/managers/pbs.py).
    Source("torque-task", "a Torque TM task (pbsdsh)", "managers.pbs",
           ("PBS_JOBID", "PBS_NODENUM", "PBS_TASKNUM", "PBS_VNODENUM"), 3,
           unless=("PBS_NODEFILE",), unit="node", partial=False,
           states=(("PBS_NUM_NODES", 1), ("PBS_NODENUM", 0)),
           pass_env="pbsdsh -u -e {name}={value}"),
    # In a jsrun task, the jsrun line gives the compute hosts (without the launch node).
    Source("lsf", "an LSF job", "managers.lsf", ("LSB_JOBID", "LSB_MCPU_HOSTS"), 3, unit="host",
           unless=("JSM_NAMESPACE_RANK",), marker=("LSB_MCPU_HOSTS",),
           roles={"hosts": ("LSB_MCPU_HOSTS", "pairs")},
           fix="Start the processes with jsrun or mpirun (... derive-env -- python train.py) "
               "and run derive-env in each rank; or, for a job of one host, choose --source "
               f"none (or DERIVE_ENV_SOURCE=none); {ON_ERROR_WARN}"),
    Source("gridengine", "a Grid Engine parallel job", "managers.gridengine",
           ("JOB_ID", "PE_HOSTFILE", "NHOSTS"), 3, unit="host", states=(("NHOSTS", 1),),
           partial=False, marker=("PE_HOSTFILE",),
           roles={"hosts": ("$PE_HOSTFILE", "pe_hostfile")}),
    # A task qrsh -inherit started without -V: no PE_HOSTFILE (sources/managers/gridengine.py).
    Source("gridengine-task", "a Grid Engine task (qrsh -inherit)", None,
           ("JOB_ID", "PE", "QRSH_PORT"), 3, unless=("PE_HOSTFILE",), unit="host",
           states=(("QRSH_PORT", None),), partial=False,
           fix="Start it with qrsh -inherit -V, which passes the job's PE_HOSTFILE on (Open "
               f"MPI's mpirun does); {ON_ERROR_WARN}"),
    Source("mpi-operator-launcher", "a Kubeflow MPIJob launcher", "managers.mpi_operator",
           ("K_MPI_JOB_ROLE",), 4, size="mpi_operator_launcher",
           fix="Run derive-env in the command mpirun starts (mpirun ... derive-env -- python "
               f"train.py), not around mpirun; {ON_ERROR_WARN}"),
    Source("ray-train", "a Ray Train worker", "managers.ray_train",
           ("RAY_RAYLET_PID", "ACCELERATE_TORCH_DEVICE", "NODE_RANK", "RANK", "WORLD_SIZE"), 0,
           marker=("ACCELERATE_TORCH_DEVICE", "NODE_RANK"), partial=False,
           states=(("WORLD_SIZE", 1), ("RANK", 0), ("NODE_RANK", 0)), daemons="Ray's raylets",
           roles={"rank": "RANK", "local_rank": "LOCAL_RANK", "world_size": "WORLD_SIZE",
                  "local_world_size": "LOCAL_WORLD_SIZE", "node_rank": "NODE_RANK",
                  "why": "Ray Train sets it in each worker (ray/train/torch/config.py, "
                         "_TorchBackend.on_start and _set_torch_distributed_env_vars); "
                         "something changed it after Ray set it: do not set Ray Train's "
                         "variables yourself"},
           fix="Ray Train set every torch variable of this worker itself: run the command "
               f"without derive-env in Ray workers; {ON_ERROR_WARN}"),
    Source("azureml-pytorch", "an Azure ML PyTorch-distribution process", "managers.azureml",
           ("AZUREML_RUN_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "MASTER_ADDR",
            "MASTER_PORT"), 0, marker=("AZUREML_RUN_ID",), unless=("TORCHELASTIC_RUN_ID",),
           partial=False, states=(("WORLD_SIZE", 1), ("RANK", 0), ("NODE_RANK", 0)),
           fix="Azure ML set every torch variable of this process itself: run the command "
               f"without derive-env; {ON_ERROR_WARN}"),
)

#: The table lines by name.
BY_NAME: dict[str, Source] = {source.name: source for source in SOURCES}
#: The lines derive-env reads, in table order.
_READ = tuple(source for source in SOURCES if source.module is not None)
#: Source names by ``--source``; ``auto`` (detect) and ``none`` (a single container).
SOURCE_NAMES = tuple(source.name for source in _READ)


def file_path(where: str, environ: Mapping[str, str]) -> str:
    """A file's path: ``where``, or the path ``$NAME`` holds (``$NAME:default``: or that)."""
    if not where.startswith("$"):
        return where
    name, _, default = where[1:].partition(":")
    return environ.get(name) or default


def has_size(line: Source) -> bool:
    """Whether ``line`` states a job's size beyond its ``states`` (a ``size``, a host list)."""
    return line.size is not None or bool(line.roles and "hosts" in line.roles)


def states_of(line: Source) -> tuple[tuple[str, int | None], ...]:
    """``line.states``, or those its ``roles`` imply: counts 1, indexes 0, nodes first."""
    if line.states is not None:
        return line.states
    if not line.roles:
        return ()
    return tuple((line.roles[role], single) for role, single in _SINGLE if role in line.roles)


#: Each count and index role with its single-process value, in the order a refusal names them.
_SINGLE = (("num_nodes", 1), ("node_rank", 0), ("world_size", 1), ("rank", 0),
           ("local_world_size", 1), ("local_rank", 0))


def _is_seen(source: Source, environ: Mapping[str, str]) -> bool:
    if any(environ.get(name) for name in source.unless):
        return False
    if not source.any_of:
        return all(environ.get(name) for name in source.detect)
    return any(environ.get(name) for name in source.detect) or (
        source.prefix is not None
        and any(v and k.startswith(source.prefix) for k, v in environ.items()))


def seen_sources(environ: Mapping[str, str]) -> list[Source]:
    """The lines read whose variables are all set, innermost first, no module imported; at
    one depth, a line with ``daemons`` (Flux) inside the other (the ``srun`` of its brokers)."""
    seen = [s for s in _READ if _is_seen(s, environ)]
    if len(seen) > 1:
        seen = [s for s in seen if not s.fallback] or seen[:1]
    return sorted(seen, key=lambda s: (s.depth, not s.daemons))


def choice_of(environ: Mapping[str, str], option: str | None) -> str:
    """``auto``, ``none`` or a name of :data:`SOURCE_NAMES`: ``option`` (``--source``, or
    ``None``), else ``DERIVE_ENV_SOURCE``, else auto.

    :raises UsageError: ``--source`` is none of them (exit 2); TopologyError:
        ``DERIVE_ENV_SOURCE`` is none of them (exit 3).
    """
    value = option if option is not None else environ.get(SOURCE_VARIABLE, "").strip() or AUTO
    if value not in (AUTO, NONE, *SOURCE_NAMES):
        error = UsageError if option is not None else TopologyError
        raise error(describe(
            "--source" if option is not None else SOURCE_VARIABLE, value,
            f"one of auto, none, {', '.join(SOURCE_NAMES)}"))
    return value


def forced_source(name: str, environ: Mapping[str, str]) -> Source:
    """The line of the chosen source ``name`` (one of :data:`SOURCE_NAMES`); TopologyError
    naming the missing ones when its variables are not set (all; ``any_of``: at least one)."""
    source = BY_NAME[name]
    missing = [v for v in source.detect if not environ.get(v)]
    if source.any_of and len(missing) < len(source.detect):
        missing = []
    if missing:
        needs = "at least one of" if source.any_of else "all of"
        raise TopologyError(describe(
            f"--source (or {SOURCE_VARIABLE})", name,
            f"a source whose variables are set: {source.title} needs {needs} "
            f"{', '.join(source.detect)}; not set: {', '.join(missing)}"))
    return source
