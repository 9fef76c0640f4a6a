# The Python half of a batch job with a chatty prolog (the shell half, in the case's command, prints ulimit -a,
# nvidia-smi and the environment): an environment report (torch, CUDA, cuDNN, NCCL, the device, CUDA_*/NCCL_*/
# library-path variables), then an MLP of 16.8 M parameters trained STEPS steps with a checkpoint (about 200 MiB
# with the optimizer state) every CKPT_EVERY steps, written to a temporary file and renamed. Ends with
# "job finished OK". Whatever the environment gets wrong shows at the first CUDA use or the first checkpoint.
#   STEPS, CKPT_EVERY, DEVICE (cuda; cpu for a dry run)
import os
import platform
import sys
import time

import torch

dev = torch.device(os.environ.get("DEVICE", "cuda"))
STEPS, EVERY = int(os.environ.get("STEPS", "40")), int(os.environ.get("CKPT_EVERY", "20"))

print("=" * 30 + " environment report " + "=" * 30, flush=True)
print(f"python {platform.python_version()} ({sys.executable}), torch {torch.__version__}, built for CUDA "
      f"{torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}", flush=True)
try:
    print(f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}", flush=True)
except Exception as e:  # a build without NCCL
    print(f"NCCL: {e}", flush=True)
print(f"cuda available: {torch.cuda.is_available()}, device count {torch.cuda.device_count()}", flush=True)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"device 0: {p.name}, capability {p.major}.{p.minor}, {p.total_memory / 2**30:.1f} GiB, "
          f"{p.multi_processor_count} SMs", flush=True)
for k in sorted(os.environ):
    if k.startswith(("CUDA_", "NCCL_", "TORCH_", "PYTORCH_")) or k in ("LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH"):
        print(f"  {k}={os.environ[k]}", flush=True)
print("=" * 80, flush=True)

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 2048)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
os.makedirs("job-ckpt", exist_ok=True)
t0 = time.time()
for step in range(1, STEPS + 1):
    x = torch.randn(256, 2048, device=dev)
    loss = torch.nn.functional.mse_loss(model(x), x)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if step % 10 == 0:
        print(f"step {step}/{STEPS} loss {loss.item():.5f} ({time.time() - t0:.1f} s)", flush=True)
    if step % EVERY == 0:
        path = f"job-ckpt/step-{step:06d}.pt"
        with open(path + ".tmp", "wb") as f:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, f)
        os.replace(path + ".tmp", path)
        print(f"checkpoint {path} ({os.path.getsize(path) / 2**20:.0f} MiB)", flush=True)
print(f"job finished OK: {STEPS} steps in {time.time() - t0:.1f} s, final loss {loss.item():.5f}", flush=True)
