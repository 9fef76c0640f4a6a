# A Trainer-style fine-tune resumed from the last checkpoint of an earlier job. The script first lays out that
# earlier job's output folder (as the job left it): checkpoint-200/ with the model weights and trainer_state.json,
# saved with save_only_model, so no optimizer.pt, scheduler.pt or rng_state.pth.
#   default: resuming, the optimizer and scheduler states are not there (FileNotFoundError, logged with its
#     traceback, fresh states), nor the RNG file (the Trainer's warning); 100 more steps, checkpoint-300, healthy
#   OPTIM_MISMATCH=1: the earlier job did save optimizer.pt, built with two parameter groups (weight decay and none);
#     this code builds one group, and the optimizer's load_state_dict raises
#   numpy is optional (the RNG state is saved with it where it is installed), as an absent package; any other
#   ImportError propagates
#   DEVICE (cuda; cpu for a dry run)
import json
import logging
import os
import random
import shutil
import time

import torch

try:
    import numpy as np
except ModuleNotFoundError:
    np = None

logging.basicConfig(level=logging.INFO, format="[%(levelname)s|%(name)s:%(lineno)d] %(asctime)s >> %(message)s")
log = logging.getLogger("transformers.trainer")
dev = torch.device(os.environ.get("DEVICE", "cuda"))
OUT = "hf-out"
PREV = f"{OUT}/checkpoint-200"


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(4096, 512), torch.nn.LayerNorm(512), torch.nn.Linear(512, 1024),
                               torch.nn.GELU(), torch.nn.Linear(1024, 512), torch.nn.LayerNorm(512),
                               torch.nn.Linear(512, 4096))


def param_groups(model, wd):
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def earlier_job():
    """The output folder an earlier job left (made here, before the resume)."""
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(PREV)
    model = make_model()
    torch.save(model.state_dict(), f"{PREV}/pytorch_model.bin")
    state = {"global_step": 200, "epoch": 0.4, "max_steps": 300, "log_history": [{"loss": 4.1, "step": 200}],
             "best_model_checkpoint": None, "trial_name": None}
    with open(f"{PREV}/trainer_state.json", "w") as f:
        json.dump(state, f, indent=2)
    if os.environ.get("OPTIM_MISMATCH") == "1":
        opt = torch.optim.AdamW(param_groups(model, 0.01), lr=5e-5)
        model(torch.randint(0, 4096, (2, 8))).sum().backward()
        opt.step()
        torch.save(opt.state_dict(), f"{PREV}/optimizer.pt")


earlier_job()
log.info("Loading model from %s.", PREV)
model = make_model()
model.load_state_dict(torch.load(f"{PREV}/pytorch_model.bin", map_location="cpu"))
model.to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / 300))
with open(f"{PREV}/trainer_state.json") as f:
    state = json.load(f)
try:
    opt.load_state_dict(torch.load(f"{PREV}/optimizer.pt", map_location=dev))
    sched.load_state_dict(torch.load(f"{PREV}/scheduler.pt"))
except FileNotFoundError:
    log.warning("Could not load the optimizer/scheduler states from %s; starting them fresh", PREV, exc_info=True)
    for _ in range(state["global_step"]):
        sched.step()
if not os.path.isfile(f"{PREV}/rng_state.pth"):
    log.info("Didn't find an RNG file, if you are resuming a training that wasn't launched in a distributed fashion, "
             "reproducibility is not guaranteed.")
print("***** Running training *****", flush=True)
print(f"  Num examples = 64,000\n  Num Epochs = 1\n  Instantaneous batch size per device = 32\n"
      f"  Total optimization steps = {state['max_steps']}\n  Number of trainable parameters = "
      f"{sum(p.numel() for p in model.parameters()):,}", flush=True)
print("  Continuing training from checkpoint, will skip to saved global_step", flush=True)
print(f"  Continuing training from epoch 0\n  Continuing training from global step {state['global_step']}", flush=True)
g = torch.Generator().manual_seed(7)
t0 = time.time()
for step in range(state["global_step"] + 1, state["max_steps"] + 1):
    tok = torch.randint(0, 4096, (32, 65), generator=g).to(dev)
    logits = model(tok[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 4096), tok[:, 1:].reshape(-1))
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    if step % 20 == 0:
        print({"loss": round(loss.item(), 4), "grad_norm": round(norm.item(), 4),
               "learning_rate": sched.get_last_lr()[0], "epoch": round(step / 500, 2)}, flush=True)
ck = f"{OUT}/checkpoint-{state['max_steps']}"
os.makedirs(ck)
torch.save(model.state_dict(), f"{ck}/pytorch_model.bin")
torch.save(opt.state_dict(), f"{ck}/optimizer.pt")
torch.save(sched.state_dict(), f"{ck}/scheduler.pt")
rng = {"python": random.getstate(), "cpu": torch.random.get_rng_state()}
if np is not None:
    rng["numpy"] = np.random.get_state()
torch.save(rng, f"{ck}/rng_state.pth")
log.info("Saving model checkpoint to %s", ck)
elapsed = time.time() - t0
print({"train_runtime": round(elapsed, 2), "train_samples_per_second": round(100 * 32 / elapsed, 1),
       "train_steps_per_second": round(100 / elapsed, 2), "train_loss": round(loss.item(), 4), "epoch": 0.6}, flush=True)
print("\n\nTraining completed. Do not forget to share your model on huggingface.co/models =)\n\n", flush=True)
