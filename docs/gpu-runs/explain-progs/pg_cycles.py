# A one-rank NCCL weight-sync group made CYCLES times over fresh FileStores (rebuilt after each resize of the
# rollout fleet): broadcast 256 MiB of weights, then destroy the group. Knobs:
#   NO_DEVICE_ID=1: init_process_group without device_id; NO_DESTROY=1: the last group is left to interpreter exit
import os
import tempfile
import time

import torch
import torch.distributed as dist

dev = torch.device("cuda:0")
torch.cuda.set_device(dev)
weights = torch.randn(64 << 20, device=dev)
cycles = int(os.environ.get("CYCLES", "4"))
print(f"torch {torch.__version__} nccl {'.'.join(map(str, torch.cuda.nccl.version()))}", flush=True)
for v in range(1, cycles + 1):
    t0 = time.time()
    kw = {} if os.environ.get("NO_DEVICE_ID") == "1" else {"device_id": dev}
    dist.init_process_group("nccl", store=dist.FileStore(tempfile.mktemp(prefix="wsync-"), 1), rank=0, world_size=1, **kw)
    dist.barrier()
    dist.broadcast(weights, src=0)
    torch.cuda.synchronize()
    print(f"[weight-sync] group v{v}: barrier + broadcast {weights.numel() * 4 >> 20} MiB in {time.time() - t0:.2f} s", flush=True)
    if v < cycles or os.environ.get("NO_DESTROY") != "1":
        dist.destroy_process_group()
print(f"weights in sync after {cycles} group(s), checksum {weights.double().sum().item():.6e}", flush=True)
