"""Every node's (or process's) environment of a job of random size, per source line: the
builders of the conformance suite (tests/sources/test_conformance.py). ``JOBS[name]`` is a
hypothesis strategy of ``[(environ, files), ...]``, one item per node or process of one
job, ``files`` the text of each file the line asks for (path -> text, ``None``: unreadable).
A line without a builder here is skipped by that property, visibly.
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

from support.backendai import hosts_by_index, make_backendai_env, sessions
from support.k8s import etc_hosts, indexed_job_pod, lws_pod, tfjob, volcano_pod
from support.kubeflow import pytorchjob_pod, trainjob_node
from support.slurm import job_envs, slurm_jobs

Job = list[tuple[dict[str, str], dict[str, "str | None"]]]


@st.composite
def _backendai(draw) -> Job:
    pairs, group_order = draw(sessions())
    rnd = random.Random(draw(st.integers(0, 2**32 - 1)))
    names = [f"{role}{i}" for role, count in pairs for i in range(1, count + 1)]
    return [(make_backendai_env(hosts_by_index(pairs, rnd), host, pairs,
                                group_order=group_order), {}) for host in names]


@st.composite
def _slurm_step(draw) -> Job:
    job_hosts, hosts, tpn, dist, order = draw(slurm_jobs())
    files = {"/h": "\n".join(order) + "\n"} if order else {}
    return [(env, files) for _host, env in job_envs(job_hosts, hosts, tpn, dist, order)]


@st.composite
def _pytorchjob(draw) -> Job:
    workers, port = draw(st.integers(0, 12)), draw(st.integers(1024, 65535))
    nproc = draw(st.sampled_from(["1", "2", "auto", "gpu"]))
    return [(pytorchjob_pod("job-1", workers, pod, nproc, port), {})
            for pod in range(workers + 1)]


@st.composite
def _trainjob(draw) -> Job:
    nodes = draw(st.integers(1, 32))
    nproc = draw(st.sampled_from(["1", "2", "auto", "gpu"]))
    return [(trainjob_node("t", nodes, i, nproc), {}) for i in range(nodes)]


@st.composite
def _indexed_job(draw) -> Job:
    count, fqdn = draw(st.integers(1, 24)), draw(st.booleans())
    out: Job = []
    for index in range(count):
        hosts = etc_hosts(f"job-{index}", f"job-{index}.job.default.svc.cluster.local")
        out.append((indexed_job_pod("job", index, count, None if fqdn else "job"),
                    {"/etc/hosts": hosts if fqdn else None}))
    return out


@st.composite
def _lws(draw) -> Job:
    size, group, unique = draw(st.integers(1, 24)), draw(st.integers(0, 99)), draw(st.booleans())
    return [(lws_pod("set", group, i, size, "ns", f"set-{group}" if unique else None), {})
            for i in range(size)]


@st.composite
def _tf_config(draw) -> Job:
    chief, workers, ps = draw(st.booleans()), draw(st.integers(0, 12)), draw(st.integers(0, 3))
    workers = workers or (0 if chief else 1)
    replicas = {"chief": int(chief), "worker": workers, "ps": ps}
    tasks = [("chief", 0)] * chief + [("worker", i) for i in range(workers)]
    return [({"TF_CONFIG": tfjob("j", replicas, t, i)}, {}) for t, i in tasks]


@st.composite
def _volcano(draw) -> Job:
    workers = draw(st.integers(1, 12))
    tasks = {"master": 1, "worker": workers} if draw(st.booleans()) else {"worker": workers}
    pytorch = "master" in tasks and draw(st.booleans())
    return [volcano_pod("job", tasks, task, i, pytorch)
            for task, replicas in sorted(tasks.items()) for i in range(replicas)]


# -- the managers' own environments (each source's tests use them too) -----------------------

CONDOR_SPOOL = "/var/lib/condor/spool/7/0/cluster7.proc0.subproc0"


def htcondor_node(number: int, count: int) -> dict[str, str]:
    return {"_CONDOR_PROCNO": str(number), "_CONDOR_NPROCS": str(count),
            "_CONDOR_REMOTE_SPOOL_DIR": CONDOR_SPOOL,
            "_CONDOR_SCRATCH_DIR": "/var/lib/condor/execute/dir_4242", "_CONDOR_SLOT": "slot1_1"}


def flux_task(rank: int, local: int, size: int, nodes: int, job: str = "ƒuZZybuNNy",
         pmi: bool = True) -> dict[str, str]:
    env = {"FLUX_URI": "local:///run/flux/local", "FLUX_KVS_NAMESPACE": f"job-{job}",
           "FLUX_JOB_ID_PATH": f"/{job}", "FLUX_JOB_SIZE": str(size),
           "FLUX_JOB_NNODES": str(nodes), "FLUX_JOB_ID": job,
           "FLUX_TASK_LOCAL_ID": str(local), "FLUX_TASK_RANK": str(rank)}
    if pmi:
        env.update(PMI_RANK=str(rank), PMI_SIZE=str(size), PMI_FD="3")
    return env


AZUREML_RUN = "train_1700000000_a1b2c3d4"


def azureml_mpi(rank: int, nodes: int, per_node: int, master: str = "10.0.0.4",
        count: bool = True) -> dict[str, str]:
    """Process ``rank`` of an MPI-distribution job (mpirun fills node by node)."""
    environ = {"AZUREML_RUN_ID": AZUREML_RUN, "AZ_BATCH_MASTER_NODE": f"{master}:6000",
               "OMPI_COMM_WORLD_SIZE": str(nodes * per_node),
               "OMPI_COMM_WORLD_RANK": str(rank),
               "OMPI_COMM_WORLD_LOCAL_RANK": str(rank % per_node),
               "OMPI_COMM_WORLD_LOCAL_SIZE": str(per_node)}
    if count:
        environ["AZUREML_NODE_COUNT"] = str(nodes)
    return environ


def azureml_pytorch(rank: int, nodes: int, per_node: int) -> dict[str, str]:
    """Process ``rank`` of a PyTorch-distribution job (the guide's variables)."""
    return {"AZUREML_RUN_ID": AZUREML_RUN, "AZUREML_NODE_COUNT": str(nodes),
            "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "6105",
            "WORLD_SIZE": str(nodes * per_node), "RANK": str(rank),
            "LOCAL_RANK": str(rank % per_node), "NODE_RANK": str(rank // per_node)}


def skypilot_node(ips: list[str], rank: int, gpus: int = 8,
                  task: str = "sky-2026-12-02-01-00-00-000000_mycluster_1") -> dict[str, str]:
    """One node of a SkyPilot task (task_codegen.py ``_add_ray_task``)."""
    return {"SKYPILOT_NODE_IPS": "\n".join(ips), "SKYPILOT_NODE_RANK": str(rank),
            "SKYPILOT_NUM_NODES": str(len(ips)), "SKYPILOT_NUM_GPUS_PER_NODE": str(gpus),
            "SKYPILOT_TASK_ID": task, "SKYPILOT_CLUSTER_INFO": "{}"}


def dstack_node(ips: list[str], rank: int, gpus: int = 8, run: str = "3f2a") -> dict[str, str]:
    """One node of a dstack task (executor.go ``execJob``)."""
    return {"DSTACK_RUN_NAME": "train", "DSTACK_REPO_ID": "repo", "DSTACK_RUN_ID": run,
            "DSTACK_NODES_IPS": "\n".join(ips), "DSTACK_MASTER_NODE_IP": ips[0],
            "DSTACK_NODE_RANK": str(rank), "DSTACK_NODES_NUM": str(len(ips)),
            "DSTACK_GPUS_PER_NODE": str(gpus), "DSTACK_GPUS_NUM": str(len(ips) * gpus)}


def ipv4s(count: int) -> list[str]:
    return [f"10.{i // 65536}.{i // 256 % 256}.{i % 256 + 0}" for i in range(1, count + 1)]


@st.composite
def _htcondor(draw) -> Job:
    count = draw(st.integers(1, 32))
    return [({**htcondor_node(n, count), "MASTER_ADDR": "10.1.0.5"}, {}) for n in range(count)]


@st.composite
def _flux(draw) -> Job:
    nodes = draw(st.integers(1, 16))
    return [({**flux_task(r, 0, nodes, nodes), "MASTER_ADDR": "node0"}, {}) for r in range(nodes)]


def deepspeed_process(rank: int, sizes: list[int], node: int, master: str = "10.2.0.7",
                      **extra: str) -> dict[str, str]:
    """What DeepSpeed's launch.py (``main``) sets for global rank ``rank`` on ``node`` of a
    job whose nodes run ``sizes`` processes (host-major ranks, LOCAL_RANK = RANK % LOCAL_SIZE)."""
    return {"MASTER_ADDR": master, "MASTER_PORT": "29500", "WORLD_SIZE": str(sum(sizes)),
            "CROSS_RANK": str(node), "CROSS_SIZE": str(len(sizes)),
            "LOCAL_SIZE": str(sizes[node]), "RANK": str(rank),
            "LOCAL_RANK": str(rank % sizes[node]), **extra}


@st.composite
def _deepspeed(draw) -> Job:
    # two processes or more: one process alone is a single container (its run id is the
    # start's fresh one, drawn at the edge)
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=6).filter(
        lambda s: sum(s) > 1))
    first = [sum(sizes[:n]) for n in range(len(sizes))]
    return [(deepspeed_process(first[n] + local, sizes, n), {})
            for n in range(len(sizes)) for local in range(sizes[n])]


@st.composite
def _azureml(draw, kind: str) -> Job:
    # AZ_BATCH_MASTER_NODE is set for more than one node only
    nodes, per_node = draw(st.integers(2 if kind == "mpi" else 1, 8)), draw(st.integers(1, 4))
    make = azureml_mpi if kind == "mpi" else azureml_pytorch
    return [(make(rank, nodes, per_node), {}) for rank in range(nodes * per_node)]


@st.composite
def _launchtools(draw, kind: str) -> Job:
    ips = draw(st.permutations(ipv4s(draw(st.integers(1, 24)))))
    gpus = draw(st.integers(0, 8))
    make = skypilot_node if kind == "skypilot" else dstack_node
    return [(make(ips, rank, gpus), {}) for rank in range(len(ips))]


JOBS = {
    "backendai": _backendai(),
    "slurm-step": _slurm_step(),
    "kubeflow-pytorchjob": _pytorchjob(),
    "kubeflow-trainjob": _trainjob(),
    "kubernetes-indexed-job": _indexed_job(),
    "lws": _lws(),
    "tf-config": _tf_config(),
    "volcano": _volcano(),
    "htcondor": _htcondor(),
    "flux": _flux(),
    "deepspeed": _deepspeed(),
    "azureml-mpi": _azureml("mpi"),
    "azureml-pytorch": _azureml("pytorch"),
    "skypilot": _launchtools("skypilot"),
    "dstack": _launchtools("dstack"),
}
