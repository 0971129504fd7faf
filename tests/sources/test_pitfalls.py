"""The cloud survey's ten pitfalls (sources-cloud.md section 24), on Kubernetes (issue 16).

Every one of them concerns at least one Kubernetes controller; the halves that concern other
managers only (AWS Batch, Grid Engine and OpenPBS in 1; SageMaker in 5 and 10; SkyPilot and
dstack in 6 and 8; Azure Batch in 7; Flux, OpenPBS and Grid Engine encodings in 10) are not
Kubernetes and are left to those sources' tests. Each pitfall has a test asserting exact
values, here or where the source's own tests already do it.

Pitfall, what it is on Kubernetes, and the tests (``here``: this file):

1. Asymmetric views: each pod sees only its own /etc/hosts line; PyTorchJob's master pod gets
   ``localhost``, the others its service; mpi-operator's hostfile is the launcher's only.
   - sources/test_indexed_job.py::test_every_pod_of_a_job_derives_one_job
   - sources/test_kubeflow.py::test_pytorchjob_master_pod_with_localhost_names_its_service
   - here::test_1_every_pod_derives_the_same_master
2. The size is not in the env (Indexed Job: ``parallelism``; LWS: the number of groups, which
   is not needed: a group is one job).
   - sources/test_indexed_job.py::test_without_the_count_every_index_is_refused_alike
   - sources/test_lws.py::test_the_controllers_own_pods
3. ``RANK``/``WORLD_SIZE`` are pod values (Volcano's pytorch plugin, Kubeflow v1).
   - sources/test_volcano.py::test_rank_and_world_size_are_node_values_checked
   - sources/test_kubeflow.py::test_pytorchjob_nproc_2
   - here::test_3_volcano_rank_and_world_size_are_pod_values_never_process_ranks
   - here::test_3_kubeflow_v1_rank_is_the_pods_and_world_size_the_jobs_processes
   - here::test_3_volcano_world_size_as_processes_is_an_error
4. Names resolve only once the pod is ready (label ``socket-ifname=auto`` resolves them).
   - frameworks/test_network.py::test_pod_peers_not_ready_warn_naming_them
   - frameworks/test_network.py::test_pod_one_peer_not_ready_is_named_alone
   - frameworks/test_network.py::test_not_ready_is_never_an_error_even_with_on_error_fail
   - frameworks/test_network.py::test_not_ready_within_the_one_deadline_whatever_dns_does
   - cli/test_run.py::test_peers_not_ready_warn_on_the_exec_path
   - cli/test_run.py::test_peers_not_ready_warn_on_the_hook_path
5. Order: the manager's, never lexicographic (mpi-operator's discover_hosts.sh sorts).
   - here::test_5_index_order_not_lexicographic
6. Controller env vs user env: a user-set ``JOB_COMPLETION_INDEX`` wins over the Job
   controller's; Volcano appends after the user's; LWS drops the user's entries of its names.
   - sources/test_indexed_job.py::test_a_user_set_index_is_checked_against_the_hostname
   - sources/test_volcano.py::test_a_user_set_index_and_missing_lists_are_refused
   - sources/test_lws.py::test_a_hostname_of_another_pod_is_an_error_naming_both
   - here::test_6_lws_drops_the_users_entries_of_its_names
   - here::test_6_a_user_set_completion_index_contradicting_the_hostname_is_an_error
   - here::test_6_lws_variables_copied_into_another_pod_are_an_error
7. Ranks mpirun starts over ssh on mpi-operator workers see no pod variable.
   - here::test_7_an_ssh_started_rank_is_never_a_single_node
8. No GPU count from Kubernetes, JobSet, LWS, Volcano.
   - here::test_8_no_gpu_count_is_never_nproc_0
9. Non-training members (TFJob and Volcano ps and evaluators, Volcano's extra tasks).
   - sources/test_tfconfig.py::test_a_ps_or_evaluator_task_is_refused_with_the_reason
   - sources/test_volcano.py::test_pytorch_plugin_counts_only_master_and_worker
   - here::test_9_the_node_count_is_the_training_members_only
10. Self by the manager's own field (the hostname, not the pod name with its random suffix);
    hostnames are one DNS label, at most 63 characters (kubernetes-sigs/jobset#408).
   - sources/test_indexed_job.py::test_a_63_character_hostname_is_read_and_64_is_not
   - sources/test_lws.py::test_a_hostname_of_63_characters_is_the_kubelets_cut
   - here::test_10_a_volcano_pod_name_of_63_characters_is_its_hostname

test_the_table_names_tests_that_exist keeps this list true.

The environments are typed from the controllers' code, by the builders of each source's tests
(which cite the file and function).
"""

from __future__ import annotations

import pytest

from derive_env.errors import TopologyError
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from support.k8s import etc_hosts, lws_pod, tfjob, volcano_pod
from support.k8s import indexed_job_pod as indexed_pod
from support.kubeflow import pytorchjob_pod

PYTORCH = {PREFIX + "frameworks": "pytorch"}
NO_GPU_COUNT = ("PET_NPROC_PER_NODE not set, so torchrun starts 1 process per node: no "
                "nproc-per-node label and no GPU count ({} states none); to change: "
                "DERIVE_ENV_NPROC_PER_NODE=N (or --label ai.backend.distributed.nproc-per-node=N), "
                "or torchrun --nproc-per-node=N")


def derived(env: dict[str, str], labels: dict[str, str] = PYTORCH,
            files: dict[str, str] | None = None) -> tuple[dict[str, str], tuple[str, ...]]:
    """The variables one pod gets (name -> value), and the notes."""
    derivation = derive(env, labels, None,
                        files=lambda paths: {p: (files or {}).get(p) for p in paths})
    assert derivation is not None
    return ({v.name: v.value for v in derivation.variables if v.framework != "derive-env"},
            derivation.notes)  # the run id: tests/test_merge.py


def error(env: dict[str, str], labels: dict[str, str] = PYTORCH) -> str:
    with pytest.raises(TopologyError) as caught:
        derive(env, labels, None, files=lambda paths: dict.fromkeys(paths))
    return str(caught.value)


# --------------------------------------------------------------------------- 1


def test_1_every_pod_derives_the_same_master() -> None:
    """Each pod of a Volcano job sees the lists from its own place; LWS workers see only the
    leader's address: every pod derives the master node rank 0 has, and one port."""
    volcano = [volcano_pod("pt", {"master": 1, "worker": 3}, task, i)
               for task, i in [("master", 0), ("worker", 0), ("worker", 1), ("worker", 2)]]
    masters = {(v["MASTER_ADDR"], v["MASTER_PORT"]) for v in
               (derived(env, files=files)[0] for env, files in volcano)}
    assert masters == {("pt-master-0.pt", "64994")}
    group = [derived(lws_pod("llama", 0, w, 3))[0] for w in range(3)]
    assert {(v["MASTER_ADDR"], v["MASTER_PORT"]) for v in group} == {
        ("llama-0.llama.default", "64117")}
    assert [v["NODE_RANK"] for v in group] == ["0", "1", "2"]


# --------------------------------------------------------------------------- 3


def test_3_volcano_rank_and_world_size_are_pod_values_never_process_ranks() -> None:
    """The pytorch plugin's RANK=2, WORLD_SIZE=4 are the pod's: with 8 processes per pod
    torchrun gets 4 nodes, node rank 2; RANK and WORLD_SIZE are left to torchrun."""
    env, files = volcano_pod("pt", {"master": 1, "worker": 3}, "worker", 1, pytorch=True)
    (variables, _) = derived(env, {**PYTORCH, PREFIX + "nproc-per-node": "8"}, files)
    assert variables == {
        "MASTER_ADDR": "pt-master-0.pt", "MASTER_PORT": "23456", "NODE_RANK": "2",
        "PET_NNODES": "4", "PET_NODE_RANK": "2", "PET_MASTER_ADDR": "pt-master-0.pt",
        "PET_MASTER_PORT": "23456", "PET_NPROC_PER_NODE": "8"}


def test_3_kubeflow_v1_rank_is_the_pods_and_world_size_the_jobs_processes() -> None:
    """setPodEnv: RANK = the pod's rank, WORLD_SIZE = pods x nproc (6): neither is this
    process's; the node layer is 3 pods and this pod is node 1 (the operator's
    PET_NPROC_PER_NODE=2 is torchrun's, left as it is)."""
    variables, _ = derived(pytorchjob_pod("bert", 2, 1, "2"))
    assert variables == {
        "MASTER_ADDR": "bert-master-0", "MASTER_PORT": "23456", "NODE_RANK": "1",
        "PET_NNODES": "3", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "bert-master-0",
        "PET_MASTER_PORT": "23456"}


def test_3_volcano_world_size_as_processes_is_an_error() -> None:
    env, _ = volcano_pod("pt", {"master": 1, "worker": 3}, "worker", 1, pytorch=True)
    assert error({**env, "WORLD_SIZE": "32"}).startswith(
        "WORLD_SIZE='32': expected 4, the pods of the master and worker tasks: the pytorch "
        "plugin sets pod values, not process ranks (pytorch.go OnPodCreate); ")


# --------------------------------------------------------------------------- 5


def test_5_index_order_not_lexicographic() -> None:
    """Worker 10 of 12 is node 11 after the chief or master (a lexicographic sort of the pod
    names, as mpi-operator's discover_hosts.sh does, would put it 3rd)."""
    tf = {"TF_CONFIG": tfjob("m", {"chief": 1, "worker": 12}, "worker", 10),
          "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    env, files = volcano_pod("big", {"master": 1, "worker": 12}, "worker", 10)
    for variables in (derived(tf)[0], derived(env, files=files)[0]):
        assert (variables["NODE_RANK"], variables["PET_NNODES"]) == ("11", "13")


# --------------------------------------------------------------------------- 6


def _lws_webhook(template_env: list[tuple[str, str]], pod: dict[str, str]) -> dict[str, str]:
    """pod_utils.go addEnvVarsIfNotExists: the controller's three variables first, then the
    template's entries whose names are not among them (the user's LWS_* are dropped); the
    container's environment is that list (a later duplicate would win: there is none)."""
    ours = [(k, pod[k]) for k in ("LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX")]
    kept = [(k, v) for k, v in template_env if k not in dict(ours)]
    return {**{k: v for k, v in pod.items() if not k.startswith("LWS_")}, **dict(ours + kept)}


def test_6_lws_drops_the_users_entries_of_its_names() -> None:
    user = [("LWS_WORKER_INDEX", "0"), ("LWS_GROUP_SIZE", "8"), ("NCCL_DEBUG", "INFO")]
    env = _lws_webhook(user, lws_pod("llama", 0, 2, 3))
    assert (env["LWS_WORKER_INDEX"], env["LWS_GROUP_SIZE"], env["NCCL_DEBUG"]) == ("2", "3",
                                                                                   "INFO")
    variables, _ = derived(env)
    assert (variables["NODE_RANK"], variables["PET_NNODES"]) == ("2", "3")


def test_6_a_user_set_completion_index_contradicting_the_hostname_is_an_error() -> None:
    """addCompletionIndexEnvVariable skips a name the template's env already has."""
    env = indexed_pod("train", 2, 4, "train", JOB_COMPLETION_INDEX="0")
    assert error(env).startswith(
        "JOB_COMPLETION_INDEX='0': expected 2, the index in this pod's hostname "
        "HOSTNAME='train-2' (the Job controller names the pod's host <job>-<index> ")


def test_6_lws_variables_copied_into_another_pod_are_an_error() -> None:
    env = {**lws_pod("llama", 0, 2, 3), "HOSTNAME": "llama-0-1"}
    assert error(env).startswith("HOSTNAME='llama-0-1': expected ")


# --------------------------------------------------------------------------- 7


#: A rank started over ssh on an mpi-operator worker: sshd's environment and the MPI
#: launcher's, none of the pod's (no KUBERNETES_*, no LWS_/VC_/PET_*). Open MPI's orted
#: (mpiImplementation OpenMPI) sets OMPI_COMM_WORLD_*; Intel MPI's and MPICH's hydra proxy
#: (mpiImplementation Intel, MPICH) PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS.
SSH = {"SSH_CONNECTION": "10.244.1.5 40022 10.244.1.7 22", "HOME": "/root",
       "PATH": "/usr/bin:/bin"}
SSH_RANKS = {
    "openmpi": ({**SSH, "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "2",
                 "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
                 "OMPI_COMM_WORLD_NODE_RANK": "2"},
                "Open MPI (mpirun)", "mpirun -x MASTER_ADDR=<host of rank 0>"),
    "hydra": ({**SSH, "PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0",
               "MPI_LOCALNRANKS": "1"},
              "MPICH Hydra or Intel MPI (mpiexec)", "mpiexec -genv MASTER_ADDR <host of rank 0>"),
}


@pytest.mark.parametrize("mpi", sorted(SSH_RANKS))
def test_7_an_ssh_started_rank_is_never_a_single_node(mpi: str) -> None:
    """No pod variable, but the MPI launcher's: a process of a 4-process job, never a job
    of one; without a master the start stops, naming what to pass."""
    env, title, pass_env = SSH_RANKS[mpi]
    assert error(env).startswith(
        "MASTER_ADDR='': expected the host of rank 0 (it also gives JAX's coordinator): "
        f"{title} states no host list, so the host of rank 0 is unknown: set MASTER_ADDR to "
        f"it (the same value for every process, e.g. {pass_env})")
    variables, _ = derived({**env, "MASTER_ADDR": "pi-worker-0.pi-worker.default.svc"})
    assert variables == {"MASTER_ADDR": "pi-worker-0.pi-worker.default.svc",
                         "MASTER_PORT": "29500", "RANK": "2", "LOCAL_RANK": "0",
                         "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "1"}


# --------------------------------------------------------------------------- 8


@pytest.mark.parametrize("kind", ["indexed-job", "lws", "volcano", "tfjob"])
def test_8_no_gpu_count_is_never_nproc_0(kind: str) -> None:
    """Kubernetes states no GPU count: PET_NPROC_PER_NODE is not set (never 0), and said so;
    the label gives it."""
    files = None
    if kind == "indexed-job":
        env = indexed_pod("train", 1, 2)
        files = {"/etc/hosts": etc_hosts("train-1", "train-1.train.default.svc.cluster.local")}
    elif kind == "lws":
        env = lws_pod("llama", 0, 1, 2)
    elif kind == "volcano":
        env, files = volcano_pod("pt", {"master": 1, "worker": 1}, "worker", 0)
    else:
        env = {"TF_CONFIG": tfjob("m", {"chief": 1, "worker": 1}, "worker", 0),
               "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    variables, notes = derived(env, files=files)
    source = {"indexed-job": "kubernetes-indexed-job", "tfjob": "tf-config"}.get(kind, kind)
    assert ("PET_NPROC_PER_NODE" not in variables,
            NO_GPU_COUNT.format(source) in notes) == (True, True), notes
    labelled, _ = derived(env, {**PYTORCH, PREFIX + "nproc-per-node": "4"}, files)
    assert labelled["PET_NPROC_PER_NODE"] == "4"


# --------------------------------------------------------------------------- 9


def test_9_the_node_count_is_the_training_members_only() -> None:
    """Volcano with the pytorch plugin: its ps task is no node (3 nodes, not 5); a TFJob's
    ps and evaluator are no nodes either (chief + 2 workers)."""
    env, files = volcano_pod("p", {"master": 1, "worker": 2, "ps": 2}, "worker", 1,
                             pytorch=True)
    assert derived(env, files=files)[0]["PET_NNODES"] == "3"
    tf = tfjob("m", {"chief": 1, "worker": 2, "ps": 2, "evaluator": 1}, "worker", 1)
    variables, _ = derived({"TF_CONFIG": tf, "KUBERNETES_SERVICE_HOST": "10.96.0.1"})
    assert (variables["PET_NNODES"], variables["NODE_RANK"]) == ("3", "2")


# --------------------------------------------------------------------------- 10


def test_10_a_volcano_pod_name_of_63_characters_is_its_hostname() -> None:
    """svc.go OnPodCreate: hostname = the pod name ``<job>-<task>-<i>``, at most one DNS
    label (63 characters); the pod is identified by its index and that name."""
    job = "j" * 52                      # j...j-worker-1: 52 + 1 + 6 + 2 = 61; worker-10: 62
    env, files = volcano_pod(job, {"master": 1, "worker": 11}, "worker", 10)
    assert len(env["HOSTNAME"]) == 62
    variables, _ = derived(env, files=files)
    assert (variables["NODE_RANK"], variables["MASTER_ADDR"]) == ("11", f"{job}-master-0.{job}")
    long_job = "j" * 53                 # j...j-worker-10: 63 characters
    env, files = volcano_pod(long_job, {"master": 1, "worker": 11}, "worker", 10)
    assert len(env["HOSTNAME"]) == 63
    assert derived(env, files=files)[0]["NODE_RANK"] == "11"
    # 64: no pod can have that host name (one DNS label): an error naming the list, no guess.
    env, files = volcano_pod("j" * 54, {"master": 1, "worker": 11}, "worker", 10)
    message = error(env)
    assert message.startswith(f"VC_WORKER_HOSTS='{'j' * 54}-worker-0.")
    assert ("expected a list of <hostname>.<subdomain> (a host name (letters, digits, '-' and "
            "'.') or an IP address; svc.go GenerateHosts)") in message


# --------------------------------------------------------------------------- the table


def test_the_table_names_tests_that_exist() -> None:
    import re
    from pathlib import Path

    tests = Path(__file__).resolve().parents[1]
    named = re.findall(r"^ +- (\S+)::(test_\w+)$", __doc__ or "", re.M)
    assert len(named) >= 30
    for where, name in named:
        text = (Path(__file__).read_text(encoding="utf-8") if where == "here"
                else (tests / where).read_text(encoding="utf-8"))
        assert re.search(rf"^def {name}\(", text, re.M), f"{where}::{name}"
    assert {int(n) for n in re.findall(r"^(\d+)\. ", __doc__ or "", re.M)} == set(range(1, 11))
