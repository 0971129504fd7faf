"""TensorFlow, proven by TensorFlow: MultiWorkerMirroredStrategy across 3 simulated containers.

Each container (its own network namespace; BACKENDAI_CLUSTER_HOSTS not starting with main1)
runs ``derive-env -- python tf_worker.py``. The worker builds
``tf.distribute.MultiWorkerMirroredStrategy()`` from the derived TF_CONFIG alone and runs
cross-worker collectives; a wrong host, port, task type or index in any TF_CONFIG would make
the collective group fail to form (or give another sum/order). Under CI=true a machine that
cannot simulate, or a missing TensorFlow, FAILS these tests instead of skipping them.
"""

from __future__ import annotations

import pytest

from sessions import HOSTS, LABEL, random_ports, require_frameworks, run_workers

pytestmark = pytest.mark.e2e

#: Seconds for the whole session (3 TensorFlow imports on a busy 2-core machine take most of
#: it; a healthy run takes ~35 s there). The collectives themselves time out after
#: E2E_TF_TIMEOUT_S.
SESSION_TIMEOUT_S = 130.0
WORKER_ENV = {"E2E_TF_TIMEOUT_S": "60"}


def _run(labels: dict[str, str]) -> dict[str, dict[str, object]]:
    """Run tf_worker.py under derive-env in every container; host -> report."""
    return run_workers(labels, "tf_worker.py", SESSION_TIMEOUT_S, extra_env=WORKER_ENV)


def test_tensorflow_all_workers_allreduce() -> None:
    """Default layout: every container a worker, index = canonical position (main1 = 0);
    MWMS over the derived TF_CONFIG forms one group of 3 and sums 1 + 2 + 3 on every worker;
    worker 0 (main1) is the implicit chief."""
    require_frameworks("tensorflow")
    (port,) = random_ports(1)
    reports = _run(
        {LABEL + "frameworks": "tensorflow", LABEL + "tensorflow-port": str(port)}
    )
    workers = [f"{h}:{port}" for h in HOSTS]
    for index, host in enumerate(HOSTS):
        r = reports[host]
        detail = f"{host}: {r}"
        assert r["hostname"] == host, detail
        assert r["tf_config"] == {
            "cluster": {"worker": workers},
            "task": {"type": "worker", "index": index},
        }, detail
        assert (r["task_type"], r["task_id"]) == ("worker", index), detail
        assert r["num_replicas_in_sync"] == 3, detail
        assert r["value"] == index + 1, detail
        assert r["all_reduce"] == 6.0, detail
        assert r["reduce"] == 6.0, detail
        # The collective group is ordered by task: worker 0, 1, 2 = main1, sub1, sub2.
        assert r["all_gather"] == [1.0, 2.0, 3.0], detail
        assert r["is_chief"] is (host == "main1"), detail


def test_tensorflow_chief_and_workers_allreduce() -> None:
    """Label tensorflow-roles=main:chief,sub:worker: main1 is chief 0, sub1/sub2 are workers
    0/1; MWMS with chief + 2 workers forms one group of 3 (chief first) and sums
    100 + 1 + 2 on every task; only main1 is chief."""
    require_frameworks("tensorflow")
    (port,) = random_ports(1)
    reports = _run(
        {
            LABEL + "frameworks": "tensorflow",
            LABEL + "tensorflow-port": str(port),
            LABEL + "tensorflow-roles": "main:chief,sub:worker",
        }
    )
    cluster = {"chief": [f"main1:{port}"], "worker": [f"sub1:{port}", f"sub2:{port}"]}
    expected_task = {"main1": ("chief", 0), "sub1": ("worker", 0), "sub2": ("worker", 1)}
    for host, (task_type, index) in expected_task.items():
        r = reports[host]
        detail = f"{host}: {r}"
        assert r["hostname"] == host, detail
        assert r["tf_config"] == {
            "cluster": cluster,
            "task": {"type": task_type, "index": index},
        }, detail
        assert (r["task_type"], r["task_id"]) == (task_type, index), detail
        assert r["num_replicas_in_sync"] == 3, detail
        assert r["value"] == (100.0 if task_type == "chief" else index + 1), detail
        assert r["all_reduce"] == 103.0, detail
        assert r["reduce"] == 103.0, detail
        assert r["all_gather"] == [100.0, 1.0, 2.0], detail
        assert r["is_chief"] is (host == "main1"), detail
