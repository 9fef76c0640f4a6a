# A classifier trained with a hand-written focal loss, -(1 - p)^gamma * log(p) with p = softmax(logits)[target],
# run for its first steps under torch.autograd.detect_anomaly (the new loss is being debugged). One batch (step 17)
# holds unnormalized features (a preprocessing slip, values x 1e4): p underflows to 0 for some rows, log(0) = -inf,
# and the backward pass makes NaN; anomaly mode raises "Function ... returned nan values" (with its warning and the
# forward traceback).
#   default: the trainer logs the error (ERROR, traceback), switches the loss to the log_softmax form (finite for
#     any logits), redoes the step on the same batch and trains on; anomaly mode is turned off at step 40; a JSON
#     summary line at the end; healthy
#   FIX=0: no fallback, the RuntimeError ends the run
#   STEPS (120), DEVICE (cuda; cpu for a dry run)
import json
import logging
import os
import time

import torch
import torch.nn.functional as F

logging.basicConfig(level=logging.INFO, format="%(asctime)s - %(levelname)s - %(name)s - %(message)s")
log = logging.getLogger("train.focal")
dev = torch.device(os.environ.get("DEVICE", "cuda"))
steps = int(os.environ.get("STEPS", "120"))
fix = os.environ.get("FIX", "1") == "1"
GAMMA = 2.0


def focal_naive(logits, y):
    p = torch.softmax(logits, dim=-1).gather(1, y[:, None]).squeeze(1)
    return (-(1 - p) ** GAMMA * torch.log(p)).mean()


def focal_stable(logits, y):
    logp = F.log_softmax(logits, dim=-1).gather(1, y[:, None]).squeeze(1)
    return (-(1 - logp.exp()) ** GAMMA * logp).mean()


def main():
    torch.manual_seed(0)
    w = torch.randn(64, 20)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 20)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    loss_fn, nan_events, anomaly = focal_naive, 0, True
    log.info("focal loss (gamma=%.1f), naive form; anomaly detection on for the first 40 steps", GAMMA)
    torch.autograd.set_detect_anomaly(True)
    t0 = time.time()
    for step in range(1, steps + 1):
        x = torch.randn(512, 64)
        y = (x @ w).argmax(1)
        if step == 17:
            x = x * 1e4  # this shard's features were written unnormalized
        x, y = x.to(dev), y.to(dev)
        for attempt in range(2):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            try:
                loss.backward()
                break
            except RuntimeError as e:
                if "nan values" not in str(e) or not fix or attempt:
                    raise
                nan_events += 1
                log.error("step %d: non-finite gradient (loss %s) caught by anomaly detection", step, loss.item(),
                          exc_info=True)
                log.warning("switching the focal loss to the log_softmax form and redoing step %d", step)
                loss_fn = focal_stable
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step == 40 and anomaly:
            torch.autograd.set_detect_anomaly(False)
            anomaly = False
            log.info("anomaly detection off from step 40 (it slows every backward)")
        if step % 20 == 0 or step == 17:
            log.info("step %d/%d loss %.4f grad_norm %.3f", step, steps, loss.item(), gnorm.item())
    print(json.dumps({"status": "finished", "steps": steps, "final_loss": round(loss.item(), 4),
                      "nan_events": nan_events, "loss_form": loss_fn.__name__,
                      "seconds": round(time.time() - t0, 1)}), flush=True)


if __name__ == "__main__":
    main()
