"""sources/sizes.py: the job sizes no single variable states, exact answers per manager."""

from __future__ import annotations

import json

import pytest

from derive_env.sources import DETERMINED_RENDEZVOUS, SAGEMAKER_CONFIG, sizes


@pytest.mark.parametrize(("spec", "count"), [
    ('{"cluster": {"chief": ["c:1"], "worker": ["w0:1", "w1:1"]}}', 3),
    ('{"cluster": {"worker": {"1": "w1:1"}, "ps": ["p:1"]}}', 2),  # a TFJob's sparse form
    ('{"cluster": {"worker": ["w0:1"]}}', 1), ('{"cluster": []}', 0), ("[]", 0),
])
def test_tasks_counts_lists_and_sparse_maps(spec: str, count: int) -> None:
    assert sizes.tasks(json.loads(spec)) == count


def test_tf_config_and_cluster_spec() -> None:
    two = '{"cluster": {"worker": ["a:1", "b:1"]}}'
    assert sizes.tf_config_tasks({"TF_CONFIG": two}, {}) == ("TF_CONFIG", "a cluster of one task")
    assert sizes.tf_config_tasks({"TF_CONFIG": "{not json"}, {}) is None
    assert sizes.cluster_spec_tasks({"CLUSTER_SPEC": two}, {}) == (
        "CLUSTER_SPEC", "a cluster of one task")


@pytest.mark.parametrize(("text", "answer"), [
    ('{"hosts": ["algo-1"]}', None),
    ('{"hosts": ["algo-1", "algo-2"]}', (f"hosts in {SAGEMAKER_CONFIG}", '["algo-1", "algo-2"]',
                                         "a list of one host")),
    ('{"hosts": []}', sizes.UNKNOWN), ("[", sizes.UNKNOWN), (None, sizes.UNKNOWN),
])
def test_sagemaker_hosts_from_the_platform_file(text, answer) -> None:
    assert sizes.sagemaker_hosts({}, {SAGEMAKER_CONFIG: text}) == answer


def test_determined_containers() -> None:
    files = {DETERMINED_RENDEZVOUS: '{"container_addrs": ["10.0.0.1", "10.0.0.2"]}'}
    assert sizes.determined_containers({}, files) == (
        f"container_addrs in {DETERMINED_RENDEZVOUS}", '["10.0.0.1", "10.0.0.2"]',
        "a list of one address")
    assert sizes.determined_containers({}, {}) == sizes.UNKNOWN


@pytest.mark.parametrize(("environ", "answer"), [
    ({"VC_MASTER_NUM": "1", "VC_WORKER_NUM": "3"}, ("VC_WORKER_NUM",
                                                    "1 pod in all VC_<TASK>_NUM")),
    ({"VC_MASTER_NUM": "1"}, None), ({"VC_TASK_INDEX": "0"}, sizes.UNKNOWN),
    ({"VC_MASTER_NUM": "x"}, sizes.UNKNOWN),
])
def test_volcano_pods(environ, answer) -> None:
    assert sizes.volcano_pods(environ, {}) == answer


def test_lists_and_files() -> None:
    assert sizes.tpu_hosts({"TPU_WORKER_HOSTNAMES": "t0,t1"}, {}) == (
        "TPU_WORKER_HOSTNAMES", "one host")
    assert sizes.tpu_hosts({"TPU_WORKER_HOSTNAMES": "t0"}, {}) is None
    assert sizes.lsf_hosts({"LSB_MCPU_HOSTS": "a 4 b 4"}, {}) == (
        "LSB_MCPU_HOSTS", "one host and its slots")
    assert sizes.lsf_hosts({"LSB_MCPU_HOSTS": "a 4"}, {}) is None
    env = {"PBS_NODEFILE": "/n"}
    assert sizes.pbs_nodes(env, {"/n": "a\na\n"}) is None
    assert sizes.pbs_nodes(env, {"/n": "a\nb\n"}) == ("PBS_NODEFILE", "a node file of one host")
    assert sizes.pbs_nodes(env, {"/n": None}) == sizes.UNKNOWN
    assert sizes.mpi_operator_launcher({"K_MPI_JOB_ROLE": "worker"}, {}) is None
    assert sizes.mpi_operator_launcher({"K_MPI_JOB_ROLE": "launcher"}, {}) == (
        "K_MPI_JOB_ROLE", "worker (a rank mpirun started)")
