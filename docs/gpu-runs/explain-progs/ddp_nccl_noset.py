# DistributedDataParallel over NCCL (run under torchrun) in a script that never calls torch.cuda.set_device(LOCAL_RANK)
# and moves the model with .cuda(): every rank lands on the current device, cuda:0. Knobs: STEPS.
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
rank, local = dist.get_rank(), int(os.environ.get("LOCAL_RANK", "0"))
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512)).cuda()
print(f"[rank{rank}] local_rank {local} pid {os.getpid()} model on {next(model.parameters()).device} "
      f"({torch.cuda.get_device_name()}), {torch.cuda.device_count()} visible GPU(s)", flush=True)
ddp = DDP(model)
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
for step in range(int(os.environ.get("STEPS", "20"))):
    x = torch.randn(64, 512, device="cuda")
    loss = (ddp(x) - x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if step % 5 == 0:
        print(f"[rank{rank}] step {step} loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
