# A trainer and a rollout engine on the same GPU (colocated RL): the engine, started by the trainer, reserves a
# fraction of the free memory for its KV cache; then the trainer builds its model and optimizer and steps.
import os
import time

import torch
import torch.multiprocessing as mp


def rollout_engine(ready, fraction):
    free, total = torch.cuda.mem_get_info()
    kv = torch.empty(int(free * fraction), dtype=torch.uint8, device="cuda")
    print(f"[rollout] mem_fraction_static={fraction}: KV cache pool {kv.numel() / 2**30:.1f} GiB "
          f"of {total / 2**30:.1f} GiB, serving", flush=True)
    ready.set()
    time.sleep(120)


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    engine = ctx.Process(target=rollout_engine, args=(ready, float(os.environ.get("FRACTION", "0.9"))), daemon=True)
    engine.start()
    if not ready.wait(60):
        raise SystemExit("rollout engine did not start")
    print(f"[trainer] torch {torch.__version__} on {torch.cuda.get_device_name(0)}", flush=True)
    model = torch.nn.Sequential(*[torch.nn.Linear(16384, 16384, device="cuda") for _ in range(4)])
    print(f"[trainer] model {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, "
          f"mem {torch.cuda.memory_allocated() >> 20} MiB", flush=True)
    opt = torch.optim.Adam(model.parameters(), lr=1e-5)
    for step in range(3):
        x = torch.randn(8, 16384, device="cuda")
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"[trainer] step {step} loss {loss.item():.4f} mem {torch.cuda.memory_allocated() >> 20} MiB", flush=True)
