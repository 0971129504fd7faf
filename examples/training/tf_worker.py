"""TensorFlow worker run as ``derive-env -- python tf_worker.py`` in every simulated container.

Builds ``tf.distribute.MultiWorkerMirroredStrategy()`` from the derived ``TF_CONFIG`` and
nothing else (no cluster resolver, no addresses passed), then runs two cross-worker
collectives in the replica context (one CPU replica per task):

* ``all_reduce(SUM)`` of the task's value, and ``strategy.reduce(SUM)`` of the same
  per-replica values (the cross-replica path);
* ``all_gather`` of the value, which shows the order of the tasks in the collective group.

The value of a task is 100 for the chief and ``index + 1`` for worker ``index``, so every
layout has a distinct, exactly known sum (all floats are small integers, exact in float32).

Output: ONE JSON line on stdout with keys hostname, launcher (worker_report.launcher_ids),
tf_config (parsed), task_type, task_id, num_replicas_in_sync, is_chief, value, all_reduce,
reduce, all_gather (list), tf_version, ok (plus "error" on failure). Exit status 0 if ok, else 1.

Timeout: collectives time out after E2E_TF_TIMEOUT_S seconds (default 60), so a worker that
cannot reach its peers fails instead of hanging.
"""

from __future__ import annotations

import json
import os
import socket
import sys

from worker_report import emit, fail, launcher_ids


def task_value(task_type: str, task_id: int) -> float:
    """The number a task contributes: 100 for the chief, ``index + 1`` for a worker."""
    return 100.0 if task_type == "chief" else float(task_id + 1)


def main() -> int:
    """Build the strategy, run the collectives, print one JSON line; return exit status."""
    timeout_s = float(os.environ.get("E2E_TF_TIMEOUT_S", "60"))
    report: dict[str, object] = {"hostname": socket.gethostname(),
        "launcher": launcher_ids(), "ok": False}
    try:
        report["tf_config"] = json.loads(os.environ["TF_CONFIG"])
        import tensorflow as tf

        report["tf_version"] = tf.__version__
        options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout_s)
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        resolver = strategy.cluster_resolver
        task_type, task_id = resolver.task_type, int(resolver.task_id)
        value = task_value(task_type, task_id)
        report.update(
            task_type=task_type,
            task_id=task_id,
            num_replicas_in_sync=strategy.num_replicas_in_sync,
            # True on exactly one task: the chief, or worker 0 when there is no chief.
            is_chief=bool(strategy.extended.should_checkpoint),
            value=value,
        )

        @tf.function
        def step() -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
            def replica_fn() -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
                ctx = tf.distribute.get_replica_context()
                mine = tf.constant([value])
                summed = ctx.all_reduce(tf.distribute.ReduceOp.SUM, mine)
                gathered = ctx.all_gather(mine, axis=0)
                return mine, summed, gathered

            return strategy.run(replica_fn)

        mine, summed, gathered = step()
        reduced = strategy.reduce(tf.distribute.ReduceOp.SUM, mine, axis=None)
        local = strategy.experimental_local_results
        report.update(
            all_reduce=float(local(summed)[0].numpy()[0]),
            all_gather=[float(x) for x in local(gathered)[0].numpy()],
            reduce=float(reduced.numpy()[0]),
            ok=True,
        )
    except Exception as exc:  # any failure must still produce the JSON line
        fail(report, exc)
    return emit(report)


if __name__ == "__main__":
    sys.exit(main())
