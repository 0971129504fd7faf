import os

import torch
import torch.distributed as dist

# torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT for each process.
gpu = torch.cuda.is_available()
dist.init_process_group("nccl" if gpu else "gloo")
if gpu:
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([rank + 1.0], device="cuda" if gpu else "cpu")
dist.all_reduce(t)
print(f"rank {rank}/{world} on {os.uname().nodename}: sum {t.item():.0f}, "
      f"expected {world * (world + 1) // 2}", flush=True)
dist.destroy_process_group()
