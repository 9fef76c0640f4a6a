# A large-vocabulary LM head trained a few steps, then evaluated on EVAL_TOKENS tokens: the eval first runs all
# tokens in one batch and, on torch.OutOfMemoryError, halves the chunk, at most RETRIES times, before it gives up.
import logging
import math
import os

import torch
import torch.nn.functional as F

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
log = logging.getLogger("trainer.eval")
V, H = 131072, 2048
N = int(os.environ.get("EVAL_TOKENS", str(1 << 19)))
RETRIES = int(os.environ.get("RETRIES", "12"))
torch.manual_seed(0)
head = torch.nn.Linear(H, V, bias=False, device="cuda", dtype=torch.bfloat16)
opt = torch.optim.SGD(head.parameters(), lr=1e-2)
for step in range(5):
    x = torch.randn(4096, H, device="cuda", dtype=torch.bfloat16)
    y = torch.randint(V, (4096,), device="cuda")
    loss = F.cross_entropy(head(x).float(), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    log.info("train step %d loss %.4f", step, loss.item())


def evaluate(hidden, labels, chunk):
    total = 0.0
    for s in range(0, hidden.shape[0], chunk):
        logits = head(hidden[s:s + chunk]).float()
        total += F.cross_entropy(logits, labels[s:s + chunk], reduction="sum").item()
        del logits
    return total / hidden.shape[0]


with torch.no_grad():
    hidden = torch.randn(N, H, device="cuda", dtype=torch.bfloat16)
    labels = torch.randint(V, (N,), device="cuda")
    chunk, tries = N, 0
    while True:
        try:
            val = evaluate(hidden, labels, chunk)
            break
        except torch.OutOfMemoryError:
            tries += 1
            if tries > RETRIES:
                log.error("eval still out of memory with chunks of %d tokens after %d retries", chunk, RETRIES)
                raise
            if tries == 1:
                log.exception("eval of %d tokens in one batch ran out of GPU memory; retrying in chunks", N)
            else:
                log.warning("eval chunk of %d tokens still out of memory; halving", chunk)
            chunk //= 2
            torch.cuda.empty_cache()
log.info("eval: %d tokens in chunks of %d, loss %.4f, ppl %.1f, peak %.1f GiB", N, chunk, val, math.exp(val),
         torch.cuda.max_memory_allocated() / 2**30)
