# A DataLoader whose dataset augments samples on the GPU (noise and a random crop made with CUDA ops, returned to the
# CPU for pinning). The config asks for fork workers; after the model is on the GPU the forked workers cannot use
# CUDA ("Cannot re-initialize CUDA in forked subprocess"): the loop logs that error with its traceback and rebuilds
# the loader with spawn workers, which can, and trains silently until a one-line summary. Healthy.
# Knobs: TRANSFORM=lambda: the dataset carries a per-run transform written as a lambda inside main(), which
# spawn workers cannot receive (pickling); WORKERS; STEPS.
import logging
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
log = logging.getLogger("data")


def scale(x):
    return x * 0.5


class GpuAugment(Dataset):
    def __init__(self, n, transform):
        self.n, self.transform = n, transform

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.empty(3, 40, 40, device="cuda")
        g = torch.Generator(device="cuda").manual_seed(i)
        x.normal_(generator=g)
        ox, oy = int(torch.randint(0, 8, (1,), device="cuda", generator=g)), i % 8
        x = self.transform(x[:, oy:oy + 32, ox:ox + 32] + 0.1 * torch.randn(3, 32, 32, device="cuda", generator=g))
        return x.cpu(), i % 10


def main():
    transform = (lambda x: x * 0.5) if os.environ.get("TRANSFORM") == "lambda" else scale
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(64, 10)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ds, workers = GpuAugment(2048, transform), int(os.environ.get("WORKERS", "2"))
    t0, steps, first, last, method = time.time(), 0, None, None, "fork"
    limit = int(os.environ.get("STEPS", "64"))
    while steps < limit:
        try:
            loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=workers, pin_memory=True,
                                multiprocessing_context=method, persistent_workers=False)
            for x, y in loader:
                out = model(x.cuda(non_blocking=True))
                loss = torch.nn.functional.cross_entropy(out, y.cuda())
                loss.backward()
                opt.step()
                opt.zero_grad()
                first = loss.item() if first is None else first
                last = loss.item()
                steps += 1
                if steps >= limit:
                    break
        except RuntimeError as e:
            if method != "fork" or not ("forked subprocess" in str(e) or "initialization error" in str(e)):
                raise
            log.exception("DataLoader workers (%s) failed; rebuilding the loader with the spawn start method", method)
            method = "spawn"
    print(f"train: {steps} steps, loss {first:.4f} -> {last:.4f}, {time.time() - t0:.1f} s, "
          f"{workers} DataLoader workers ({method})", flush=True)


if __name__ == "__main__":
    main()
