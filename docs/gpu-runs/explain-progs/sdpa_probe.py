# A small causal LM that picks its attention backend at start-up by probing: it asks for the flash kernel
# (sdpa_kernel([FLASH_ATTENTION])) with the model's fp32 activations, which flash attention does not take: torch warns
# why each kernel was not used and raises "No available kernel. Aborting execution." (logged with its traceback;
# with TORCH_SHOW_CPP_STACKTRACES=1 the C++ frames too). The probe then tries bf16, which flash takes, and the
# model trains under bf16 autocast with that backend (healthy).
#   FUSED_LN=1: the model also uses apex's FusedLayerNorm (no fallback), whose extension fused_layer_norm_cuda
#     must import (the case puts an apex install on PYTHONPATH)
#   STEPS, DEVICE (cuda; cpu for a dry run: the math backend)
import logging
import os
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-8s %(name)s: %(message)s")
log = logging.getLogger("lm.attention")
dev = torch.device(os.environ.get("DEVICE", "cuda"))
STEPS = int(os.environ.get("STEPS", "40"))
D, H, T = 768, 12, 1024


def probe():
    """Returns (backend list, dtype) for training."""
    choices = [([SDPBackend.FLASH_ATTENTION], torch.float32), ([SDPBackend.FLASH_ATTENTION], torch.bfloat16),
               ([SDPBackend.EFFICIENT_ATTENTION], torch.float32), ([SDPBackend.MATH], torch.float32)]
    for backends, dtype in choices:
        q = torch.randn(2, H, T, D // H, device=dev, dtype=dtype)
        try:
            with sdpa_kernel(backends):
                F.scaled_dot_product_attention(q, q, q, is_causal=True)
            log.info("attention probe: %s with %s works", backends[0].name, dtype)
            return backends, dtype
        except RuntimeError:
            log.warning("attention probe: %s with %s failed, trying the next choice", backends[0].name, dtype,
                        exc_info=True)
    raise RuntimeError("no attention backend works")


class Block(torch.nn.Module):
    def __init__(self, backends):
        super().__init__()
        self.backends = backends
        if os.environ.get("FUSED_LN") == "1":
            from apex.normalization import FusedLayerNorm
            self.n1, self.n2 = FusedLayerNorm(D), FusedLayerNorm(D)
        else:
            self.n1, self.n2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
        self.qkv, self.o = torch.nn.Linear(D, 3 * D), torch.nn.Linear(D, D)
        self.ff = torch.nn.Sequential(torch.nn.Linear(D, 4 * D), torch.nn.GELU(), torch.nn.Linear(4 * D, D))

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        with sdpa_kernel(self.backends):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        return x + self.ff(self.n2(x))


backends, dtype = probe() if dev.type == "cuda" else ([SDPBackend.MATH], torch.float32)
torch.manual_seed(0)
emb = torch.nn.Embedding(16384, D)
blocks = torch.nn.Sequential(*[Block(backends) for _ in range(4)])
head = torch.nn.Linear(D, 16384, bias=False)
model = torch.nn.Sequential(emb, blocks, head).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=dev.type == "cuda")
log.info("model %.1f M parameters, attention %s, autocast %s", sum(p.numel() for p in model.parameters()) / 1e6,
         backends[0].name, dtype)
g = torch.Generator().manual_seed(5)
t0 = time.time()
for step in range(1, STEPS + 1):
    tok = torch.randint(0, 16384, (8, T + 1), generator=g).to(dev)
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        loss = F.cross_entropy(model(tok[:, :-1]).float().reshape(-1, 16384), tok[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if step % 10 == 0:
        log.info("step %d/%d loss %.4f (%.0f tokens/s)", step, STEPS, loss.item(), step * 8 * T / (time.time() - t0))
log.info("training finished: %d steps, loss %.4f", STEPS, loss.item())
