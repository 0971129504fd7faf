"""The source table (sources/__init__.py): one line per manager or launcher, what is seen,
and the --source choice.

Each source's own file checks what its lines see in real environments; the refusals of the
lines without a module are checked in tests/sources/test_refusals.py.
"""

from __future__ import annotations

import inspect
from importlib import import_module

import pytest

from derive_env.errors import TopologyError, UsageError
from derive_env.sources import (
    BY_NAME,
    SOURCE_NAMES,
    SOURCES,
    Source,
    choice_of,
    forced_source,
    has_size,
    seen_sources,
    states_of,
)
from support import REPO

FLUX = {"FLUX_JOB_ID": "f1", "FLUX_JOB_SIZE": "4", "FLUX_TASK_RANK": "1"}
TORCHRUN = {"TORCHELASTIC_RUN_ID": "r", "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1",
            "MASTER_ADDR": "n1", "MASTER_PORT": "29500"}
TRAINJOB = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "t-node-0-0.t",
            "PET_MASTER_PORT": "29500", "PET_NPROC_PER_NODE": "1"}


def test_every_line_sets_only_fields_of_a_source() -> None:
    """A misspelt keyword is refused by the constructor; every line has every field, and no
    instance dict (slots: the table is built on every start)."""
    with pytest.raises(TypeError):
        Source("x", "x", None, ("X",), 1, unti="pod")
    for line in SOURCES:
        assert all(hasattr(line, field) for field in Source.__slots__), line.name
        assert not hasattr(line, "__dict__"), line.name
    assert Source("x", "x", None, ("X",), 1, unit="pod").unit == "pod"
    assert Source("x", "x", None, ("X",), 1).unit == "process"


def test_source_choice() -> None:
    assert choice_of({}, None) == "auto"
    assert choice_of({"DERIVE_ENV_SOURCE": "none"}, None) == "none"
    assert choice_of({"DERIVE_ENV_SOURCE": "none"}, "openmpi") == "openmpi"
    with pytest.raises(UsageError, match=r"^--source='slurm': expected one of auto, none, "):
        choice_of({}, "slurm")
    with pytest.raises(TopologyError, match=r"^DERIVE_ENV_SOURCE='x': expected one of auto"):
        choice_of({"DERIVE_ENV_SOURCE": "x"}, None)


def test_the_choices_are_the_lines_with_a_module_in_table_order() -> None:
    """The order the --source message lists them in, as docs/sources/README.md section 3
    shows that message (the page, not this test, is what a new manager adds itself to)."""
    assert tuple(line.name for line in SOURCES if line.module is not None) == SOURCE_NAMES
    page = (REPO / "docs" / "sources" / "README.md").read_text(encoding="utf-8")
    shown = page.split("DERIVE_ENV_SOURCE='slurm': expected one of auto, none, ", 1)[1]
    assert shown.split("`", 1)[0].split(", ") == list(SOURCE_NAMES)
    with pytest.raises(UsageError, match="^--source='x': expected one of auto, none, "
                       + ", ".join(SOURCE_NAMES) + "$"):
        choice_of({}, "x")
    with pytest.raises(UsageError, match=r"^--source='gridengine-task': expected one of auto, "):
        choice_of({}, "gridengine-task")  # known, but only refused


def test_a_forced_source_needs_its_variables() -> None:
    assert forced_source("torchrun", TORCHRUN) is BY_NAME["torchrun"]
    assert forced_source("backendai", {"GPU_COUNT": "1"}) is BY_NAME["backendai"]
    with pytest.raises(TopologyError) as caught:
        forced_source("backendai", {"GPU_COUNT": ""})
    assert str(caught.value).startswith(
        "--source (or DERIVE_ENV_SOURCE)='backendai': expected a source whose variables are "
        "set: a Backend.AI session needs at least one of BACKENDAI_CLUSTER_SIZE, ")
    with pytest.raises(TopologyError) as caught:
        forced_source("torchrun", {**TORCHRUN, "MASTER_PORT": ""})
    assert str(caught.value).endswith("; not set: MASTER_PORT")


def test_a_line_without_a_module_is_never_seen() -> None:
    assert BY_NAME["gridengine-task"].module is None
    assert seen_sources({"JOB_ID": "7", "PE": "mpi", "QRSH_PORT": "n1:4711"}) == []
    assert [s.name for s in seen_sources(FLUX)] == ["flux"]  # read now (sources/managers/flux.py)
    assert seen_sources({"PMI_RANK": "1", "PMI_SIZE": "2"}) == []  # the pmi line's own set


def test_seen_lines_are_innermost_first_and_a_fallback_only_alone() -> None:
    slurm = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2"}
    assert [s.name for s in seen_sources({**slurm, **TORCHRUN})] == [
        "torchrun", "slurm-allocation"]
    assert [s.name for s in seen_sources(TRAINJOB)] == ["kubeflow-trainjob"]
    assert [s.name for s in seen_sources({**TRAINJOB, **slurm})] == ["slurm-allocation"]
    assert [s.name for s in seen_sources({**TRAINJOB, "RANK": "1"})] == []  # its `unless`


def test_an_empty_value_counts_as_unset() -> None:
    assert seen_sources({**TORCHRUN, "RANK": ""}) == []
    assert seen_sources({"BACKENDAI_CLUSTER_X": ""}) == []
    assert [s.name for s in seen_sources({"BACKENDAI_CLUSTER_X": "1"})] == ["backendai"]


def test_every_line_reads_or_is_refused_and_names_are_unique() -> None:
    assert len(BY_NAME) == len(SOURCES)
    for line in SOURCES:
        assert line.detect, line.name
        assert set(line.marker) <= set(line.detect), line.name
        if line.module is None:
            # Known and refused: it says how it states a job of more than one process.
            assert states_of(line) or has_size(line), line.name
        else:
            assert line.part_of is None, line.name
        if line.part_of is not None:
            assert BY_NAME[line.part_of].module is not None, line.name


def test_every_module_reads_a_line() -> None:
    """read(environ, line, files=None) -> Report: the title comes with the line."""
    for line in SOURCES:
        if line.module is None:
            continue
        module = import_module(f"derive_env.sources.{line.module}")
        parameters = inspect.signature(module.read).parameters
        assert list(parameters) == ["environ", "line", "files"], line.module
        assert parameters["files"].default is None
        assert not hasattr(module, "TITLE") and not hasattr(module, "TITLES")


def test_the_refusals_keep_the_launchers_order() -> None:
    """The first line that states more than one process is named: innermost first."""
    assert [line.title for line in SOURCES if states_of(line) or has_size(line)] == [
        "torchrun (torchelastic)", "DeepSpeed's launcher (deepspeed)", "Open MPI (mpirun)",
        "MVAPICH2 (mpirun_rsh)",
        "Cray PALS (mpiexec)", "a PMI launcher (MPICH Hydra, Intel MPI, srun --mpi=pmi2, Flux)",
        "a PMIx launcher (srun --mpi=pmix, prterun without Open MPI's variables)",
        "a Slurm step (srun)", "a Slurm batch script or salloc shell", "Flux", "LSF jsrun",
        "a Kubernetes Indexed Job", "a JobSet", "SageMaker",
        "an AWS Batch multi-node parallel job", "an Amazon SageMaker training job",
        "a SkyPilot task", "a dstack task", "a LeaderWorkerSet group", "a Volcano Job",
        "a TF_CONFIG (Kubeflow TFJob, Volcano, Vertex AI)", "a Vertex AI custom job",
        "a TPU slice (GKE, LeaderWorkerSet or KubeRay)",
        "an Azure ML MPI job (Azure Batch multi-instance)", "a Determined trial",
        "a Kubeflow TrainJob (JAX runtime)", "a Kubeflow JAXJob (v1)",
        "a Kubeflow TrainJob (XGBoost runtime)", "an HTCondor parallel-universe job",
        "an OpenPBS/Torque job", "a Torque TM task (pbsdsh)", "an LSF job",
        "a Grid Engine parallel job",
        "a Grid Engine task (qrsh -inherit)", "a Kubeflow MPIJob launcher", "a Ray Train worker",
        "an Azure ML PyTorch-distribution process"]


@pytest.mark.parametrize(("hosts", "stated"), [
    ('["algo-1"]', None), ('["algo-1","algo-2"]', "SM_HOSTS"), ("[]", "SM_HOSTS"),
    ("algo-1", "SM_HOSTS"), ('{"algo-1": 1}', "SM_HOSTS"), ("[" * 5000, "SM_HOSTS"),
])
def test_sagemakers_size_is_its_json_list(hosts: str, stated: str | None) -> None:
    from derive_env.sources import sizes

    result = sizes.over(BY_NAME["sagemaker"], {"SM_HOSTS": hosts, "SM_CURRENT_HOST": "algo-1"},
                        None)
    assert result == (None if stated is None else (stated, "a JSON list of one host"))
