# DistributedDataParallel training over gloo, every rank on the one GPU (run under torchrun). Knobs:
#   LR: SGD learning rate; STEPS: batches per rank; STEP_SLEEP: seconds of data loading per step
#   UNEVEN=n: the last rank gets n batches fewer, then all ranks gather their metrics
#   DEVICE_PER_RANK=1: each rank uses cuda:LOCAL_RANK; PIDFILE: the last rank writes its pid there
import datetime
import math
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

local = int(os.environ.get("LOCAL_RANK", "0"))
dev = torch.device("cuda", local if os.environ.get("DEVICE_PER_RANK") == "1" else 0)
torch.cuda.set_device(dev)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=int(os.environ.get("PG_TIMEOUT", "30"))))
rank, world = dist.get_rank(), dist.get_world_size()
print(f"[rank{rank}] world {world} on {dev} ({torch.cuda.get_device_name(dev)}), torch {torch.__version__}", flush=True)
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1)).to(dev),
            device_ids=[dev.index])
opt = torch.optim.SGD(model.parameters(), lr=float(os.environ.get("LR", "1e-2")))
steps = int(os.environ.get("STEPS", "20"))
if rank == world - 1:
    steps -= int(os.environ.get("UNEVEN", "0"))
pause = float(os.environ.get("STEP_SLEEP", "0"))
g = torch.Generator(device=dev).manual_seed(1234 + rank)
loss_val = float("nan")
for step in range(steps):
    time.sleep(pause)
    x = torch.randn(64, 256, device=dev, generator=g)
    y = x[:, :8].sum(dim=1, keepdim=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
    opt.step()
    opt.zero_grad(set_to_none=True)
    loss_val = loss.item()
    print(f"[rank{rank}] step {step} loss {loss_val:.6g} grad_norm {norm.item():.6g}", flush=True)
    if not math.isfinite(loss_val):
        raise ValueError(f"loss is {loss_val} at step {step} on rank {rank}")
    if step == 0 and rank == world - 1 and os.environ.get("PIDFILE"):
        with open(os.environ["PIDFILE"], "w") as f:
            f.write(str(os.getpid()))
metrics = [None] * world
dist.all_gather_object(metrics, {"rank": rank, "steps": steps, "loss": loss_val})
if rank == 0:
    print("metrics", metrics, flush=True)
dist.barrier()
dist.destroy_process_group()
print(f"[rank{rank}] done", flush=True)
