# A quiet training loop (nothing printed per step, one summary line at the end) with an on-demand checkpoint:
# SIGUSR1 (sent by an operator or the scheduler's --signal) asks for a checkpoint at the next step boundary; the
# run saves it and trains on. READY: a file the loop writes with its pid once it is training.
import os
import signal
import time

import torch

requested = []
signal.signal(signal.SIGUSR1, lambda sig, frame: requested.append(time.time()))
STEPS = int(os.environ.get("STEPS", "1500"))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.Tanh(), torch.nn.Linear(1024, 256)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
os.makedirs("ckpt", exist_ok=True)
t0, saved = time.time(), []
for step in range(STEPS):
    if step == 10 and os.environ.get("READY"):
        with open(os.environ["READY"], "w") as f:
            f.write(str(os.getpid()))
    x = torch.randn(256, 256, device="cuda")
    loss = (model(x) - torch.roll(x, 1, 1)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    time.sleep(0.005)
    if requested:
        requested.clear()
        path = f"ckpt/ondemand-step{step}.pt"
        print(f"signal SIGUSR1 received: saving checkpoint at step {step} to {path}", flush=True)
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, path)
        saved.append(path)
        print(f"checkpoint {path} saved ({os.path.getsize(path) >> 20} MiB); resuming training", flush=True)
print(f"finished {STEPS} steps in {time.time() - t0:.1f} s; final loss {loss.item():.5f}; on-demand checkpoints: "
      f"{', '.join(saved) or 'none'}", flush=True)
