"""Training-script stand-in run by torchrun in every simulated container.

Each worker joins the gloo process group from the variables torchrun sets (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, LOCAL_RANK, GROUP_RANK = node rank), contributes the tensor
[rank + 1], and all-reduces with SUM; the expected result is world_size * (world_size + 1) / 2.

Output: exactly ONE JSON line on stdout with keys rank, local_rank, world_size, group_rank,
master_addr, master_port, hostname, launcher (worker_report.launcher_ids), env (the
variables of ENV_PREFIXES this process saw, for the tests to assert exactly what derive-env
set), result, expected, ok (plus "error" if
joining or the all-reduce failed). Exit status 0 if ok, 1 otherwise.

Timeout: E2E_PG_TIMEOUT_S seconds (default 60) for init_process_group and the collective, so a
wrong master address ends in an error instead of hanging forever.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys

from worker_report import emit, fail, launcher_ids

#: Prefixes of the variables reported under "env": what torch's env:// and torchrun read.
ENV_PREFIXES = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
    "MASTER_", "PET_", "TORCHELASTIC_",
)


def _env_int(name: str) -> int | None:
    """Integer value of environment variable ``name``, or None if unset/not an integer."""
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def main() -> int:
    """Join the group, all-reduce, print one JSON line; return the exit status (0 = ok)."""
    timeout_s = float(os.environ.get("E2E_PG_TIMEOUT_S", "60"))
    report: dict[str, object] = {
        "rank": _env_int("RANK"),
        "local_rank": _env_int("LOCAL_RANK"),
        "world_size": _env_int("WORLD_SIZE"),
        "group_rank": _env_int("GROUP_RANK"),
        "master_addr": os.environ.get("MASTER_ADDR"),
        "master_port": _env_int("MASTER_PORT"),
        "hostname": socket.gethostname(),
        "launcher": launcher_ids(),
        "env": {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)},
        "result": None,
        "expected": None,
        "ok": False,
    }
    try:
        # Imported here so a missing torch is reported in the JSON line like any other failure.
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
        try:
            rank, world = dist.get_rank(), dist.get_world_size()
            tensor = torch.tensor([float(rank + 1)])
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            # Small integers are exact in float32, so == is safe here.
            expected = world * (world + 1) / 2
            report.update(
                rank=rank,
                world_size=world,
                result=tensor.item(),
                expected=expected,
                ok=tensor.item() == expected,
            )
        finally:
            dist.destroy_process_group()
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        # Any failure must still produce the JSON line (torch's Dist*Error are RuntimeErrors).
        fail(report, exc)
    return emit(report)

if __name__ == "__main__":
    sys.exit(main())
