# A small MLP trained on the GPU from a DataLoader with worker processes; knobs pick a fault:
#   SAMPLE_MIB: size of each sample a worker sends through shared memory (a small /dev/shm fills)
#   GROW=1: double the batch every step until the GPU runs out of memory
#   STEPS, WORKERS: how long, how many DataLoader workers
import os

import torch
from torch.utils.data import DataLoader, Dataset

STEPS = int(os.environ.get("STEPS", "20"))
WORKERS = int(os.environ.get("WORKERS", "2"))
SAMPLE = int(float(os.environ.get("SAMPLE_MIB", "0.004")) * (1 << 20) / 4)


class Noise(Dataset):
    def __len__(self):
        return 1 << 16

    def __getitem__(self, i):
        return torch.randn(max(SAMPLE, 1024))


print(f"torch {torch.__version__} cuda {torch.version.cuda} on {torch.cuda.get_device_name(0)}", flush=True)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
loader = DataLoader(Noise(), batch_size=8, num_workers=WORKERS)
batch = 1 << 14
for step, x in enumerate(loader):
    x = x[:, :1024].cuda(non_blocking=True)
    if os.environ.get("GROW") == "1":
        x = torch.randn(batch, 1024, device="cuda")
        batch *= 2
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f} batch {x.shape[0]} mem {torch.cuda.memory_allocated() >> 20} MiB", flush=True)
    if step + 1 >= STEPS:
        break
print("training done", flush=True)
