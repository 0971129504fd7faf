"""Slurm as the recordings show it (tests/fixtures/recorded): the recorded tasks, the Slurm
source's two lines called on an environment, and a model of Slurm's task layout (block,
cyclic, arbitrary; MPI launchers inside an allocation) with its hypothesis strategy. The
model is checked against the recordings in tests/sources/test_slurm.py.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st

from derive_env.errors import TopologyError
from derive_env.sources import BY_NAME
from derive_env.sources.managers import slurm
from derive_env.topology import Node
from support import TESTS
from support.recorded import FIXTURES, load_fixture

N09, N10, N11 = "gpu-a100-09", "gpu-a100-10", "gpu-a100-11"
ALL3 = (Node(N09), Node(N10), Node(N11))
#: The hostfile srun-arbitrary ran with (record_envs.py writes _ORDER one host a line).
HOSTFILE = "/tmp/derive-slurm-run/shared/srun-arbitrary/hostfile"
HOSTFILE_TEXT = f"{N11}\n{N09}\n{N10}\n{N11}\n"
EXTRA_DATA = TESTS / "data" / "slurm-extra"


def tasks(scenario: str) -> dict[str, tuple[str, dict[str, str]]]:
    files = sorted((FIXTURES / scenario).glob("*.env"))
    assert files, scenario
    return {f.stem: load_fixture(f) for f in files}


def step(env: dict[str, str], files: dict[str, str | None] | None = None):
    return slurm.read(env, BY_NAME["slurm-step"], files if files is not None else {})


def alloc(env: dict[str, str]):
    return slurm.read(env, BY_NAME["slurm-allocation"])


def block() -> dict[str, str]:
    return dict(tasks("srun-block")["task2"][1])


def raises(env: dict[str, str], name: str = "slurm-step",
           files: dict[str, str | None] | None = None) -> str:
    with pytest.raises(TopologyError) as info:
        slurm.read(env, BY_NAME[name], files or {})
    assert info.value.exit_code == 3
    return str(info.value)


def extra(name: str) -> tuple[str, dict[str, str]]:
    return load_fixture(EXTRA_DATA / f"{name}.env")


def compress(counts: list[int]) -> str:
    """``uint16_array_to_str`` (src/common/env.c): runs written ``N(xK)``."""
    out: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j < len(counts) and counts[j] == counts[i]:
            j += 1
        out.append(f"{counts[i]}(x{j - i})" if j - i > 1 else str(counts[i]))
        i = j
    return ",".join(out)


def layout(hosts: list[str], tpn: list[int], dist: str,
           order: list[str] | None = None) -> list[tuple[str, int, int]]:
    """rank -> (host, node id, local id) as Slurm places tasks: block fills each node in
    turn; cyclic deals ranks round-robin over the nodes with room left; arbitrary puts rank r
    on ``order[r]`` (the hostfile line), node ids in the step list order."""
    world = sum(tpn)
    placed: list[int] = []
    if dist == "block":
        placed = [n for n, count in enumerate(tpn) for _ in range(count)]
    elif dist == "cyclic":
        left = list(tpn)
        while len(placed) < world:
            for n in range(len(hosts)):
                if left[n]:
                    placed.append(n)
                    left[n] -= 1
    else:
        assert order is not None
        placed = [hosts.index(h) for h in order]
    seen = [0] * len(hosts)
    out = []
    for n in placed:
        out.append((hosts[n], n, seen[n]))
        seen[n] += 1
    return out


def job_envs(job_hosts: list[str], hosts: list[str], tpn: list[int], dist: str,
             order: list[str] | None = None, job: str = "42") -> list[tuple[str, dict]]:
    """Every task's environment of one step, from :func:`layout`."""
    ranks = layout(hosts, tpn, dist, order)
    gtids: dict[int, list[int]] = {}
    for rank, (_, n, _) in enumerate(ranks):
        gtids.setdefault(n, []).append(rank)
    common = {"SLURM_JOB_ID": job, "SLURM_JOBID": job, "SLURM_STEP_ID": "0",
              "SLURM_JOB_NODELIST": ",".join(job_hosts),
              "SLURM_JOB_NUM_NODES": str(len(job_hosts)),
              "SLURM_STEP_NODELIST": ",".join(hosts), "SLURM_STEP_NUM_NODES": str(len(hosts)),
              "SLURM_NNODES": str(len(hosts)), "SLURM_STEP_NUM_TASKS": str(sum(tpn)),
              "SLURM_STEP_TASKS_PER_NODE": compress(tpn), "HOSTNAME": "login"}
    if dist != "block":
        common["SLURM_DISTRIBUTION"] = dist
    if dist == "arbitrary":
        common["SLURM_HOSTFILE"] = "/h"
    return [(host, {**common, "SLURM_PROCID": str(rank), "SLURM_NODEID": str(n),
                    "SLURM_LOCALID": str(local), "SLURMD_NODENAME": host,
                    "SLURM_GTIDS": ",".join(map(str, gtids[n]))})
            for rank, (host, n, local) in enumerate(ranks)]


@st.composite
def slurm_jobs(draw):
    numbers = draw(st.lists(st.integers(0, 60), min_size=1, max_size=8, unique=True))
    job_hosts = [f"n{i:02d}" for i in sorted(numbers)]
    hosts = [h for h in job_hosts if draw(st.booleans())] or job_hosts[:1]
    tpn = [draw(st.integers(1, 4)) for _ in hosts]
    dist = draw(st.sampled_from(["block", "cyclic", "arbitrary"]))
    order = None
    if dist == "arbitrary":
        # Every step node once at least, rank 0 anywhere; tasks per node from the file.
        order = draw(st.permutations([h for h, c in zip(hosts, tpn, strict=True)
                                      for _ in range(c)]))
    return job_hosts, hosts, tpn, dist, order


def mpi_in_allocation(hosts: list[str], per_node: list[int], kind: str,
                      job: str = "42", allocation: list[str] | None = None,
                      ) -> list[tuple[str, dict[str, str]]]:
    """Every MPI rank's Slurm variables, as the recordings show them (README there).

    ``allocation``: the job's nodes when MPI runs on only some of them (``mpirun --host``),
    ``hosts`` (the nodes with ranks) then in its order; in a batch script its first node is
    ``hosts[0]`` (the batch node, where mpirun runs). Default: ``hosts``.

    ``ompi-in-sbatch``: ranks on the batch node are mpirun's children (the batch script's
    variables), the others are in orted's step over the other nodes. ``mpich-in-sbatch``:
    Hydra's proxy step spans every node, and mpiexec's SLURMD_NODENAME and SLURM_GTIDS are
    copied into every rank. ``*-in-salloc``: the daemon step spans every node.
    """
    batch = kind.endswith("sbatch")
    job_nodes = allocation or hosts
    base = {"SLURM_JOB_ID": job, "SLURM_JOBID": job, "SLURM_JOB_NODELIST": ",".join(job_nodes),
            "SLURM_JOB_NUM_NODES": str(len(job_nodes)), "SLURM_NNODES": str(len(job_nodes))}
    if batch:
        base["ENVIRONMENT"] = "BATCH"
    daemons = hosts[1:] if kind == "ompi-in-sbatch" else hosts
    out = []
    for n, host in enumerate(hosts):
        if host in daemons:
            d = daemons.index(host)
            env = {**base, "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": ",".join(daemons),
                   "SLURM_STEP_NUM_NODES": str(len(daemons)), "SLURM_NNODES": str(len(daemons)),
                   "SLURM_STEP_NUM_TASKS": str(len(daemons)),
                   "SLURM_STEP_TASKS_PER_NODE": compress([1] * len(daemons)),
                   "SLURM_PROCID": str(d), "SLURM_NODEID": str(d), "SLURM_LOCALID": "0",
                   "SLURM_GTIDS": str(d), "SLURMD_NODENAME": host,
                   "SLURM_DISTRIBUTION": "cyclic"}
            if kind == "mpich-in-sbatch":
                env.update(SLURMD_NODENAME=hosts[0], SLURM_GTIDS="0")
        else:
            env = {**base, "SLURM_PROCID": "0", "SLURM_NODEID": "0", "SLURM_LOCALID": "0",
                   "SLURM_GTIDS": "0", "SLURMD_NODENAME": hosts[0]}
        out += [(host, env)] * per_node[n]
    return out


def with_mpi(envs: list[tuple[str, dict[str, str]]], per_node: list[int],
             kind: str) -> list[tuple[str, dict[str, str]]]:
    """Add the MPI launcher's own variables (by-slot placement, mpirun's default)."""
    world = sum(per_node)
    out, rank = [], 0
    for count in per_node:
        for local in range(count):
            host, env = envs[rank]
            if kind.startswith("ompi"):
                mpi = {"OMPI_COMM_WORLD_SIZE": str(world), "OMPI_COMM_WORLD_RANK": str(rank),
                       "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
                       "OMPI_COMM_WORLD_LOCAL_SIZE": str(count)}
            else:
                mpi = {"PMI_SIZE": str(world), "PMI_RANK": str(rank),
                       "MPI_LOCALRANKID": str(local), "MPI_LOCALNRANKS": str(count)}
            out.append((host, {**env, **mpi}))
            rank += 1
    return out

