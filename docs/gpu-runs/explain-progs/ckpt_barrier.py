# Two ranks (gloo, run under torchrun) train, then save a checkpoint shard each; rank 0 waits on the store for rank
# 1's "saved" key with a short timeout and retries (RETRIES times) before it gives up. Knobs:
#   SLOW: seconds rank 1's shard takes to write; HANG=1: rank 1's writer deadlocks on its own lock and never reports
import datetime
import logging
import os
import threading
import time

import torch
import torch.distributed as dist

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s [%(name)s] %(message)s")
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
log = logging.getLogger(f"ckpt.rank{rank}")
dev = torch.device("cuda:0")
model = torch.nn.Linear(512, 512).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
store = dist.distributed_c10d._get_default_store()
lock = threading.Lock()


def train(steps, first):
    for step in range(first, first + steps):
        loss = model(torch.randn(32, 512, device=dev)).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            g = p.grad.cpu()
            dist.all_reduce(g)
            p.grad.copy_(g / dist.get_world_size())
        opt.step()
        opt.zero_grad()
        log.info("step %d loss %.5f", step, loss.item())


def save_shard(step):
    with lock:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, f"shard-{step}-rank{rank}.pt")
        if rank == 1:
            time.sleep(float(os.environ.get("SLOW", "0")))
            if os.environ.get("HANG") == "1":
                with lock:  # the async writer takes the lock again: a deadlock
                    pass
    store.set(f"ckpt/{step}/rank{rank}", "saved")


train(3, 0)
save_shard(3)
if rank == 0:
    retries = int(os.environ.get("RETRIES", "5"))
    for attempt in range(1, retries + 1):
        try:
            store.wait(["ckpt/3/rank1"], datetime.timedelta(seconds=2))
            break
        except Exception:
            log.warning("checkpoint step 3: rank 1 has not reported (wait %d/%d)", attempt, retries, exc_info=attempt == 1)
    else:
        raise RuntimeError(f"checkpoint step 3: rank 1 did not report its shard after {retries} waits")
    log.info("checkpoint step 3 complete (2 shards)")
dist.barrier()
train(3, 4)
dist.destroy_process_group()
