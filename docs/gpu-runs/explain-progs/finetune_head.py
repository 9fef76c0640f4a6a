# Fine-tuning a pretrained image backbone (a 1000-class checkpoint) on a 10-class task. load_state_dict(strict=True)
# fails on the classifier head's shape; the script logs the error with its traceback, drops the head's keys and loads
# the rest with strict=False (the head starts fresh), then trains 3 epochs and prints a metrics table. Healthy.
# Knobs: STRICT=1: the older script without the fallback (the size mismatch propagates); EPOCHS; CKPT.
import logging
import os
import time

import torch

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
log = logging.getLogger("finetune")
CKPT = os.environ.get("CKPT", "backbone-in1k.pt")


class Classifier(torch.nn.Module):
    def __init__(self, classes):
        super().__init__()
        c = [3, 32, 64, 128, 256]
        self.features = torch.nn.Sequential(*[torch.nn.Sequential(
            torch.nn.Conv2d(c[i], c[i + 1], 3, padding=1, bias=False), torch.nn.BatchNorm2d(c[i + 1]), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2) if i < 3 else torch.nn.AdaptiveAvgPool2d(1)) for i in range(4)])
        self.head = torch.nn.Linear(256, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    x = torch.randn(n, 3, 32, 32, generator=g) * 0.6
    for k in range(10):
        x[y == k, k % 3, (k * 3):(k * 3) + 4, :] += 0.5
    return x.cuda(), y.cuda()


if not os.path.exists(CKPT):  # the pretraining run's export (made here when absent: same shapes)
    torch.manual_seed(123)
    torch.save({"model": Classifier(1000).state_dict(), "epoch": 90, "arch": "convnet4"}, CKPT)
torch.manual_seed(0)
model = Classifier(10)
state = torch.load(CKPT, map_location="cpu")["model"]
log.info("loading pretrained weights from %s (%d tensors)", CKPT, len(state))
if os.environ.get("STRICT") == "1":
    model.load_state_dict(state)
else:
    try:
        model.load_state_dict(state)
    except RuntimeError:
        log.exception("pretrained checkpoint does not match the model; retrying without the classifier head")
        own = model.state_dict()
        keep = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
        result = model.load_state_dict(keep, strict=False)
        log.warning("loaded %d/%d tensors with strict=False: %s", len(keep), len(state), result)
model = model.cuda()
xt, yt = data(6000, 1)
xv, yv = data(1000, 2)
opt = torch.optim.SGD([{"params": model.features.parameters(), "lr": 0.01},
                       {"params": model.head.parameters(), "lr": 0.1}], momentum=0.9)
print("| epoch | train_loss | train_acc | val_loss | val_acc | lr_head | time  |")
print("|-------|------------|-----------|----------|---------|---------|-------|", flush=True)
best = (0.0, 0)
epochs = int(os.environ.get("EPOCHS", "3"))
for epoch in range(1, epochs + 1):
    t0, tl, tr = time.time(), 0.0, 0
    model.train()
    perm = torch.randperm(len(xt), device="cuda")
    for i in range(0, len(xt), 100):
        idx = perm[i:i + 100]
        out = model(xt[idx])
        loss = torch.nn.functional.cross_entropy(out, yt[idx])
        loss.backward()
        opt.step()
        opt.zero_grad()
        tl += loss.item() * len(idx)
        tr += (out.argmax(1) == yt[idx]).sum().item()
    model.eval()
    with torch.no_grad():
        out = model(xv)
        vl = torch.nn.functional.cross_entropy(out, yv).item()
        va = (out.argmax(1) == yv).float().mean().item()
    best = max(best, (va, epoch))
    print(f"| {epoch:<5} | {tl / len(xt):<10.4f} | {tr / len(xt):<9.4f} | {vl:<8.4f} | {va:<7.4f} | "
          f"{opt.param_groups[1]['lr']:<7.3f} | {time.time() - t0:<5.1f} |", flush=True)
    for gr in opt.param_groups:
        gr["lr"] *= 0.5
torch.save(model.state_dict(), "finetuned-cls10.pt")
print(f"best val_acc {best[0]:.4f} at epoch {best[1]}; exported finetuned-cls10.pt", flush=True)
