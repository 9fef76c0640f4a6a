# A small causal LM fine-tuned with a tqdm-style progress bar. Optional fast kernels are tried first, as training
# scripts do (flash_attn, apex, Transformer Engine); each one missing is logged and a fallback used. Knobs:
#   ATTN_IMPL: auto (flash_attn when it imports, else eager) or eager; SEQ, BATCH, HEADS, STEPS
import logging
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

logging.basicConfig(level=logging.INFO, format="%(asctime)s - %(levelname)s - %(name)s - %(message)s")
log = logging.getLogger("train_lm")
SEQ, BATCH = int(os.environ.get("SEQ", "2048")), int(os.environ.get("BATCH", "4"))
HEADS, STEPS, HD = int(os.environ.get("HEADS", "16")), int(os.environ.get("STEPS", "30")), 64
impl = os.environ.get("ATTN_IMPL", "auto")
flash = None
if impl == "auto":
    try:
        from flash_attn import flash_attn_func as flash
        impl = "flash_attention_2"
    except Exception:
        log.warning("flash_attn could not be imported; falling back to attn_implementation='eager'", exc_info=True)
        impl = "eager"
try:
    from apex.optimizers import FusedAdam as Adam
    log.info("using apex FusedAdam")
except Exception as e:
    log.warning("apex is not installed (%s: %s); using torch.optim.AdamW(fused=True)", type(e).__name__, e)
    Adam = None
try:
    import transformer_engine.pytorch  # noqa: F401
    log.info("Transformer Engine found: FP8 available")
except Exception as e:
    log.warning("Transformer Engine not available (%s: %s): FP8 training disabled, using bf16 autocast", type(e).__name__, e)
log.info("torch %s on %s; attn_implementation=%s seq_len=%d batch=%d heads=%d", torch.__version__,
         torch.cuda.get_device_name(0), impl, SEQ, BATCH, HEADS)


class Block(torch.nn.Module):
    def __init__(self, h):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(h), torch.nn.LayerNorm(h)
        self.qkv, self.proj = torch.nn.Linear(h, 3 * h), torch.nn.Linear(h, h)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(h, 4 * h), torch.nn.GELU(), torch.nn.Linear(4 * h, h))

    def attend(self, q, k, v):
        if flash is not None:
            return flash(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(HD)  # eager attention: (batch, heads, seq, seq)
        causal = torch.ones(q.shape[2], q.shape[2], dtype=torch.bool, device=q.device).triu(1)
        return scores.masked_fill(causal, float("-inf")).softmax(-1) @ v

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        x = x + self.proj(self.attend(q, k, v).transpose(1, 2).reshape(b, s, h))
        return x + self.mlp(self.norm2(x))


V, H = 32000, HEADS * HD
model = torch.nn.Sequential(torch.nn.Embedding(V, H), Block(H), Block(H), torch.nn.LayerNorm(H),
                            torch.nn.Linear(H, V, bias=False)).cuda()
opt = Adam(model.parameters(), lr=2e-4) if Adam else torch.optim.AdamW(model.parameters(), lr=2e-4, fused=True)
t0 = time.time()
for step in range(1, STEPS + 1):
    ids = torch.randint(V, (BATCH, SEQ + 1), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    el = time.time() - t0
    done = int(30 * step / STEPS)
    sys.stderr.write(f"\rtrain: {100 * step // STEPS:3d}%|{'█' * done}{' ' * (30 - done)}| {step}/{STEPS} "
                     f"[{int(el) // 60:02d}:{int(el) % 60:02d}<{int(el / step * (STEPS - step)):02d}s, "
                     f"{step / el:.2f}it/s, loss={loss.item():.3f}]")
    sys.stderr.flush()
sys.stderr.write("\n")
os.makedirs("out/tiny-lm", exist_ok=True)
torch.save(model.state_dict(), "out/tiny-lm/pytorch_model.bin")
print(f"Saved model to out/tiny-lm ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters)", flush=True)
