"""Issue #9 item 8b: real MPI launchers start ``derive-env -- python torch_allreduce.py`` on 6
ranks across the simulated nodes, and the ranks all-reduce over gloo.

One real cluster for the module (tests/e2e/slurmcluster.py with ``ssh=True``: one sshd per
node ``gpu-a100-[09-11]`` on port 2200, and Slurm): every launcher runs on the login node,
which is not one of the ranks' nodes.

- Open MPI 4.1 ``mpirun.openmpi`` over SSH (``-H`` with 2 slots per node, ``--mca
  plm_rsh_agent`` the cluster's ssh wrapper, ``-x`` for the variables): the launcher gives no
  host list, so the user passes the master (``-x MASTER_ADDR=gpu-a100-09``);
- ``mpirun.openmpi`` inside a Slurm allocation (``salloc -N3 --ntasks-per-node=2``): the ranks
  are Open MPI's (not the orted step's 3 tasks), the hosts Slurm's, so the master is the
  allocation's first node and every rank knows its node;
- ``mpirun.openmpi`` in a batch script (``sbatch --wait -N3 --ntasks-per-node=2``): the ranks
  on the batch node are mpirun's own children (no step variables), the others run in a 2-node
  orted step whose SLURM_NODEID is 0 on gpu-a100-10: each node sees a different Slurm view;
- MPICH 4.0 Hydra ``mpiexec.mpich`` over SSH (``-launcher ssh -launcher-exec``), the master
  given with ``-genv MASTER_ADDR gpu-a100-09``; and inside a Slurm allocation (``salloc``,
  Hydra's Slurm launcher: one srun step of hydra_pmi_proxy per node).

E2E_HPC_STANDIN=1 runs the same jobs with a hand-written stand-in for derive-env (hpc_jobs).
Needs root, ``ip netns``, slurm-wlm, munge, openssh-server, openmpi-bin, mpich, torch:
skipped without them, FAILS under CI=true.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpc_jobs import EXAMPLES, NODES, cluster, job_env, launch, reports, require_hpc, sbatch
from hpc_jobs import write_labels as labels_file
from slurmcluster import SlurmCluster

pytestmark = pytest.mark.e2e

#: Seconds a whole job may take (the harness kills the launcher after it).
JOB_TIMEOUT_S = 150.0
TORCH = str(EXAMPLES / "torch_allreduce.py")
#: 2 slots per node, for the launches over SSH.
HOSTS_2 = ",".join(f"{n}:2" for n in NODES)
#: By-slot placement, 2 per node: the node of every rank.
BLOCK_HOSTS = [n for n in NODES for _ in range(2)]
OMPI = ["mpirun.openmpi", "--allow-run-as-root"]


@pytest.fixture(scope="module")
def mpi() -> Iterator[SlurmCluster]:
    """One cluster with sshd on every node for every job of this module."""
    require_hpc("mpirun.openmpi", "mpiexec.mpich", "sshd", modules=("torch",))
    with cluster(ssh=True) as slurm:
        yield slurm


def _labels(slurm: SlurmCluster) -> tuple[Path, int]:
    """A labels file (pytorch, a random master port) and that port."""
    port = random.randrange(20000, 30000)
    return labels_file(slurm, {"frameworks": "pytorch", "master-port": str(port)}), port


def _check(got: list[dict[str, object]], rank_var: str, port: int,
           node_known: bool) -> None:
    """Every rank r of 6 ran on BLOCK_HOSTS[r] under the launcher's rank r and saw exactly
    the process layer (NODE_RANK only when ``node_known``), master gpu-a100-09; no PET_*;
    the all-reduce gave 21."""
    assert [(r["hostname"], r["launcher"][rank_var]) for r in got] == [
        (h, str(i)) for i, h in enumerate(BLOCK_HOSTS)]
    for rank, r in enumerate(got):
        want = {
            "RANK": str(rank), "LOCAL_RANK": str(rank % 2), "WORLD_SIZE": "6",
            "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": NODES[0], "MASTER_PORT": str(port),
        }
        if node_known:
            want["NODE_RANK"] = str(rank // 2)
        env = r["env"]
        assert isinstance(env, dict)
        assert env == want, r
    assert {r["result"] for r in got} == {21.0}


def test_openmpi_over_ssh_master_from_the_user(mpi: SlurmCluster) -> None:
    """mpirun.openmpi -H gpu-a100-09:2,...:2 -np 6 over the nodes' sshd, -x MASTER_ADDR:
    every rank gets RANK/LOCAL_RANK/WORLD_SIZE/LOCAL_WORLD_SIZE from Open MPI, no NODE_RANK
    (no host list to know the node from), the user's master and the label's port."""
    labels, port = _labels(mpi)
    env = job_env(labels)
    exported = [a for k in (*env, "PATH") for a in ("-x", k)]
    argv = [*OMPI, "--mca", "plm_rsh_agent", str(mpi.ssh_wrapper), "-H", HOSTS_2, "-np", "6",
            "-x", f"MASTER_ADDR={NODES[0]}", *exported,
            *launch("process", NODES[0], port), "python", TORCH]
    res = mpi.run(argv, timeout=JOB_TIMEOUT_S, env=env)
    _check(reports(res, 6, "rank"), "OMPI_COMM_WORLD_RANK", port, node_known=False)


def test_openmpi_inside_a_slurm_allocation(mpi: SlurmCluster) -> None:
    """salloc -N3 --ntasks-per-node=2 mpirun.openmpi (in salloc's shell, on the login node):
    6 ranks from Open MPI although the orted step has 3 tasks; hosts and node from Slurm, so
    the master is gpu-a100-09 with no MASTER_ADDR given, and NODE_RANK = the rank's node."""
    labels, port = _labels(mpi)
    argv = ["salloc", "-N3", "--ntasks-per-node=2", "--time=2", *OMPI,
            *launch("process", NODES[0], port), "python", TORCH]
    res = mpi.run(argv, timeout=JOB_TIMEOUT_S, env=job_env(labels))
    got = reports(res, 6, "rank")
    # Every rank is in the allocation's one job, in the orted step (1 task per node).
    assert len({r["launcher"]["SLURM_JOB_ID"] for r in got}) == 1
    assert [r["launcher"]["SLURM_PROCID"] for r in got] == ["0", "0", "1", "1", "2", "2"]
    _check(got, "OMPI_COMM_WORLD_RANK", port, node_known=True)


def test_openmpi_in_a_batch_script(mpi: SlurmCluster) -> None:
    """sbatch --wait -N3 --ntasks-per-node=2 of a script that runs mpirun.openmpi: rank 0
    and 1 on the batch node (job variables only, ENVIRONMENT=BATCH), ranks 2-5 in the orted
    step on gpu-a100-[10-11]; every rank gets the master gpu-a100-09 and its node."""
    labels, port = _labels(mpi)
    env = job_env(labels, E2E_STANDIN_NODES=",".join(NODES))
    res, output = sbatch(mpi, ["-N3", "--ntasks-per-node=2"],
                         [*OMPI, *launch("process", NODES[0], port), "python", TORCH], env,
                         JOB_TIMEOUT_S)
    _check(reports(res, 6, "rank", output), "OMPI_COMM_WORLD_RANK", port, node_known=True)


def test_mpich_inside_a_slurm_allocation(mpi: SlurmCluster) -> None:
    """salloc -N3 --ntasks-per-node=2 mpiexec.mpich -launcher slurm: ranks from PMI_*, the
    proxy step's SLURM_* (3 tasks) beside them; hosts and node from Slurm."""
    labels, port = _labels(mpi)
    argv = ["salloc", "-N3", "--ntasks-per-node=2", "--time=2", "mpiexec.mpich", "-launcher",
            "slurm", *launch("process", NODES[0], port), "python", TORCH]
    res = mpi.run(argv, timeout=JOB_TIMEOUT_S, env=job_env(labels))
    _check(reports(res, 6, "rank"), "PMI_RANK", port, node_known=True)


def test_mpich_over_ssh_master_from_the_user(mpi: SlurmCluster) -> None:
    """mpiexec.mpich -launcher ssh -hosts gpu-a100-09:2,...:2 -n 6, -genv MASTER_ADDR: ranks
    from PMI_RANK/PMI_SIZE/MPI_LOCALRANKID/MPI_LOCALNRANKS, no NODE_RANK, the user's master
    (Hydra copies mpiexec's environment, SLURM_CONF and HOSTNAME=login included, to every
    rank: neither may make a Slurm topology)."""
    labels, port = _labels(mpi)
    argv = ["mpiexec.mpich", "-launcher", "ssh", "-launcher-exec", str(mpi.ssh_wrapper),
            "-hosts", HOSTS_2, "-n", "6", "-genv", "MASTER_ADDR", NODES[0],
            *launch("process", NODES[0], port), "python", TORCH]
    res = mpi.run(argv, timeout=JOB_TIMEOUT_S, env=job_env(labels))
    _check(reports(res, 6, "rank"), "PMI_RANK", port, node_known=False)
