"""JAX, proven by JAX: ``jax.distributed`` across 3 simulated containers on the CPU.

Each container (its own network namespace; BACKENDAI_CLUSTER_HOSTS not starting with main1)
runs ``derive-env -- python jax_worker.py``, which calls ``jax.distributed.initialize(
num_processes=int(os.environ["JAX_NUM_PROCESSES"]), process_id=int(os.environ["JAX_PROCESS_ID"]))``
(the coordinator address read by JAX itself from JAX_COORDINATOR_ADDRESS) and runs two
cross-process collectives over gloo (JAX's default CPU collectives in 0.10.x). A wrong
coordinator host or port, count or id anywhere would fail the initialisation (bounded by
E2E_JAX_TIMEOUT_S) or give other indices/values. Under CI=true a machine that cannot simulate,
or a missing JAX, FAILS the test instead of skipping it.
"""

from __future__ import annotations

import pytest

from sessions import HOSTS, LABEL, random_ports, require_frameworks, run_workers

pytestmark = pytest.mark.e2e

#: Seconds for the whole session (a healthy run takes ~10 s on a busy 2-core machine).
SESSION_TIMEOUT_S = 120.0
WORKER_ENV = {"E2E_JAX_TIMEOUT_S": "60", "JAX_PLATFORMS": "cpu"}


def test_jax_distributed_processes_agree_and_collectives() -> None:
    """process_count 3 everywhere, process_index = canonical position (main1 = 0), the
    coordinator at main1:<jax-port>; process_allgather gives [10, 20, 30] and a jitted sum
    over a global array gives 1 + 4 + 9 = 14 on every process."""
    require_frameworks("jax")
    (port,) = random_ports(1)
    reports = run_workers({LABEL + "frameworks": "jax", LABEL + "jax-port": str(port)},
                          "jax_worker.py", SESSION_TIMEOUT_S, extra_env=WORKER_ENV)
    for index, host in enumerate(HOSTS):
        r = reports[host]
        detail = f"{host}: {r}"
        assert r["hostname"] == host, detail
        assert r["env"] == {
            "JAX_COORDINATOR_ADDRESS": f"main1:{port}",
            "JAX_NUM_PROCESSES": "3",
            "JAX_PROCESS_ID": str(index),
            "JAX_PLATFORMS": "cpu",
        }, detail
        assert r["process_count"] == 3, detail
        assert r["process_index"] == index, detail
        assert (r["device_count"], r["local_device_count"]) == (3, 1), detail
        assert r["gathered"] == [10, 20, 30], detail
        assert r["sum"] == 60, detail
        assert r["psum_of_squares"] == 14, detail
