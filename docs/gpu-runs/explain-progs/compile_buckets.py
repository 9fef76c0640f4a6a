# A small causal LM trained with torch.compile (backend aot_eager by default: no Triton) on batches bucketed by
# length, logging fairseq-style. Compiled with dynamic=False, every new bucket length recompiles (TORCH_LOGS=recompiles
# prints why) until dynamo's recompile limit, then dynamo warns and runs that call eagerly: the run goes on.
# Knobs: BACKEND, RECOMPILE_LIMIT, EPOCHS, LENGTHS (comma list);
#   FULLGRAPH=1 NAN_CHECK=1: compiled with fullgraph=True and a debug check in forward that raises on non-finite
#   activations (data-dependent control flow: dynamo cannot put it in one graph, so the first call raises)
import math
import os
import time

import torch
import torch._dynamo
import torch.nn.functional as F

BACKEND = os.environ.get("BACKEND", "aot_eager")
LIMIT = int(os.environ.get("RECOMPILE_LIMIT", "4"))
LENGTHS = [int(x) for x in os.environ.get("LENGTHS", "128,192,256,320,384,448,512").split(",")]
FULLGRAPH, NAN_CHECK = os.environ.get("FULLGRAPH") == "1", os.environ.get("NAN_CHECK") == "1"
cfg = torch._dynamo.config
setattr(cfg, "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit", LIMIT)


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, h):
        b, t, d = h.shape
        q, k, v = self.qkv(self.ln1(h)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h))))


class LM(torch.nn.Module):
    def __init__(self, vocab=8192, d=256, layers=4, heads=8):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.out = torch.nn.Linear(d, vocab)

    def forward(self, ids):
        h = self.emb(ids)
        for blk in self.blocks:
            h = blk(h)
            if NAN_CHECK and not torch.isfinite(h).all():
                raise FloatingPointError("non-finite activations")
        return self.out(h)


torch.manual_seed(0)
model = LM().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
cmodel = torch.compile(model, backend=BACKEND, dynamic=False, fullgraph=FULLGRAPH)
print(f"| torch {torch.__version__} | device {torch.cuda.get_device_name(0)} | model params "
      f"{sum(p.numel() for p in model.parameters())} | torch.compile backend={BACKEND} dynamic=False "
      f"fullgraph={FULLGRAPH} recompile_limit={LIMIT}", flush=True)
print(f"| training on {len(LENGTHS)} length buckets {LENGTHS}, 16 sequences a batch", flush=True)
g = torch.Generator().manual_seed(1)
start, updates = time.time(), 0
for epoch in range(1, int(os.environ.get("EPOCHS", "2")) + 1):
    order = [LENGTHS[i] for i in torch.randperm(len(LENGTHS), generator=g)] * 2
    t0, tot, words = time.time(), 0.0, 0
    for t in order:
        ids = torch.randint(0, 8192, (16, t + 1), generator=g).cuda()
        logits = cmodel(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        tot += loss.item() * ids[:, 1:].numel()
        words += ids[:, 1:].numel()
        updates += 1
    el = time.time() - t0
    lo = tot / words / math.log(2)
    print(f"| epoch {epoch:03d} | loss {lo:.3f} | ppl {2 ** lo:.2f} | wps {words / el:.0f} | ups {len(order) / el:.1f} "
          f"| wpb {words // len(order)} | bsz 16 | num_updates {updates} | lr 0.0003 | gnorm {gnorm.item():.3f} "
          f"| wall {time.time() - start:.0f}", flush=True)
print(f"| done training in {time.time() - start:.1f} seconds", flush=True)
