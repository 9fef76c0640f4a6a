# DistributedDataParallel (gloo, every rank on the one GPU, run under torchrun) on a model with an auxiliary value
# head the loss does not use, wrapped without find_unused_parameters.
import datetime
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class ActorCritic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.Tanh())
        self.actor = torch.nn.Linear(512, 16)
        self.critic = torch.nn.Linear(512, 1)

    def forward(self, x, with_value=False):
        h = self.body(x)
        return (self.actor(h), self.critic(h)) if with_value else (self.actor(h), None)


dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
rank = dist.get_rank()
dev = torch.device("cuda:0")
model = DDP(ActorCritic().to(dev), device_ids=[0])
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
print(f"[rank{rank}] torch {torch.__version__} TORCH_DISTRIBUTED_DEBUG={os.environ.get('TORCH_DISTRIBUTED_DEBUG')}", flush=True)
for step in range(5):
    logits, value = model(torch.randn(64, 128, device=dev), with_value=False)
    loss = torch.nn.functional.cross_entropy(logits, torch.randint(16, (64,), device=dev))
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"[rank{rank}] step {step} policy loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
