# An image classifier trained Keras-style (one line per epoch with validation metrics) from a DataLoader whose
# workers decode samples on the CPU. Knobs: EPOCHS, WORKERS, DECODE_MS (CPU time per sample); PIDFILE: each worker
# appends its pid there when it starts (the job's resource monitor reads it).
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset

EPOCHS, WORKERS = int(os.environ.get("EPOCHS", "3")), int(os.environ.get("WORKERS", "4"))
DECODE = float(os.environ.get("DECODE_MS", "0")) / 1000


class Images(Dataset):
    def __init__(self, n, seed):
        self.n, self.seed = n, seed

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if DECODE:
            time.sleep(DECODE)
        g = torch.Generator().manual_seed(self.seed * 100003 + i)
        y = i % 10
        x = torch.randn(3, 32, 32, generator=g) * 0.5
        x[y % 3, :, y * 3:(y * 3) + 3] += 2.0
        return x, y


def register(_):
    if os.environ.get("PIDFILE"):
        with open(os.environ["PIDFILE"], "a") as f:
            f.write(f"{os.getpid()}\n")


model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                            torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                            torch.nn.Flatten(), torch.nn.Linear(64, 10)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
train = DataLoader(Images(7680, 1), batch_size=64, shuffle=True, num_workers=WORKERS, worker_init_fn=register,
                   persistent_workers=WORKERS > 0)
val = DataLoader(Images(1280, 2), batch_size=256, num_workers=0)
print(f"Model: conv classifier, {sum(p.numel() for p in model.parameters())} params, on {torch.cuda.get_device_name(0)}", flush=True)
for epoch in range(1, EPOCHS + 1):
    t0, tot, right, seen = time.time(), 0.0, 0, 0
    model.train()
    for x, y in train:
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        tot += loss.item() * len(y)
        right += (out.argmax(1) == y).sum().item()
        seen += len(y)
    model.eval()
    vl = vr = 0.0
    with torch.no_grad():
        for x, y in val:
            out = model(x.cuda())
            vl += torch.nn.functional.cross_entropy(out, y.cuda(), reduction="sum").item()
            vr += (out.argmax(1) == y.cuda()).sum().item()
    el = time.time() - t0
    print(f"Epoch {epoch}/{EPOCHS}\n{len(train)}/{len(train)} - {el:.0f}s {el * 1000 / len(train):.0f}ms/step - "
          f"accuracy: {right / seen:.4f} - loss: {tot / seen:.4f} - val_accuracy: {vr / 1280:.4f} - "
          f"val_loss: {vl / 1280:.4f}", flush=True)
print("Training finished.", flush=True)
