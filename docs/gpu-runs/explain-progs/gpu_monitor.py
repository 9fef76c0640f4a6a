# Training with a GPU monitor thread that polls nvidia-smi every second, as cluster jobs do. Its configured query
# names a field nvidia-smi does not know (memory.used_percent): nvidia-smi refuses it, the monitor logs the error
# and retries without it, then logs one line per poll beside the training log. Healthy. Knobs: STEPS, FIELDS.
import datetime
import logging
import os
import subprocess
import threading
import time

import torch

logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
mlog = logging.getLogger("gpu-monitor")
FIELDS = os.environ.get("FIELDS", "utilization.gpu,memory.used,memory.used_percent,temperature.gpu,power.draw").split(",")


def monitor(stop):
    fields = list(FIELDS)
    while not stop.is_set():
        cmd = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", "-i", "0"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as e:
            mlog.error("nvidia-smi failed (%s: %s); GPU monitoring disabled", type(e).__name__, e)
            return
        if r.returncode != 0:
            msg = (r.stdout + r.stderr).strip()
            mlog.error("`%s` exited with %d: %s", " ".join(cmd), r.returncode, msg)
            bad = [f for f in fields if f'"{f}"' in msg]
            if not bad:
                mlog.error("GPU monitoring disabled")
                return
            fields = [f for f in fields if f not in bad]
            mlog.warning("dropping %s from the query and retrying", ", ".join(bad))
            continue
        vals = dict(zip(fields, [v.strip() for v in r.stdout.strip().split(",")]))
        mlog.info("gpu0 " + " ".join(f"{k}={v}" for k, v in vals.items()))
        stop.wait(1.0)


stop = threading.Event()
th = threading.Thread(target=monitor, args=(stop,), daemon=True, name="gpu-monitor")
th.start()
torch.manual_seed(0)
dims = 4096
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(dims, dims), torch.nn.GELU()) for _ in range(4)],
                            torch.nn.Linear(dims, 16)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
target = torch.nn.Linear(dims, 16).cuda().requires_grad_(False)
steps, t0, best = int(os.environ.get("STEPS", "1500")), time.time(), (float("inf"), 0)
print(f"[{datetime.datetime.now():%Y-%m-%d %H:%M:%S}] training {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M "
      f"params on {torch.cuda.get_device_name(0)}, bf16 autocast, {steps} steps", flush=True)
for step in range(1, steps + 1):
    x = torch.randn(2048, dims, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = (model(x).float() - target(x)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if step % 150 == 0:
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            xv = torch.randn(4096, dims, device="cuda", generator=torch.Generator(device="cuda").manual_seed(5))
            val = (model(xv).float() - target(xv)).pow(2).mean().item()
        best = min(best, (val, step))
        el = time.time() - t0
        print(f"[{datetime.datetime.now():%Y-%m-%d %H:%M:%S}] step {step:5d}/{steps} | loss {loss.item():.4f} | "
              f"val {val:.4f} | {step * 2048 / el:.0f} samples/s", flush=True)
stop.set()
th.join(5)
print(f"Training finished in {time.time() - t0:.1f} s; best val loss {best[0]:.4f} at step {best[1]}", flush=True)
