"""--explain on bare metal (#27): nodes and processes where there is no container (no
labels file, or an HPC scheduler or launcher), no ``job none`` for torchrun's default run
id, and the node rank a Flux task's NODE_RANK gets named on the first line."""

from __future__ import annotations

import pytest

from derive_env.cli.envfile import parse_env_file
from derive_env.labels import PREFIX
from derive_env.pipeline import derive
from derive_env.render.explain import SCHEDULERS, explain
from derive_env.sources import SOURCES
from support.jobs import flux_task
from support.recorded import FIXTURES, load_fixture

PYTORCH = {PREFIX + "frameworks": "pytorch"}
NODEFILE = "/var/spool/pbs/aux/1234.pbs-server"


def recorded(name: str):
    path = FIXTURES / name
    return derive(parse_env_file(path.read_text(encoding="utf-8"), str(path)), PYTORCH)


def pbs_task(node: int) -> dict[str, str]:
    """A Torque TM task on MoM ``node`` (pbsdsh) of a 3-host job (tests/sources/test_pbs.py)."""
    return {"PBS_JOBID": "1234.pbs-server", "PBS_NODENUM": str(node), "PBS_TASKNUM": "00000003",
            "PBS_NODEFILE": NODEFILE, "PBS_ENVIRONMENT": "PBS_BATCH"}


def pbs(node: int):
    return derive(pbs_task(node), PYTORCH,
                  files=lambda paths: {p: "n07\nn03\nn12\n" if p == NODEFILE else None
                                       for p in paths})


def test_the_schedulers_are_the_sources_between_a_worker_and_a_node_manager() -> None:
    """Depth 1 to 3 of the source table: the MPI launchers, Slurm, Flux, jsrun, PBS, LSF,
    Grid Engine."""
    assert {line.name for line in SOURCES if 1 <= line.depth <= 3} == SCHEDULERS


@pytest.mark.parametrize(("image", "unit"), [(True, "container"), (False, "node")])
def test_one_node_without_a_source(image: bool, unit: str) -> None:
    assert explain(derive({}, PYTORCH), image=image).splitlines()[0] == (
        f"source: standalone, single {unit}")


@pytest.mark.parametrize("image", [True, False])
@pytest.mark.parametrize(("name", "first"), [
    ("srun-pty/task0.env", "source: slurm-step job 8, single node"),
    ("sbatch-1node/batch.env", "source: slurm-allocation job 6, single node"),
])
def test_slurm_on_one_node_is_a_node_even_in_an_image(image: bool, name: str,
                                                      first: str) -> None:
    assert explain(recorded(name), image=image).splitlines()[0] == first


@pytest.mark.parametrize("image", [True, False])
def test_a_pbs_task_is_this_node_even_in_an_image(image: bool) -> None:
    lines = explain(pbs(1), image=image).splitlines()
    assert lines[0] == "source: pbs job 1234.pbs-server, 3 nodes; this node is n03, node rank 1"
    assert lines[3] == "     1  n03  (this node)"


@pytest.mark.parametrize("image", [True, False])
def test_a_container_platform_speaks_of_containers_with_or_without_a_labels_file(
        backendai_env, image: bool) -> None:
    """Backend.AI starts containers: a dry run on a laptop (``--frameworks``, no labels file)
    words it as the container itself would, so the docs' outputs are what users see."""
    derivation = derive(backendai_env(["main1", "sub1"], "sub1", session_id="s1"), PYTORCH)
    lines = explain(derivation, image=image).splitlines()
    assert lines[0] == "source: backendai session s1, 2 nodes; this container is sub1, node rank 1"
    assert lines[3] == "     1  sub1  (this container)"


@pytest.mark.parametrize(("image", "unit"), [(True, "container"), (False, "node")])
def test_a_single_node_without_a_source_is_a_container_only_in_an_image(
        image: bool, unit: str) -> None:
    assert explain(derive({}, PYTORCH), image=image).splitlines()[0] == (
        f"source: standalone, single {unit}")


def test_torchrun_default_run_id_names_no_job() -> None:
    lines = explain(recorded("torchrun-static/rank0.env")).splitlines()
    assert lines[0] == "source: torchrun, 2 nodes, node rank 0; no host list"


def test_a_torchrun_run_id_is_the_job() -> None:
    assert explain(recorded("torchrun-c10d/rank0.env")).splitlines()[0] == (
        "source: torchrun job derive-c10d, 2 nodes, node rank 0; no host list")


def test_flux_in_a_slurm_allocation_names_the_node_rank_the_layers_give() -> None:
    """``srun -N3 flux start``, task 1 of ``flux run -N3``: NODE_RANK=1 from FLUX_TASK_RANK,
    as the layer line says; the allocation's host list does not say which host is it."""
    _, step0 = load_fixture(FIXTURES / "ompi-in-salloc" / "rank0.env")
    broker0 = {k: v for k, v in step0.items() if k.startswith(("SLURM", "SLURMD"))}
    derivation = derive({**broker0, **flux_task(1, 0, 3, 3)}, PYTORCH)
    lines = explain(derivation, image=False).splitlines()
    assert lines[0] == (
        "source: slurm-allocation job 10 (node count and rank, process ranks from flux), "
        "3 nodes; this process is node rank 1 (FLUX_TASK_RANK, one process per node); its "
        "host is not stated")
    assert "node layer: node count and rank from flux; hosts from slurm-allocation" in lines
    assert {v.name: v.value for v in derivation.variables}["NODE_RANK"] == "1"
    assert [line for line in lines if "(this " in line] == []  # no host claimed


def test_flux_alone_names_its_node_rank() -> None:
    env = {**flux_task(1, 0, 2, 2), "MASTER_ADDR": "f1"}
    lines = explain(derive(env, PYTORCH), image=False).splitlines()
    assert lines[0] == ("source: flux job 6731191091817518, 2 nodes, node rank 1 "
                        "(FLUX_TASK_RANK, one process per node); no host list")


def test_mpi_workers_name_no_node_rank() -> None:
    """Workers (an MPI launcher's ranks) never number nodes (frameworks/context.py
    ``node_rank_of``): hydra's ranks in a Slurm allocation name the host, not a rank."""
    assert recorded("mpich-in-salloc/rank2.env").topology.per_process
    assert explain(recorded("mpich-in-salloc/rank2.env")).splitlines()[0] == (
        "source: slurm-allocation job 12 (process ranks from hydra), 3 nodes; "
        "this process runs on gpu-a100-10, node rank 1")

