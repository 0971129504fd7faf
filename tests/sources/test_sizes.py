"""sources/sizes.py: the job sizes no single variable states, exact answers per manager."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import pytest

from derive_env.sources import BY_NAME, DETERMINED_RENDEZVOUS, SAGEMAKER_CONFIG, sizes


def _files(contents: Mapping[str, str | None]):
    """A reader of the files ``contents`` holds (``None``: unreadable), as cli/ hands in."""
    return lambda paths: {path: contents.get(path) for path in paths}


def _over(name: str, environ: Mapping[str, str],
          contents: Mapping[str, str | None] | None = None):
    return sizes.over(BY_NAME[name], environ, _files(contents or {}))


@pytest.mark.parametrize(("spec", "count"), [
    ('{"cluster": {"chief": ["c:1"], "worker": ["w0:1", "w1:1"]}}', 3),
    ('{"cluster": {"worker": {"1": "w1:1"}, "ps": ["p:1"]}}', 2),  # a TFJob's sparse form
    ('{"cluster": {"worker": ["w0:1"]}}', 1), ('{"cluster": []}', 0), ("[]", 0),
])
def test_tasks_counts_lists_and_sparse_maps(spec: str, count: int) -> None:
    assert sizes.tasks(json.loads(spec)) == count


def test_tf_config_and_cluster_spec() -> None:
    two = '{"cluster": {"worker": ["a:1", "b:1"]}}'
    assert _over("tf-config", {"TF_CONFIG": two}) == ("TF_CONFIG", "a cluster of one task")
    assert _over("tf-config", {"TF_CONFIG": "{not json"}) is None
    assert _over("vertex", {"CLUSTER_SPEC": two}) == ("CLUSTER_SPEC", "a cluster of one task")


@pytest.mark.parametrize(("text", "answer"), [
    ('{"hosts": ["algo-1"]}', None),
    ('{"hosts": ["algo-1", "algo-2"]}', (f"hosts in {SAGEMAKER_CONFIG}", '["algo-1", "algo-2"]',
                                        "a list of one host")),
    ('{"hosts": []}', sizes.UNKNOWN), ("[", sizes.UNKNOWN), (None, sizes.UNKNOWN),
])
def test_sagemaker_hosts_from_the_platform_file(text, answer) -> None:
    assert _over("sagemaker-platform", {}, {SAGEMAKER_CONFIG: text}) == answer


def test_sagemaker_hosts_from_the_file_the_module_reads() -> None:
    """DERIVE_ENV_SAGEMAKER_RESOURCE_CONFIG moves the file for the refusals too: one path
    rule, the table line's, for the source and the sizes."""
    env = {"DERIVE_ENV_SAGEMAKER_RESOURCE_CONFIG": "/run/rc.json"}
    two = '{"hosts": ["algo-1", "algo-2"]}'
    assert _over("sagemaker-platform", env, {"/run/rc.json": two}) == (
        "hosts in /run/rc.json", '["algo-1", "algo-2"]', "a list of one host")
    assert _over("sagemaker-platform", env, {SAGEMAKER_CONFIG: two}) == sizes.UNKNOWN


def test_determined_containers() -> None:
    files = {DETERMINED_RENDEZVOUS: '{"container_addrs": ["10.0.0.1", "10.0.0.2"]}'}
    assert _over("determined", {}, files) == (
        f"container_addrs in {DETERMINED_RENDEZVOUS}", '["10.0.0.1", "10.0.0.2"]',
        "a list of one host")
    assert _over("determined", {}) == sizes.UNKNOWN
    moved = {"DERIVE_ENV_DETERMINED_RENDEZVOUS": "/tmp/r.json"}
    assert _over("determined", moved, {"/tmp/r.json": files[DETERMINED_RENDEZVOUS]})[0] == (
        "container_addrs in /tmp/r.json")


@pytest.mark.parametrize(("environ", "answer"), [
    ({"VC_MASTER_NUM": "1", "VC_WORKER_NUM": "3"}, ("VC_WORKER_NUM", "1 pod in all VC_<TASK>_NUM")),
    ({"VC_MASTER_NUM": "1"}, None), ({"VC_TASK_INDEX": "0"}, sizes.UNKNOWN),
    ({"VC_MASTER_NUM": "x"}, sizes.UNKNOWN),
])
def test_volcano_pods(environ, answer) -> None:
    assert _over("volcano", environ) == answer


@pytest.mark.parametrize(("name", "environ", "contents", "answer"), [
    ("gke-tpu", {"TPU_WORKER_HOSTNAMES": "t0,t1"}, {}, ("TPU_WORKER_HOSTNAMES", "one host")),
    ("gke-tpu", {"TPU_WORKER_HOSTNAMES": "t0,"}, {}, None),
    ("lsf", {"LSB_MCPU_HOSTS": "a 4 b 4"}, {}, ("LSB_MCPU_HOSTS", "one host and its slots")),
    ("lsf", {"LSB_MCPU_HOSTS": "a 4"}, {}, None),
    ("skypilot", {"SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2\n"}, {},
     ("SKYPILOT_NODE_IPS", "one IP")),
    ("dstack", {"DSTACK_NODES_IPS": "10.0.0.1\n\n"}, {}, None),
    ("sagemaker", {"SM_HOSTS": '["algo-1"]'}, {}, None),
    ("sagemaker", {"SM_HOSTS": "[]"}, {}, ("SM_HOSTS", "a JSON list of one host")),
    ("sagemaker", {"SM_HOSTS": '["a", "b"]'}, {}, ("SM_HOSTS", "a JSON list of one host")),
    ("pbs", {"PBS_NODEFILE": "/n"}, {"/n": "a\na\n"}, None),
    ("pbs", {"PBS_NODEFILE": "/n"}, {"/n": "a\nb\n"}, ("PBS_NODEFILE", "a node file of one host")),
    ("pbs", {"PBS_NODEFILE": "/n"}, {"/n": None}, sizes.UNKNOWN),
    ("gridengine", {"PE_HOSTFILE": "/p"}, {"/p": "a 1 q\na 2 r\n"}, None),
    ("gridengine", {"PE_HOSTFILE": "/p"}, {"/p": "a 1 q\nb 2 r\n"},
     ("PE_HOSTFILE", "a PE host file of one host")),
    ("mpi-operator-launcher", {"K_MPI_JOB_ROLE": "worker"}, {}, None),
    ("mpi-operator-launcher", {"K_MPI_JOB_ROLE": "launcher"}, {},
     ("K_MPI_JOB_ROLE", "worker (a rank mpirun started)")),
])
def test_lists_and_files(name: str, environ: dict[str, str], contents: dict, answer) -> None:
    assert _over(name, environ, contents) == answer


def test_a_file_is_read_only_by_path(tmp_path) -> None:
    asked: list[Sequence[str]] = []

    def files(paths: Sequence[str]) -> dict[str, str | None]:
        asked.append(tuple(paths))
        return dict.fromkeys(paths)

    assert sizes.over(BY_NAME["pbs"], {"PBS_NODEFILE": "/n"}, files) == sizes.UNKNOWN
    assert asked == [("/n",)]


def test_a_not_opted_in_image_is_told_of_a_two_host_sagemaker_config_anywhere() -> None:
    """The resource config the source reads (DERIVE_ENV_SAGEMAKER_RESOURCE_CONFIG) is the one
    the note of an image that did not opt in reads: with two hosts there, it is told."""
    env = {"TRAINING_JOB_NAME": "job", "TRAINING_JOB_ARN": "arn:aws:sagemaker:job",
           "DERIVE_ENV_SAGEMAKER_RESOURCE_CONFIG": "/run/sm/resourceconfig.json"}
    files = _files({"/run/sm/resourceconfig.json": '{"hosts": ["algo-1", "algo-2"]}'})
    assert sizes.larger_job(env, files) == (
        "an Amazon SageMaker training job states a job of more than one host (hosts in "
        "/run/sm/resourceconfig.json='[\"algo-1\", \"algo-2\"]')")
    one = _files({"/run/sm/resourceconfig.json": '{"hosts": ["algo-1"]}'})
    assert sizes.larger_job(env, one) is None


LABEL, VARIABLE = "ai.backend.distributed.frameworks", "DERIVE_ENV_FRAMEWORKS"
SLURM_BATCH = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2"}


def test_not_opted_in_on_bare_metal_names_the_jobs_options_first() -> None:
    """No labels file read (bare metal): the warning speaks of the job and --frameworks,
    never of an image; with one, of the image's label."""
    bare = sizes.not_opted_in(SLURM_BATCH, False, (LABEL, VARIABLE))
    assert bare is not None and bare.startswith(
        "nothing derived: the job did not opt in (no --frameworks, no DERIVE_ENV_FRAMEWORKS, "
        "no labels file), but a Slurm allocation")
    assert bare.endswith("To opt in, run derive-env --frameworks pytorch (or tensorflow, "
                         "jax), or export DERIVE_ENV_FRAMEWORKS=pytorch for the job")
    assert "image" not in bare
    image = sizes.not_opted_in(SLURM_BATCH, True, (LABEL, VARIABLE))
    assert image is not None and image.startswith(
        "nothing derived: the image did not opt in (label ai.backend.distributed.frameworks "
        "is not set), but a Slurm allocation")
    assert sizes.not_opted_in({"SLURM_JOB_ID": "7"}, False, (LABEL, VARIABLE)) is None
