# A Trainer-style loop (log lines as dicts, a final train summary) with a stall watchdog: faulthandler dumps every
# thread's stack when a step takes longer than WATCHDOG_S, and the run goes on. Batches come from a prefetch thread
# reading a network filesystem; the read of batch SLOW_BATCH stalls for SLOW_S seconds (a metadata-server hiccup).
import faulthandler
import os
import queue
import sys
import threading
import time

import torch

STEPS, WATCHDOG = int(os.environ.get("STEPS", "80")), float(os.environ.get("WATCHDOG_S", "3"))
SLOW_BATCH, SLOW_S = int(os.environ.get("SLOW_BATCH", "37")), float(os.environ.get("SLOW_S", "7"))
q = queue.Queue(maxsize=4)


def read_shard(i):
    if i == SLOW_BATCH:
        time.sleep(SLOW_S)  # stat()/open() on the shared filesystem blocks
    g = torch.Generator().manual_seed(i)
    return torch.randn(64, 512, generator=g)


def prefetch():
    for i in range(STEPS):
        q.put(read_shard(i))


threading.Thread(target=prefetch, name="prefetch", daemon=True).start()
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.SiLU(), torch.nn.Linear(2048, 512)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, STEPS)
print(f"***** Running training *****\n  Num examples = {STEPS * 64}\n  Num Epochs = 1\n  Total optimization steps = "
      f"{STEPS}\n  Watchdog: stacks dumped when a step exceeds {WATCHDOG:.0f} s", flush=True)
t0, total = time.time(), 0.0
for step in range(1, STEPS + 1):
    faulthandler.dump_traceback_later(WATCHDOG, repeat=False, file=sys.stderr, exit=False)
    ts = time.time()
    x = q.get().cuda()
    loss = (model(x) - x).pow(2).mean()
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
    opt.step()
    sched.step()
    opt.zero_grad()
    total += loss.item()
    faulthandler.cancel_dump_traceback_later()
    if time.time() - ts > WATCHDOG:
        print(f"step {step} took {time.time() - ts:.1f} s (data wait); continuing", flush=True)
    if step % 10 == 0:
        print({"loss": round(loss.item(), 4), "grad_norm": round(gn, 4), "learning_rate": sched.get_last_lr()[0],
               "epoch": round(step / STEPS, 2)}, flush=True)
rt = time.time() - t0
print({"train_runtime": round(rt, 3), "train_samples_per_second": round(STEPS * 64 / rt, 3),
       "train_steps_per_second": round(STEPS / rt, 3), "train_loss": round(total / STEPS, 5), "epoch": 1.0}, flush=True)
