"""JAX worker run as ``derive-env -- python jax_worker.py`` in every simulated container.

Joins the JAX distributed runtime with exactly the call that derive-env's docs show: the
coordinator address comes from ``JAX_COORDINATOR_ADDRESS`` (read by JAX itself), the process
count and id from ``JAX_NUM_PROCESSES`` / ``JAX_PROCESS_ID``. Then runs two cross-process
collectives on the CPU over gloo (the default of ``jax_cpu_collectives_implementation`` in
0.10.x, set explicitly here):

* ``multihost_utils.process_allgather`` of ``(process_index + 1) * 10`` (and its sum);
* a jitted ``jnp.sum`` over a global array holding ``(process_index + 1) ** 2`` per process
  (an XLA all-reduce across the processes).

Output: ONE JSON line on stdout with keys hostname, launcher (worker_report.launcher_ids),
env (the JAX_* variables seen), process_count, process_index, device_count,
local_device_count, gathered (list), sum, psum_of_squares, jax_version, ok (plus "error"
with the exception on failure). Exit status 0 if ok, else 1.

Timeouts (seconds, from E2E_JAX_TIMEOUT_S, default 60): distributed initialisation and the
heartbeat, so a wrong coordinator address ends in an error instead of a hang.
"""

from __future__ import annotations

import os
import socket
import sys

from worker_report import emit, fail, launcher_ids


def main() -> int:
    """Initialise, gather, print one JSON line; return the exit status."""
    timeout_s = int(float(os.environ.get("E2E_JAX_TIMEOUT_S", "60")))
    report: dict[str, object] = {
        "hostname": socket.gethostname(),
        "launcher": launcher_ids(),
        "env": {k: v for k, v in os.environ.items() if k.startswith("JAX_")},
        "ok": False,
    }
    try:
        import jax
        import jax.numpy as jnp
        import numpy as np
        from jax.experimental import multihost_utils

        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
            process_id=int(os.environ["JAX_PROCESS_ID"]),
            initialization_timeout=timeout_s,
            heartbeat_timeout_seconds=timeout_s,
            shutdown_timeout_seconds=timeout_s,
        )
        try:
            index = jax.process_index()
            report.update(
                jax_version=jax.__version__,
                process_count=jax.process_count(),
                process_index=index,
                device_count=jax.device_count(),
                local_device_count=jax.local_device_count(),
            )
            mine = np.array([(index + 1) * 10], dtype=np.int32)
            gathered = np.asarray(multihost_utils.process_allgather(mine)).reshape(-1)
            report["gathered"] = [int(x) for x in gathered]
            report["sum"] = int(gathered.sum())
            # A second collective computed by XLA itself: a jitted sum over a global array
            # with one element per process (one CPU device each), i.e. an all-reduce.
            mesh = jax.sharding.Mesh(np.array(jax.devices()), ("p",))
            local = np.array([(index + 1) ** 2], dtype=np.int32)
            global_arr = multihost_utils.host_local_array_to_global_array(
                local, mesh, jax.sharding.PartitionSpec("p")
            )
            total = jax.jit(
                jnp.sum,
                out_shardings=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()),
            )(global_arr)
            report["psum_of_squares"] = int(np.asarray(total.addressable_data(0)))
            report["ok"] = True
        finally:
            jax.distributed.shutdown()
    except Exception as exc:  # any failure must still produce the JSON line
        fail(report, exc)
    return emit(report)


if __name__ == "__main__":
    sys.exit(main())
