# A Lightning-style fit loop (progress bar per epoch, "`Trainer.fit` stopped" at the end) that checkpoints every
# epoch to fast node-local scratch (SCRATCH) and, when that write fails, logs the error and writes the checkpoint to
# the shared fallback folder instead.
import logging
import os
import sys
import time

import torch

logging.basicConfig(level=logging.INFO, format="%(levelname)s:%(name)s:%(message)s")
log = logging.getLogger("lightning.pytorch.callbacks.model_checkpoint")
SCRATCH, FALLBACK = os.environ.get("SCRATCH", "scratch"), os.environ.get("FALLBACK", "ckpt-fallback")
EPOCHS, BATCHES = int(os.environ.get("EPOCHS", "3")), 50
print("GPU available: True (cuda), used: True\nTPU available: False, using: 0 TPU cores\n"
      "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0]", flush=True)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
n = sum(p.numel() for p in model.parameters())
print(f"\n  | Name  | Type       | Params\n--------------------------------------\n0 | model | Sequential | {n / 1e6:.1f} M"
      f"\n--------------------------------------\n{n / 1e6:.1f} M     Trainable params\n", flush=True)
for epoch in range(EPOCHS):
    t0 = time.time()
    for b in range(1, BATCHES + 1):
        x = torch.randn(128, 512, device="cuda")
        y = (x[:, :10] * 3).argmax(1)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if b % 10 == 0 or b == BATCHES:
            el = time.time() - t0
            sys.stderr.write(f"\rEpoch {epoch}: {100 * b // BATCHES:3d}%|{'█' * (b // 5)}{' ' * (10 - b // 5)}| "
                             f"{b}/{BATCHES} [00:{int(el):02d}<00:00, {b / el:.2f}it/s, v_num=0, train_loss={loss.item():.3f}]")
    sys.stderr.write("\n")
    name = f"epoch={epoch}-step={(epoch + 1) * BATCHES}.ckpt"
    state = {"epoch": epoch, "state_dict": model.state_dict(), "optimizer_states": [opt.state_dict()]}
    try:
        os.makedirs(SCRATCH, exist_ok=True)
        torch.save(state, os.path.join(SCRATCH, name))
        log.info("Epoch %d, global step %d: checkpoint saved to %s", epoch, (epoch + 1) * BATCHES, os.path.join(SCRATCH, name))
    except Exception:
        log.exception("could not write checkpoint %s to node-local scratch %s", name, SCRATCH)
        try:
            os.remove(os.path.join(SCRATCH, name))
        except OSError:
            pass
        os.makedirs(FALLBACK, exist_ok=True)
        torch.save(state, os.path.join(FALLBACK, name))
        log.warning("Epoch %d: checkpoint saved to fallback %s instead", epoch, os.path.join(FALLBACK, name))
print(f"`Trainer.fit` stopped: `max_epochs={EPOCHS}` reached.", flush=True)
