# DistributedDataParallel (gloo, every rank on the one GPU, run under torchrun) logging one JSON line per step.
# The last rank's shard is UNEVEN batches shorter; DDP's join() shadows its collectives so the others finish their
# data (the documented way to train on uneven inputs). Built with find_unused_parameters=True (not needed: DDP warns).
# Knobs: STEPS, UNEVEN; RANK1_HIDDEN: the hidden size rank 1 builds its model with (it reads another config)
import datetime
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=int(os.environ.get("PG_TIMEOUT", "30"))))
rank, world = dist.get_rank(), dist.get_world_size()
dev = torch.device("cuda:0")
torch.cuda.set_device(dev)
hidden = int(os.environ.get("RANK1_HIDDEN", "1024")) if rank == 1 else 1024


def emit(**kw):
    print(json.dumps({"ts": round(time.time(), 3), "rank": rank, **kw}), flush=True)


emit(event="start", world=world, hidden=hidden, torch=torch.__version__, device=torch.cuda.get_device_name(dev))
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(256, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, 1)).to(dev)
model = DDP(net, device_ids=[0], find_unused_parameters=True)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
steps = int(os.environ.get("STEPS", "24")) - (int(os.environ.get("UNEVEN", "5")) if rank == world - 1 else 0)
g = torch.Generator(device=dev).manual_seed(100 + rank)
loss = torch.zeros(())
with model.join():
    for step in range(steps):
        t = time.time()
        x = torch.randn(128, 256, device=dev, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), x[:, :4].sum(1, keepdim=True))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        emit(step=step, loss=round(loss.item(), 5), lr=1e-3, step_ms=round((time.time() - t) * 1000, 2))
    emit(event="data_exhausted", steps=steps, note="joining: shadowing collectives until every rank is done")
summary = [None] * world
dist.all_gather_object(summary, {"rank": rank, "steps": steps, "last_loss": round(loss.item(), 5)})
if rank == 0:
    emit(event="final", ranks=summary, total_steps=sum(s["steps"] for s in summary))
dist.destroy_process_group()
