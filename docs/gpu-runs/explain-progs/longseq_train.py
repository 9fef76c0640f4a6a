# A one-layer attention LM trained on length-bucketed batches (attention written out: fp32 scores of shape
# (batch, heads, seq, seq)). Most batches are 64 x 512 tokens; at step LONG_AT the sampler hands out a bucket of
# LONG_BATCH documents of LONG_SEQ tokens whose score matrix needs about 256 GiB, more than any GPU has.
#   SPLIT=1 (default): the step catches torch.OutOfMemoryError, logs it with its traceback and the allocator's
#     memory summary, frees the step and redoes that batch as micro-batches of MICRO documents with gradient
#     accumulation, then trains on (healthy)
#   SPLIT=0: no such fallback; the OutOfMemoryError ends the run
#   STEPS, LONG_AT, LONG_BATCH, LONG_SEQ, MICRO, DEVICE (cuda; cpu with small LONG_* for a dry run)
import logging
import math
import os
import time

import torch
import torch.nn.functional as F

logging.basicConfig(level=logging.INFO, format="%(asctime)s | %(levelname)s | %(name)s | %(message)s")
log = logging.getLogger("train.longseq")
dev = torch.device(os.environ.get("DEVICE", "cuda"))
STEPS, LONG_AT = int(os.environ.get("STEPS", "14")), int(os.environ.get("LONG_AT", "6"))
LONG_BATCH, LONG_SEQ = int(os.environ.get("LONG_BATCH", "128")), int(os.environ.get("LONG_SEQ", "8192"))
MICRO = int(os.environ.get("MICRO", "2"))
VOCAB, D, H = 8192, 512, 8


class AttnLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, D)
        self.qkv = torch.nn.Linear(D, 3 * D)
        self.proj = torch.nn.Linear(D, D)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(D, 4 * D), torch.nn.GELU(), torch.nn.Linear(4 * D, D))
        self.norm1, self.norm2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
        self.head = torch.nn.Linear(D, VOCAB, bias=False)

    def forward(self, tok):
        b, t = tok.shape
        x = self.emb(tok)
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D // H)
        causal = torch.ones(t, t, dtype=torch.bool, device=tok.device).triu(1)
        attn = scores.masked_fill(causal, float("-inf")).softmax(dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, t, D))
        x = x + self.mlp(self.norm2(x))
        return self.head(x)


def batch(step):
    g = torch.Generator().manual_seed(step)
    b, t = (LONG_BATCH, LONG_SEQ) if step == LONG_AT else (64, 512)
    return torch.randint(0, VOCAB, (b, t + 1), generator=g)


def loss_of(model, tok, scale=1.0):
    tok = tok.to(dev, non_blocking=True)
    logits = model(tok[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), tok[:, 1:].reshape(-1))
    (loss * scale).backward()
    return loss.item()


torch.manual_seed(0)
model = AttnLM().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
log.info("model %.1f M parameters on %s; %d steps, buckets 512 and %d tokens", sum(p.numel() for p in model.parameters()) / 1e6,
         name, STEPS, LONG_SEQ)
t0 = time.time()
for step in range(STEPS):
    tok = batch(step)
    ntok = tok[:, :-1].numel()
    retry = False
    if os.environ.get("SPLIT", "1") == "1":
        try:
            loss = loss_of(model, tok)
        except torch.OutOfMemoryError:
            log.exception("step %d: out of memory on a %d x %d batch (%d tokens)", step, tok.shape[0], tok.shape[1] - 1, ntok)
            retry = True
    else:
        loss = loss_of(model, tok)
    if retry:
        opt.zero_grad(set_to_none=True)
        if dev.type == "cuda":
            print(torch.cuda.memory_summary(dev, abbreviated=True), flush=True)
            torch.cuda.empty_cache()
        parts = tok.split(MICRO)
        log.warning("step %d: retrying the batch as %d micro-batches of %d with gradient accumulation", step, len(parts), MICRO)
        loss = sum(loss_of(model, p, scale=p.shape[0] / tok.shape[0]) * p.shape[0] for p in parts) / tok.shape[0]
        if dev.type == "cuda":
            log.info("step %d: micro-batches done, peak allocated %.1f GiB", step, torch.cuda.max_memory_allocated(dev) / 2**30)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    log.info("step %3d | tokens %8d | loss %.4f | grad_norm %.3f | %.1f s", step, ntok, loss, norm.item(), time.time() - t0)
log.info("training finished: %d steps, final loss %.4f", STEPS, loss)
