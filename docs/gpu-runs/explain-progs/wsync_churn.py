# A trainer that publishes its weights to a colocated "rollout" copy through a one-rank process group every step
# (NCCL on the GPU, gloo with DEVICE=cpu). SYNC_GROUP=once (default) makes the sync group once; SYNC_GROUP=per_step
# makes a new group for every sync and destroys it afterwards. Each sync after the first has a 5 ms budget
# (SYNC_BUDGET_MS); three syncs over budget end the run.
import datetime
import logging
import os
import statistics
import time
import traceback

import torch
import torch.distributed as dist

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s wsync: %(message)s")
log = logging.getLogger()
dev = torch.device("cpu") if os.environ.get("DEVICE") == "cpu" else torch.device("cuda", 0)
backend = "gloo" if dev.type == "cpu" else "nccl"
per_step = os.environ.get("SYNC_GROUP", "once") == "per_step"
budget = float(os.environ.get("SYNC_BUDGET_MS", "5"))
steps = int(os.environ.get("STEPS", "40"))
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29629")
if dev.type == "cuda":
    torch.cuda.set_device(0)
dist.init_process_group(backend, rank=0, world_size=1, timeout=datetime.timedelta(seconds=60))
log.info("trainer up: backend=%s device=%s sync group %s", backend, dev, "per step" if per_step else "once")

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(dev)
rollout = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
flat = torch.zeros(sum(p.numel() for p in model.parameters()), device=dev)

# the rollout side's first handshake sends its version counter as a host tensor; NCCL refuses host tensors
ver = torch.zeros(1, dtype=torch.int64)
g0 = dist.new_group([0])
try:
    dist.all_reduce(ver, group=g0)
    log.info("version handshake on host tensor ok")
except Exception as e:
    log.error("version handshake failed, retrying with the counter on %s: %s", dev, e)
    traceback.print_exc()
    ver = ver.to(dev)
    dist.all_reduce(ver, group=g0)
    log.info("version handshake ok (version %d)", int(ver.item()))

group = None if per_step else dist.new_group([0])
times, over = [], 0
for step in range(1, steps + 1):
    x = torch.randn(256, 1024, device=dev)
    loss = (model(x) - x).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    g = dist.new_group([0]) if per_step else group
    torch.cat([p.detach().reshape(-1) for p in model.parameters()], out=flat)
    dist.broadcast(flat, src=0, group=g)
    torch.nn.utils.vector_to_parameters(flat, rollout.parameters())
    if per_step:
        dist.destroy_process_group(g)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    ms = (time.perf_counter() - t0) * 1e3
    if step > 1:
        times.append(ms)
        if ms > budget:
            over += 1
            log.warning("step %d: weight sync took %.1f ms (budget %.0f ms, %d/3 over budget)", step, ms, budget, over)
            if over >= 3:
                raise RuntimeError(f"weight sync over budget 3 times (last {ms:.1f} ms at step {step}); "
                                   "rollout would serve stale weights, stopping")
    if step % 10 == 0:
        log.info("step %d loss %.4f sync %.2f ms", step, loss.item(), ms)

print("\nweight sync   syncs  p50_ms  p90_ms  max_ms")
q = statistics.quantiles(times, n=10)
print(f"{backend:12s} {len(times):6d} {statistics.median(times):7.2f} {q[8]:7.2f} {max(times):7.2f}")
diff = max((a - b).abs().max().item() for a, b in zip(model.parameters(), rollout.parameters()))
print(f"rollout weights version {steps} published (max |trainer - rollout| = {diff:.1e})")
dist.destroy_process_group()
