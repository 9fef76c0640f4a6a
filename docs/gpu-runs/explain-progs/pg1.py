# One-rank NCCL process group over a FileStore and one all_reduce; prints what torch carries.
import importlib.metadata as md
import os
import tempfile

import torch
import torch.distributed as dist

print(f"torch {torch.__version__} cuda {torch.version.cuda}")
for d in md.distributions():  # the NCCL wheel this env installed, as pip lists it
    if (d.metadata["Name"] or "").startswith("nvidia-nccl"):
        print(f"{d.metadata['Name']} {d.version}")
print(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r} device_count {torch.cuda.device_count()}")
dev = torch.device("cuda:0")
dist.init_process_group("nccl", store=dist.FileStore(tempfile.mktemp(), 1), rank=0, world_size=1, device_id=dev)
x = torch.ones(1 << 20, device=dev)
dist.all_reduce(x)
torch.cuda.synchronize()
print("all_reduce ok", x[0].item())
dist.destroy_process_group()
