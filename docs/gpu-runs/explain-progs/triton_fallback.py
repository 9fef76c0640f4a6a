# An inference server's warm-up: a fused RMSNorm written in Triton is compiled for each hidden size the served
# models use, with the block size from a tuning table. The table's entry for hidden size 5120 is the size itself,
# not a power of two, and Triton refuses to compile tl.arange(0, 5120) (CompilationError, logged with its
# traceback); that size is compiled again with the next power of two. If Triton cannot be used at all (not
# installed, no C compiler for its launcher, ...) every size falls back to the PyTorch RMSNorm. Each kernel is
# checked against the PyTorch one, then WARMUP_BATCHES batches are served. Healthy.
#   DEVICE (cuda; cpu for a dry run: every size falls back)
import logging
import os
import time

import torch

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(asctime)s [warmup] %(message)s")
log = logging.getLogger("server.warmup")
dev = torch.device(os.environ.get("DEVICE", "cuda"))
TUNING = {4096: 4096, 5120: 5120, 8192: 8192}  # hidden size -> BLOCK, from an older tuning run


def torch_rmsnorm(x, w, eps=1e-6):
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


try:
    import triton
    import triton.language as tl

    @triton.jit
    def rmsnorm_kernel(X, W, Y, stride, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        var = tl.sum(x * x, axis=0) / N
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        y = x * (1.0 / tl.sqrt(var + eps)) * w
        tl.store(Y + row * stride + cols, y.to(Y.dtype.element_ty), mask=mask)

    def triton_rmsnorm(x, w, block, eps=1e-6):
        y = torch.empty_like(x)
        rmsnorm_kernel[(x.shape[0],)](x, w, y, x.stride(0), x.shape[1], eps, BLOCK=block,
                                      num_warps=8 if block >= 4096 else 4)
        return y

    log.info("triton %s available", triton.__version__)
except Exception:
    log.warning("Triton is not usable here; fused kernels disabled", exc_info=True)
    triton = None

kernels = {}
for hidden, block in TUNING.items():
    x = torch.randn(512, hidden, device=dev, dtype=torch.bfloat16)
    w = torch.rand(hidden, device=dev, dtype=torch.bfloat16) + 0.5
    ref = torch_rmsnorm(x, w)
    if triton is None or dev.type != "cuda":
        kernels[hidden] = ("torch", None)
        continue
    for attempt, b in enumerate((block, triton.next_power_of_2(hidden))):
        if attempt == 1 and b == block:
            break
        t0 = time.time()
        try:
            y = triton_rmsnorm(x, w, b)
            torch.cuda.synchronize()
        except Exception:
            log.error("rmsnorm hidden=%d BLOCK=%d: compilation failed", hidden, b, exc_info=True)
            continue
        err = (y.float() - ref.float()).abs().max().item()
        log.info("rmsnorm hidden=%d BLOCK=%d: compiled in %.2f s, max abs error %.3e", hidden, b, time.time() - t0, err)
        if err < 5e-2:
            kernels[hidden] = ("triton", b)
            break
    if hidden not in kernels:
        log.warning("rmsnorm hidden=%d: no Triton kernel, using the PyTorch implementation", hidden)
        kernels[hidden] = ("torch", None)
print("hidden  kernel  BLOCK", flush=True)
for hidden, (kind, b) in kernels.items():
    print(f"{hidden:6d}  {kind:6s}  {b or '-'}", flush=True)

t0, n = time.time(), int(os.environ.get("WARMUP_BATCHES", "200"))
for i in range(n):
    hidden = list(TUNING)[i % len(TUNING)]
    x = torch.randn(64, hidden, device=dev, dtype=torch.bfloat16)
    w = torch.ones(hidden, device=dev, dtype=torch.bfloat16)
    kind, b = kernels[hidden]
    y = triton_rmsnorm(x, w, b) if kind == "triton" else torch_rmsnorm(x, w)
if dev.type == "cuda":
    torch.cuda.synchronize()
log.info("served %d warm-up batches in %.2f s", n, time.time() - t0)
log.info("warm-up complete: %d RMSNorm kernels ready (%d Triton), server ready", len(kernels),
         sum(k == "triton" for k, _ in kernels.values()))
