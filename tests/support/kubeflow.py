"""Kubeflow's pods as the training operator sets their environment: a PyTorchJob (v1) pod
(setPodEnv), a TrainJob (v2) node (EnforceMLPolicy)."""

from __future__ import annotations


def pytorchjob_pod(job: str, workers: int, pod: int, nproc: str, port: int = 23456,
                   elastic: str | None = None, later: bool = False) -> dict[str, str]:
    """One pod of a PyTorchJob with a Master and ``workers`` Workers, as setPodEnv sets it
    (``later``: the master pod's ``localhost``, as operators up to v1.3 gave it, pytorch.go
    ``setPodEnv``, with PET_MASTER_* copies); ``HOSTNAME`` is the pod's name, as the kubelet
    sets it (``<job>-master-0``, ``<job>-worker-<i>``)."""
    pods = 1 + workers
    per = int(nproc) if nproc.isdigit() else 1  # getNprocPerNodeInt
    master = "localhost" if later and pod == 0 else f"{job}-master-0"
    env = {"PYTHONUNBUFFERED": "0", "MASTER_PORT": str(port), "MASTER_ADDR": master,
           "WORLD_SIZE": str(pods * per), "RANK": str(pod), "PET_NPROC_PER_NODE": nproc,
           "PET_NODE_RANK": str(pod),
           "HOSTNAME": f"{job}-master-0" if pod == 0 else f"{job}-worker-{pod - 1}"}
    if later:
        env.update(PET_MASTER_ADDR=master, PET_MASTER_PORT=str(port))
    if elastic:
        env.update(PET_NNODES=elastic, PET_RDZV_BACKEND="c10d", PET_MAX_RESTARTS="3",
                   PET_RDZV_ENDPOINT=f"{job}-master-0:{port}", PET_RDZV_ID=job)
    else:
        env["PET_NNODES"] = str(pods)
    return env


def trainjob_node(job: str, nodes: int, index: int, nproc: str = "auto") -> dict[str, str]:
    """One node of a TrainJob, as EnforceMLPolicy sets it."""
    return {"PET_NNODES": str(nodes), "PET_NPROC_PER_NODE": nproc, "PET_NODE_RANK": str(index),
            "PET_MASTER_ADDR": f"{job}-node-0-0.{job}", "PET_MASTER_PORT": "29500"}

