# DistributedDataParallel (gloo, every rank on the one GPU) under torchrun --max-restarts: rank 0 checkpoints every
# 2 steps and a restarted worker group resumes from the checkpoint. Knobs:
#   DIE_ON=n: while torchrun's restart count is below n, rank 1 is SIGKILLed at step 3 (as the kernel's OOM killer does)
#   BUG=1: rank 1 reads a config key that does not exist at step 3, in every attempt
#   SERVER=1: rank 0 starts a rollout server (a detached process of its own session, as inference engines are
#             started) that takes MEM_FRACTION of the GPU's total memory for its KV cache, and waits until it is ready
#   CKPT: the checkpoint file; STEPS: steps in all
import datetime
import os
import signal
import subprocess
import sys
import time

import torch


def serve():
    frac = float(os.environ.get("MEM_FRACTION", "0.75"))
    free, total = torch.cuda.mem_get_info()
    print(f"[rollout-server pid {os.getpid()}] gpu_memory_utilization={frac}: KV cache pool "
          f"{frac * total / 2**30:.1f} GiB ({free / 2**30:.1f} GiB free)", flush=True)
    pool = torch.empty(int(frac * total), dtype=torch.uint8, device="cuda")
    with open(sys.argv[2], "w") as f:
        f.write(str(os.getpid()))
    print(f"[rollout-server pid {os.getpid()}] ready, {pool.numel() >> 30} GiB pool, serving on :30000", flush=True)
    time.sleep(float(os.environ.get("SERVE_S", "60")))


if len(sys.argv) > 2 and sys.argv[1] == "--serve":
    serve()
    raise SystemExit(0)

import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
rank, world = dist.get_rank(), dist.get_world_size()
dev = torch.device("cuda:0")
torch.cuda.set_device(dev)
ckpt = os.environ.get("CKPT", "elastic.pt")
cfg = {"lr": 1e-2, "log_every": 1, "ckpt_every": 2}
print(f"[rank{rank}] attempt {attempt} world {world} pid {os.getpid()} on {torch.cuda.get_device_name(dev)}", flush=True)
if attempt == 0 and rank == 0 and os.path.exists(ckpt):
    os.remove(ckpt)
workspace = torch.empty(4 << 30, dtype=torch.uint8, device=dev)  # activation buffers, kept for the run
if os.environ.get("SERVER") == "1" and rank == 0:
    ready = f"rollout-ready-{attempt}"
    server = subprocess.Popen([sys.executable, sys.argv[0], "--serve", ready], start_new_session=True)
    t0 = time.time()
    while not os.path.exists(ready):
        if server.poll() is not None:
            raise RuntimeError(f"rollout server (pid {server.pid}) exited with code {server.returncode} before it was ready")
        if time.time() - t0 > 60:
            raise RuntimeError("rollout server not ready after 60 s")
        time.sleep(0.2)
    print(f"[rank{rank}] rollout server pid {server.pid} ready after {time.time() - t0:.1f} s", flush=True)
dist.barrier()

torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1)).to(dev),
            device_ids=[0])
opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
start = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt, map_location=dev)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"] + 1
    print(f"[rank{rank}] resumed from {ckpt} at step {start}", flush=True)
g = torch.Generator(device=dev).manual_seed(1234 + rank)
for step in range(start, int(os.environ.get("STEPS", "10"))):
    time.sleep(0.2)
    if rank == 1 and step == 3:
        if attempt < int(os.environ.get("DIE_ON", "0")):
            os.kill(os.getpid(), signal.SIGKILL)
        if os.environ.get("BUG") == "1":
            every = cfg["eval_every"]
    x = torch.randn(64, 256, device=dev, generator=g)
    loss = torch.nn.functional.mse_loss(model(x), x[:, :8].sum(dim=1, keepdim=True))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"[rank{rank}] step {step} loss {loss.item():.5f}", flush=True)
    if rank == 0 and step % cfg["ckpt_every"] == 0:
        torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
dist.barrier()
dist.destroy_process_group()
print(f"[rank{rank}] finished attempt {attempt}", flush=True)
