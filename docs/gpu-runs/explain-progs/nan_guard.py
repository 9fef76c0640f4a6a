# Training with a non-finite-loss guard: some batches of a corrupted shard hold NaN features; the guard skips a
# step whose loss or gradient norm is not finite and stops the run only after MAX_SKIPS such steps.
import math
import os

import torch

torch.manual_seed(0)
bad = {int(i) for i in os.environ.get("NAN_BATCHES", "11,12,29").split(",") if i}
max_skips = int(os.environ.get("MAX_SKIPS", "10"))
model = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.SiLU(), torch.nn.Linear(512, 1)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}", flush=True)
skipped, steps = 0, 60
for step in range(steps):
    x = torch.randn(256, 128, device="cuda")
    if step in bad:
        x[step % 7::9, step % 128] = float("nan")
    loss = (model(x) - x[:, :3].sum(1, keepdim=True)).pow(2).mean()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if not (math.isfinite(loss.item()) and math.isfinite(norm.item())):
        skipped += 1
        opt.zero_grad(set_to_none=True)
        print(f"WARNING step {step}: non-finite loss {loss.item()} / grad_norm {norm.item()}; batch skipped "
              f"({skipped}/{max_skips})", flush=True)
        if skipped >= max_skips:
            raise RuntimeError(f"{skipped} non-finite steps, stopping")
        continue
    opt.step()
    opt.zero_grad(set_to_none=True)
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.4f} grad_norm {norm.item():.3f}", flush=True)
print(f"epoch 0: {steps - skipped}/{steps} steps applied, {skipped} skipped (non-finite)", flush=True)
