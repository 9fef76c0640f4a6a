# An inference service's start-up probe of its GEMM recipes: it tries, in order of preference, MXFP8 (e4m3 blocks of
# 32 with e8m0 scales, a Blackwell-class recipe), FP8 with row-wise scales, FP8 with one scale per tensor, and bf16.
# Each recipe is checked against a bf16 reference and timed; one this GPU or torch build cannot run is logged with
# its traceback and skipped (on an H100/H200 the MXFP8 try fails). The fastest recipe that passes serves 300
# batches; a table and "server ready". Always healthy (bf16 is the last resort).
#   M, N, K (8192 each), DEVICE (cuda; cpu for a dry run, sizes 256)
import logging
import os
import time
import traceback

import torch

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(asctime)s %(name)s] %(message)s")
log = logging.getLogger("server.gemm_probe")
dev = torch.device(os.environ.get("DEVICE", "cuda"))
default = "8192" if dev.type == "cuda" else "256"
M, N, K = (int(os.environ.get(k, default)) for k in ("M", "N", "K"))
E4M3 = torch.float8_e4m3fn
FMAX = torch.finfo(E4M3).max


def quant(t, scale):
    return (t / scale).clamp(-FMAX, FMAX).to(E4M3)


def recipe_mxfp8(a, w):
    e8m0 = getattr(torch, "float8_e8m0fnu")
    sa = torch.ones(M, K // 32, device=dev).to(e8m0)
    sb = torch.ones(N, K // 32, device=dev).to(e8m0)
    return lambda: torch._scaled_mm(a.to(E4M3), w.to(E4M3).t(), sa, sb, out_dtype=torch.bfloat16)


def recipe_rowwise(a, w):
    sa = (a.abs().amax(1, keepdim=True).float() / FMAX).clamp(min=1e-12)
    sb = (w.abs().amax(1, keepdim=True).float() / FMAX).clamp(min=1e-12)
    qa, qw = quant(a, sa), quant(w, sb)
    return lambda: torch._scaled_mm(qa, qw.t(), sa, sb.t(), out_dtype=torch.bfloat16)


def recipe_tensorwise(a, w):
    sa = (a.abs().max().float() / FMAX).reshape(())
    sb = (w.abs().max().float() / FMAX).reshape(())
    qa, qw = quant(a, sa), quant(w, sb)
    return lambda: torch._scaled_mm(qa, qw.t(), sa, sb, out_dtype=torch.bfloat16)


def recipe_bf16(a, w):
    return lambda: a @ w.t()


def timed(fn, iters):
    fn()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / iters


def main():
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    cap = torch.cuda.get_device_capability(dev) if dev.type == "cuda" else (0, 0)
    log.info("GEMM probe on %s (sm_%d%d), torch %s, M=N=K=%d", name, cap[0], cap[1], torch.__version__, M)
    torch.manual_seed(0)
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    w = torch.randn(N, K, device=dev, dtype=torch.bfloat16) / K ** 0.5
    ref = (a @ w.t()).float()
    rows = []
    for label, make in (("mxfp8-block32", recipe_mxfp8), ("fp8-rowwise", recipe_rowwise),
                        ("fp8-tensorwise", recipe_tensorwise), ("bf16", recipe_bf16)):
        try:
            fn = make(a, w)
            out = fn().float()
            err = ((out - ref).norm() / ref.norm()).item()
            if err > 0.1:
                log.warning("recipe %s: relative error %.3g against bf16, not used", label, err)
                rows.append((label, "inaccurate", err, None))
                continue
            s = timed(fn, 20)
            rows.append((label, "ok", err, 2 * M * N * K / s / 1e12))
            log.info("recipe %s: ok, relative error %.2e, %.1f TFLOP/s", label, err, rows[-1][3])
        except Exception as e:  # a recipe this GPU or build cannot run
            log.warning("recipe %s not available on %s: %s: %s\n%s", label, name, type(e).__name__,
                        str(e).splitlines()[0] if str(e) else "", traceback.format_exc().rstrip())
            rows.append((label, "unavailable", None, None))
    print(f"{'recipe':<16}{'status':<13}{'rel_err':>10}{'TFLOP/s':>10}")
    for label, status, err, tf in rows:
        e = "-" if err is None else f"{err:.2e}"
        t = "-" if tf is None else f"{tf:.1f}"
        print(f"{label:<16}{status:<13}{e:>10}{t:>10}")
    best = max((r for r in rows if r[3] is not None), key=lambda r: r[3])
    log.info("selected GEMM recipe: %s", best[0])
    fn = dict((("mxfp8-block32", recipe_mxfp8), ("fp8-rowwise", recipe_rowwise), ("fp8-tensorwise", recipe_tensorwise),
               ("bf16", recipe_bf16)))[best[0]](a, w)
    t = time.perf_counter()
    for _ in range(300):
        out = fn()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    print(f"warm-up served 300 batches in {time.perf_counter() - t:.2f} s with {best[0]}; server ready", flush=True)


if __name__ == "__main__":
    main()
