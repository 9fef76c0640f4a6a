# An out-of-bounds index on the GPU (device-side assert), then a collective on the poisoned context.
import tempfile

import torch
import torch.distributed as dist

dev = torch.device("cuda:0")
dist.init_process_group("nccl", store=dist.FileStore(tempfile.mktemp(), 1), rank=0, world_size=1, device_id=dev)
x = torch.zeros(10, device=dev)
try:
    y = x[torch.tensor([100], device=dev)]
    torch.cuda.synchronize()
except Exception as e:
    print("first error:", repr(e)[:300], flush=True)
dist.all_reduce(x)
torch.cuda.synchronize()
