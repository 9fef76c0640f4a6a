# Resume from the newest checkpoint in CKPT_DIR, trying older ones when one does not load. The folder is made
# first, as an earlier job left it: step 100; step 200 saved by a two-GPU job from cuda:1; step 300 cut short
# mid-write. A checkpoint whose storages name a missing GPU is loaded again with map_location.
import glob
import logging
import os

import torch

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
log = logging.getLogger("checkpoint")
d = os.environ.get("CKPT_DIR", "ckpts")
os.makedirs(d, exist_ok=True)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)


def state(step):
    return {"model": model.state_dict(), "opt": opt.state_dict(), "step": step}


model(torch.randn(4, 512, device="cuda")).sum().backward()
opt.step()
torch.save(state(100), f"{d}/step_100.pt")
as_cuda1 = (5, lambda s: "cuda:1" if s.device.type == "cuda" else None, lambda s, loc: None)
torch.serialization.register_package(*as_cuda1)
torch.save(state(200), f"{d}/step_200.pt")
torch.serialization._package_registry.remove(as_cuda1)
torch.save(state(300), f"{d}/step_300.pt")
with open(f"{d}/step_300.pt", "r+b") as f:
    f.truncate(os.path.getsize(f"{d}/step_300.pt") // 2)

print(f"torch {torch.__version__}; resuming from {d}", flush=True)
found = None
for path in sorted(glob.glob(f"{d}/step_*.pt"), key=lambda p: int(p.split("_")[-1][:-3]), reverse=True):
    try:
        found = torch.load(path)
    except Exception as e:
        log.exception("could not load %s", path)
        if "map_location" in str(e):
            log.warning("loading %s again with map_location='cuda:0'", path)
            found = torch.load(path, map_location="cuda:0")
    if found is not None:
        break
model.load_state_dict(found["model"])
opt.load_state_dict(found["opt"])
step = found["step"]
log.info("resumed from %s at step %d", path, step)
for step in range(step + 1, step + 11):
    x = torch.randn(64, 512, device="cuda")
    loss = (model(x) - x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step} loss {loss.item():.5f}", flush=True)
torch.save(state(step), f"{d}/step_{step}.pt")
log.info("saved %s/step_%d.pt", d, step)
