"""Lightning Fabric worker run as ``derive-env -- python lightning_worker.py NUM_NODES``.

What a user's Fabric script does in each container of a multi-node session, with nothing
but the derived environment to go on: ``Fabric(accelerator="cpu", devices=1,
num_nodes=NUM_NODES, strategy=DDPStrategy(...))`` (the "ddp" strategy, given as an object
only to bound its timeout). Lightning picks its cluster environment itself
(``_Connector._choose_and_init_cluster_environment``: TorchElastic, SLURM, LSF, MPI, else
``LightningEnvironment``), which reads MASTER_ADDR, MASTER_PORT and NODE_RANK, and takes
the process for an externally launched one when LOCAL_RANK is set.

Reported BEFORE ``fabric.launch()`` (launch itself sets LOCAL_RANK, WORLD_SIZE ...): the
container-level launcher variables as the shim left them, the chosen environment class, its
``creates_processes_externally``, ``main_address``, ``main_port``, ``node_rank()`` and
``local_rank()``, and ``fabric.node_rank``. Then ``fabric.launch()`` joins a gloo process
group of NUM_NODES x 1 processes across the containers, and reports global_rank, world_size,
an ``all_reduce`` SUM of ``global_rank + 1`` and an ``all_gather`` of the node ranks.

Output: ONE JSON line on stdout (keys above, plus versions, hostname, ok, and "error" on
failure). Exit status 0 if ok, else 1. Timeout: E2E_PG_TIMEOUT_S seconds (default 60) for the
process group, so a wrong master address fails instead of hanging.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys

from worker_report import emit, fail

#: Variables a launcher (torchrun, Lightning, SLURM ...) sets per process; the shim must leave
#: them to the launcher in torchrun mode. Recorded as the process found them.
LAUNCHER_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "TORCHELASTIC_RUN_ID",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
)


def main() -> int:
    """Inspect Fabric's view of the container, launch, all-reduce; print one JSON line."""
    num_nodes = int(sys.argv[1])
    timeout_s = float(os.environ.get("E2E_PG_TIMEOUT_S", "60"))
    report: dict[str, object] = {
        "hostname": socket.gethostname(),
        "container_env": {k: os.environ.get(k) for k in LAUNCHER_VARS},
        "ok": False,
    }
    try:
        import lightning
        import torch
        from lightning.fabric import Fabric
        from lightning.fabric.strategies import DDPStrategy

        report.update(lightning_version=lightning.__version__, torch_version=torch.__version__)
        fabric = Fabric(
            accelerator="cpu",
            devices=1,
            num_nodes=num_nodes,
            strategy=DDPStrategy(
                process_group_backend="gloo", timeout=datetime.timedelta(seconds=timeout_s)
            ),
        )
        env = fabric.strategy.cluster_environment
        assert env is not None
        report.update(
            environment=type(env).__name__,
            torchelastic_detected=bool(torch.distributed.is_torchelastic_launched()),
            creates_processes_externally=env.creates_processes_externally,
            main_address=env.main_address,
            main_port=env.main_port,
            env_node_rank=env.node_rank(),
            env_local_rank=env.local_rank(),
            fabric_node_rank=fabric.node_rank,
        )
        fabric.launch()
        try:
            total = fabric.all_reduce(
                torch.tensor([float(fabric.global_rank + 1)]), reduce_op="sum"
            )
            nodes = fabric.all_gather(torch.tensor([fabric.node_rank]))
            fabric.barrier()
            report.update(
                global_rank=fabric.global_rank,
                world_size=fabric.world_size,
                local_rank=fabric.local_rank,
                all_reduce=float(total.item()),
                all_gather_node_ranks=[int(x) for x in nodes.reshape(-1).tolist()],
                ok=True,
            )
        finally:
            if torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()
    except Exception as exc:  # any failure must still produce the JSON line
        fail(report, exc)
    return emit(report)


if __name__ == "__main__":
    sys.exit(main())
