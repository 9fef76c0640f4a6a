# Data-parallel training (DDP over gloo, both ranks on the one GPU) under torchrun, each rank reading its data
# shards from a shard cache (stood in by local files that the rank writes at start-up). Rank 0 checkpoints every 2
# steps; a restarted worker group resumes from the checkpoint. Knobs:
#   FLAKY_ON=n: while torchrun's restart count is below n, rank 1's fetch of its step-4 shard fails with
#               ConnectionResetError (a transient drop of the shard server), re-raised as a RuntimeError; under
#               --max-restarts the group restarts and resumes (healthy)
#   HANG_AT=k: rank 1's read of its step-k shard opens a named pipe that no one writes (as a read from a hung network
#              mount blocks); rank 0 waits in DDP's gradient all_reduce until the gloo timeout (rank 1 ends itself
#              with SIGALRM after 60 s if nothing else has ended it)
#   EVAL_RANK0=1: every EVAL_EVERY steps rank 0 alone runs an eval that all_reduces its metrics (a helper written
#                 for all ranks, called under `if rank == 0`), while rank 1 goes on to the next gradient all_reduce
#   PG_TIMEOUT (s), STEPS, CKPT, DEVICE (cuda; cpu for a dry run)
import datetime
import errno
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "30"))))
rank, world = dist.get_rank(), dist.get_world_size()
dev = torch.device(os.environ.get("DEVICE", "cuda"))
if dev.type == "cuda":
    torch.cuda.set_device(0)
    dev = torch.device("cuda:0")
ckpt = os.environ.get("CKPT", "fetch.pt")
steps = int(os.environ.get("STEPS", "12"))
cache = f"shard-cache/rank{rank}"
url = "shards://127.0.0.1:8470/pretrain-v3"
name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
print(f"[rank{rank}] attempt {attempt}/{os.environ.get('TORCHELASTIC_MAX_RESTARTS', '0')} world {world} "
      f"pid {os.getpid()} on {name}", flush=True)
if attempt == 0 and rank == 0 and os.path.exists(ckpt):
    os.remove(ckpt)
os.makedirs(cache, exist_ok=True)
for s in range(steps):
    path = f"{cache}/shard-{s:05d}.pt"
    if not os.path.exists(path):
        g = torch.Generator().manual_seed(1000 * rank + s)
        torch.save(torch.randn(64, 256, generator=g), path)
print(f"[rank{rank}] shard cache {cache} warm ({steps} shards from {url})", flush=True)
dist.barrier()


def fetch(step):
    """One data shard: from the local cache, or from the shard server."""
    path = f"{cache}/shard-{step:05d}.pt"
    try:
        if rank == 1 and step == 4 and attempt < int(os.environ.get("FLAKY_ON", "0")):
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
        if rank == 1 and step == int(os.environ.get("HANG_AT", "-1")):
            fifo = f"{cache}/shard-{step:05d}.stream"
            if not os.path.exists(fifo):
                os.mkfifo(fifo)
            signal.alarm(60)
            print(f"[rank{rank}] step {step}: shard not in the cache, streaming it", flush=True)
            path = fifo
        with open(path, "rb") as f:
            return torch.load(f).to(dev)
    except ConnectionError as e:
        raise RuntimeError(f"failed to fetch shard {step:05d} from {url}") from e


torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1)).to(dev),
            device_ids=[0] if dev.type == "cuda" else None)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
start = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt, map_location=dev)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"] + 1
    print(f"[rank{rank}] resumed from {ckpt} at step {start}", flush=True)


def evaluate():
    """Validation loss, averaged over the ranks."""
    model.eval()
    with torch.no_grad():
        g = torch.Generator(device="cpu").manual_seed(99)
        x = torch.randn(256, 256, generator=g).to(dev)
        loss = torch.nn.functional.mse_loss(model.module(x), x[:, :8].sum(dim=1, keepdim=True), reduction="sum")
    stats = torch.stack([loss, torch.tensor(float(x.shape[0]), device=dev)])
    dist.all_reduce(stats)
    model.train()
    return (stats[0] / stats[1]).item()


every = int(os.environ.get("EVAL_EVERY", "3"))
t0 = time.time()
for step in range(start, steps):
    time.sleep(0.2)
    x = fetch(step)
    loss = torch.nn.functional.mse_loss(model(x), x[:, :8].sum(dim=1, keepdim=True))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"[rank{rank}] step {step} loss {loss.item():.5f}", flush=True)
    if rank == 0 and step % 2 == 0:
        torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
    if os.environ.get("EVAL_RANK0") == "1" and rank == 0 and step % every == every - 1:
        print(f"[rank{rank}] step {step} val_loss {evaluate():.5f}", flush=True)
dist.barrier()
dist.destroy_process_group()
print(f"[rank{rank}] finished attempt {attempt}: {steps - start} steps in {time.time() - t0:.1f} s", flush=True)
if rank == 0:
    print(f"training complete: {steps} steps, checkpoint {ckpt}", flush=True)
sys.exit(0)
