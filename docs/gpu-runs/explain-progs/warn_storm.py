# A fine-tuning script that prints the warnings such scripts print and trains on: a deprecated AMP entry point,
# a DataLoader with more workers than CPUs, heads missing from the checkpoint ("newly initialized"), a loss with a
# broadcast target, a tensor copy-constructed, the scheduler stepped before the optimizer.
import logging
import os
import warnings

import torch
from torch.utils.data import DataLoader, TensorDataset

logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
log = logging.getLogger("finetune")
warnings.simplefilter("default")
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
        self.score = torch.nn.Linear(256, 1)
        self.value = torch.nn.Linear(256, 1)

    def forward(self, x):
        h = self.body(x)
        return self.score(h) + 0 * self.value(h)


base = {f"body.{k}": v for k, v in torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                                       torch.nn.Linear(1024, 256)).state_dict().items()}
base["lm_head.weight"] = torch.zeros(8, 256)
model = Policy()
res = model.load_state_dict(base, strict=False)
if res.missing_keys:
    log.warning("Some weights of Policy were not initialized from the model checkpoint at ckpt/base and are newly "
                "initialized: %s\nYou should probably TRAIN this model on a down-stream task to be able to use it "
                "for predictions and inference.", res.missing_keys)
if res.unexpected_keys:
    log.warning("Some weights of the model checkpoint at ckpt/base were not used when initializing Policy: %s", res.unexpected_keys)
model = model.cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=10)
scaler = torch.cuda.amp.GradScaler()
cpus = len(os.sched_getaffinity(0))
data = TensorDataset(torch.randn(2048, 256), torch.randn(2048))
loader = DataLoader(data, batch_size=64, shuffle=True, num_workers=min(cpus + 4, 40), persistent_workers=False)
sched.step()
for step, (x, y) in enumerate(loader):
    x, y = x.cuda(), torch.tensor(y).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x)
    loss = torch.nn.functional.mse_loss(out.float(), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
    sched.step()
    if step % 8 == 0:
        log.info("step %d loss %.4f lr %.2e", step, loss.item(), sched.get_last_lr()[0])
os.makedirs("out", exist_ok=True)
torch.save(model.state_dict(), "out/policy.pt")
log.info("saved out/policy.pt")
