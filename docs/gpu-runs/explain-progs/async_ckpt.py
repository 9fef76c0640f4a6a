# Training with asynchronous checkpoints: every CKPT_EVERY steps the trainer forks a writer process (fork, so that
# the writer gets the state dict without a copy) that torch.save()s it while training goes on; before the next
# checkpoint the trainer joins the previous writer and checks its exit code.
#   default: the state dict handed to the forked writer holds the model's CUDA tensors, so the writer (a child forked
#     after the parent initialised CUDA) must use CUDA to copy them to the host; it fails and the trainer raises
#   CPU_COPY=1: the trainer copies the state to host memory before forking; the writer touches no CUDA (works)
#   STEPS (300), CKPT_EVERY (100), DEVICE (cuda; cpu for a dry run, where the writer always works)
import multiprocessing as mp
import os
import sys
import time

import torch

dev = torch.device(os.environ.get("DEVICE", "cuda"))
steps = int(os.environ.get("STEPS", "300"))
every = int(os.environ.get("CKPT_EVERY", "100"))
cpu_copy = os.environ.get("CPU_COPY") == "1"


def writer(state, path):
    t = time.time()
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)
    print(f"[ckpt-writer pid {os.getpid()}] wrote {path} in {time.time() - t:.2f} s", flush=True)


def check(p, step):
    """Joins the previous writer; a writer that failed or hangs fails the run."""
    p.join(15)
    if p.exitcode is None:
        p.kill()
        p.join(5)
        raise RuntimeError(f"async checkpoint writer for step {step} (pid {p.pid}) still running after 15 s; killed")
    if p.exitcode != 0:
        raise RuntimeError(f"async checkpoint writer for step {step} (pid {p.pid}) failed with exit code {p.exitcode}")


def main():
    fork = mp.get_context("fork")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    os.makedirs("async-ckpt", exist_ok=True)
    print(f"trainer pid {os.getpid()} on {torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'cpu'}; "
          f"async checkpoints every {every} steps", flush=True)
    pending = None
    for step in range(1, steps + 1):
        x = torch.randn(256, 1024, device=dev)
        loss = (model(x) - x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step}/{steps} loss {loss.item():.5f}", flush=True)
        if step % every == 0:
            if pending is not None:
                check(*pending)
            state = {"step": step, "model": model.state_dict(), "opt": opt.state_dict()}
            if cpu_copy:
                state = {"step": step, "model": {k: v.to("cpu", copy=True) for k, v in model.state_dict().items()}}
            p = fork.Process(target=writer, args=(state, f"async-ckpt/step-{step:06d}.pt"), name=f"ckpt-{step}")
            p.start()
            pending = (p, step)
            print(f"step {step}: checkpoint handed to writer pid {p.pid}", flush=True)
    if pending is not None:
        check(*pending)
    print(f"training done: {steps} steps, last checkpoint "
          f"{f'async-ckpt/step-{pending[1]:06d}.pt' if pending else 'none'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
