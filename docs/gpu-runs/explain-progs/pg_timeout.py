# One-rank NCCL and gloo groups with an explicit 30-minute timeout, a broadcast and a barrier: a healthy run that
# prints its settings (a timeout being set is not a timeout).
import datetime
import tempfile

import torch
import torch.distributed as dist

timeout = datetime.timedelta(minutes=30)
print(f"torch {torch.__version__}; timeout={timeout}; NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}", flush=True)
dev = torch.device("cuda:0")
dist.init_process_group("nccl", store=dist.FileStore(tempfile.mktemp(), 1), rank=0, world_size=1, device_id=dev,
                        timeout=timeout)
cpu = dist.new_group(backend="gloo", timeout=timeout)
x = torch.arange(8, device=dev, dtype=torch.float32)
dist.broadcast(x, src=0)
dist.barrier(group=cpu)
torch.cuda.synchronize()
print("broadcast ok", x.sum().item(), "barrier ok", flush=True)
dist.destroy_process_group()
