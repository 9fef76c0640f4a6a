# A DataLoader (2 workers) over shards on a flaky filesystem: reading samples in BAD raises OSError (EIO) in a
# worker; the loop logs it, drops the sample and starts a new iterator (new workers) where it stopped, at most
# MAX_RESTARTS times.
import logging
import os
import re

import torch
from torch.utils.data import DataLoader, Dataset, Subset

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
log = logging.getLogger("data")
BAD = {int(i) for i in os.environ.get("BAD", "37,201").split(",") if i}


class Shards(Dataset):
    def __len__(self):
        return 320

    def __getitem__(self, i):
        if i in BAD:
            raise OSError(5, f"Input/output error reading /data/shards/shard-{i // 64:04d}.bin (sample {i})")
        g = torch.Generator().manual_seed(i)
        return torch.randn(256, generator=g)


model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}", flush=True)
ds, left, restarts, skipped, steps = Shards(), list(range(320)), 0, [], 0
while left:
    done = 0
    try:
        for x in DataLoader(Subset(ds, left), batch_size=8, num_workers=2):
            x = x.cuda()
            loss = (model(x) - x[:, :4].sum(1, keepdim=True)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            done += x.shape[0]
            steps += 1
            if steps % 5 == 0:
                print(f"step {steps} loss {loss.item():.4f}", flush=True)
        left = []
    except OSError as e:
        restarts += 1
        if restarts > int(os.environ.get("MAX_RESTARTS", "3")):
            raise
        bad = int(re.search(r"\(sample (\d+)\)", str(e)).group(1))
        log.exception("data loader failed after %d samples; dropping sample %d, restarting the loader (%d)", done, bad, restarts)
        skipped.append(bad)
        left = [i for i in left[done:] if i != bad]
print(f"epoch 1 done: {steps} steps, {len(skipped)} samples skipped {skipped}, {restarts} loader restarts", flush=True)
