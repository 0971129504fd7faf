"""A debugging stand-in for derive-env in the real-manager e2e jobs (NOT a test, not derive-env).

``python standin.py LAYER MASTER PORT -- CMD...`` sets, by hand, the variables the issue #9
contract says derive-env sets for a job, from the launcher's own variables, then execs
``CMD``. It exists to separate infrastructure problems (Slurm, sshd, Open MPI, MPICH,
namespaces, gloo) from derive-env's: run a job of test_e2e_slurm.py / test_e2e_mpi.py with
``E2E_HPC_STANDIN=1`` and every job runs with this instead of ``derive-env --``, with the
same assertions. The test passes the master host and port it expects, so nothing here
derives a topology: it only translates the launcher's vocabulary.

``LAYER``: ``process`` (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK when the
launcher gives a node index, MASTER_ADDR, MASTER_PORT; JAX_* and TF_CONFIG as well), or
``node`` (one task per node, for torchrun: MASTER_ADDR, MASTER_PORT, NODE_RANK, PET_NNODES,
PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT). Vocabularies: Slurm (SLURM_PROCID...),
Open MPI (OMPI_COMM_WORLD_*), MPICH Hydra (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID,
MPI_LOCALNRANKS). Ports: MASTER_PORT = PORT, TensorFlow PORT + 1 + local rank, JAX PORT + 3;
PORT ``0`` under Slurm: the first of SLURM_STEP_RESV_PORTS, else ports.job_ports' port of
(slurm, job, step), in 61000-65535 on every node.

TF_CONFIG lists every process as a worker, in rank order, each at its node's host (taken
from ``E2E_STANDIN_HOSTS``: the node of every rank, comma-separated, given by the test).
"""

from __future__ import annotations

import json
import os
import socket
import sys

#: (rank, local rank, world size, local world size) per vocabulary, MPI's first (an mpirun
#: inside an allocation also has its orted step's SLURM_*).
VOCABULARIES = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", "MPI_LOCALNRANKS"),
    ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS", "SLURM_GTIDS"),
)


def main(argv: list[str]) -> int:
    """Set the variables, exec the command; 2 on a bad command line."""
    if len(argv) < 5 or argv[3] != "--" or argv[0] not in ("process", "node"):
        print(__doc__, file=sys.stderr)
        return 2
    layer, master, port = argv[0], argv[1], int(argv[2])
    env = os.environ
    if port == 0 and "SLURM_STEP_RESV_PORTS" in env:
        port = int(env["SLURM_STEP_RESV_PORTS"].split(",")[0].split("-")[0])
    elif port == 0:
        from derive_env import ports

        port = ports.job_ports("slurm", env["SLURM_JOB_ID"], env["SLURM_STEP_ID"])[0]
    # No launcher's ranks (a batch script): one node, one process.
    names = next((v for v in VOCABULARIES if v[2] in env), None)
    rank, local, world, local_world = (env[n] for n in names) if names else ("0", "0", "1", "1")
    if names and names[3] == "SLURM_GTIDS":  # the global ids of this node's tasks
        local_world = str(len(local_world.split(",")))
    # The node index: the own host's place in E2E_STANDIN_NODES when the test gives it (an
    # mpirun in a batch script: ranks there see different steps), else Slurm's step's.
    nodes = env.get("E2E_STANDIN_NODES", "").split(",")
    if socket.gethostname() in nodes:
        node: str | None = str(nodes.index(socket.gethostname()))
    else:
        node = env.get("SLURM_NODEID") if "SLURM_STEP_NODELIST" in env else None
    if names is None:
        node = "0"
    new = {"MASTER_ADDR": master, "MASTER_PORT": str(port)}
    if layer == "node":
        nnodes = env.get("SLURM_STEP_NUM_NODES", "1")
        new.update(NODE_RANK=str(node), PET_NNODES=nnodes, PET_NODE_RANK=str(node),
                   PET_MASTER_ADDR=master, PET_MASTER_PORT=str(port))
    else:
        new.update(RANK=rank, LOCAL_RANK=local, WORLD_SIZE=world, LOCAL_WORLD_SIZE=local_world)
        if node is not None:
            new["NODE_RANK"] = node
        new.update(JAX_COORDINATOR_ADDRESS=f"{master}:{port + 3}", JAX_NUM_PROCESSES=world,
                   JAX_PROCESS_ID=rank)
        hosts = env.get("E2E_STANDIN_HOSTS", "").split(",")
        if len(hosts) == int(world):
            workers, seen = [], {}
            for host in hosts:
                workers.append(f"{host}:{port + 1 + seen.get(host, 0)}")
                seen[host] = seen.get(host, 0) + 1
            new["TF_CONFIG"] = json.dumps(
                {"cluster": {"worker": workers}, "task": {"type": "worker", "index": int(rank)}})
    env.update(new)
    os.execvp(argv[4], argv[4:])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
