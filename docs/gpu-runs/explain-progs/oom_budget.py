# A trainer colocated with a rollout engine on one GPU (RL): it caps itself to its share of the device with
# torch.cuda.set_per_process_memory_fraction (BUDGET_GIB of the total), then builds a 1.07 B-parameter model in fp32
# with AdamW: weights 4 GiB + gradients 4 GiB + optimizer state 8 GiB do not fit the budget.
import os
import time

import torch

budget = float(os.environ.get("BUDGET_GIB", "10")) * 2 ** 30
free, total = torch.cuda.mem_get_info()
frac = budget / total
torch.cuda.set_per_process_memory_fraction(frac, 0)
print(f"[trainer] {torch.cuda.get_device_name(0)}: {total / 2**30:.1f} GiB total, {free / 2**30:.1f} GiB free; "
      f"trainer share {budget / 2**30:.1f} GiB (set_per_process_memory_fraction({frac:.3f})), "
      f"the rest left to the rollout engine", flush=True)
torch.manual_seed(0)
width, depth = 8192, 16
model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False, device="cuda") for _ in range(depth)])
n = sum(p.numel() for p in model.parameters())
print(f"[trainer] policy {n / 1e9:.2f} B params fp32, {torch.cuda.memory_allocated() / 2**30:.2f} GiB allocated", flush=True)
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
for step in range(3):
    t0 = time.time()
    x = torch.randn(16, width, device="cuda")
    loss = model(x).pow(2).mean()
    loss.backward()
    print(f"[trainer] step {step}: backward done, {torch.cuda.memory_allocated() / 2**30:.2f} GiB allocated", flush=True)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"[trainer] step {step} loss {loss.item():.5f} ({time.time() - t0:.2f} s), peak "
          f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", flush=True)
