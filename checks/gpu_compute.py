"""Payload of gpu.compute: how fast this rank's GPU multiplies and moves memory, measured with the env's torch.

One rank per GPU, all at once (so the node's power and cooling carry every GPU at the same time, as training
does). Phases, each timed for about --seconds after a warm-up:
  gemm.bf16  C = A @ B, N x N bf16 (2 N^3 flops per product): dense tensor-core TFLOP/s;
  gemm.fp16  the same in fp16;
  copy       dst.copy_(src) of --copy-mib MiB device to device (HBM read + write: 2 x bytes per copy): GB/s.
The numbers are judged on the envbuild side against the SKU's datasheet peak (envbuild/train/peaks.py) and
against the other GPUs (the straggler); this side only measures. `--device cpu` runs the same code on the CPU
(CI has no GPU): nothing is judged there, but every step runs.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable, Dict, List

from _common import human_bytes
from _harness import Probe, Timer


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=0.5, help="measuring time per phase (after its warm-up)")
    ap.add_argument("--gemm-n", type=int, default=8192)
    ap.add_argument("--copy-mib", type=int, default=1024)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    return ap.parse_args()


def measure(fn: Callable[[], Any], device, seconds: float, warmup: int = 3) -> Dict[str, Any]:
    """Run fn repeatedly for about `seconds`, in batches timed as one region (device time on a GPU); the
    per-call times of the batches, their median and best."""
    for _ in range(warmup):
        fn()
    with Timer(device) as t:
        fn()
    per_call = max(t.seconds, 1e-6)
    batch = max(1, min(1000, int(0.05 / per_call)))  # ~50 ms batches: launch overhead hidden, several samples
    times: List[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end or len(times) < 3:
        with Timer(device) as t:
            for _ in range(batch):
                fn()
        times.append(t.seconds / batch)
    return {"calls": batch * len(times), "batches": len(times), "median_s": statistics.median(times),
            "best_s": min(times)}


def sig(x: float) -> float:
    """Four significant digits: an H200's 700 TFLOP/s and a CI CPU's 0.02 both keep their precision."""
    return float("%.4g" % x)


def time_gemm(torch, n: int, dtype, dev, seconds: float) -> Dict[str, Any]:
    """C = A @ B on N x N random matrices of `dtype` (the buffers are freed on return)."""
    a = torch.randn(n, n, device=dev).to(dtype)
    b = torch.randn(n, n, device=dev).to(dtype)
    c = torch.empty(n, n, device=dev, dtype=dtype)
    return measure(lambda: torch.matmul(a, b, out=c), dev, seconds)


def time_copy(torch, nbytes: int, dev, seconds: float) -> "tuple[Dict[str, Any], bool]":
    """dst.copy_(src) of `nbytes` on the device, and whether the last copy is exact."""
    src = torch.ones(nbytes // 4, device=dev, dtype=torch.float32)
    dst = torch.empty_like(src)
    m = measure(lambda: dst.copy_(src), dev, seconds)
    return m, bool(torch.equal(dst, src))


def main(p: Probe) -> None:
    args = parse_args()
    import torch

    if args.device == "cuda":
        if not torch.cuda.is_available():
            p.finish("skip", f"no CUDA device visible to torch {torch.__version__}")
            return
        dev = p.cuda_device()
        props = torch.cuda.get_device_properties(dev)
        p.evidence.update(device=props.name, sm=f"{props.major}.{props.minor}", sm_count=props.multi_processor_count,
                          memory_bytes=props.total_memory)
    else:
        dev = p.device = torch.device("cpu")
        p.evidence["device"] = "cpu"
    p.evidence.update(torch=torch.__version__, gemm_n=args.gemm_n, copy_bytes=args.copy_mib << 20,
                      seconds=args.seconds)
    n = args.gemm_n
    flops = 2.0 * n ** 3
    p.settle()  # an earlier probe's ranks still exiting would share the GPU with the timed GEMMs
    for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        with p.phase(f"gemm.{name}"):
            m = time_gemm(torch, n, dtype, dev, args.seconds)
        tflops = flops / m["median_s"] / 1e12
        p.metric(f"{name}_tflops", sig(tflops), "TFLOP/s")
        p.evidence[f"gemm_{name}"] = dict(m, best_tflops=sig(flops / m["best_s"] / 1e12))
    with p.phase("copy"):
        m, exact = time_copy(torch, args.copy_mib << 20, dev, args.seconds)
    moved = 2.0 * (args.copy_mib << 20)  # every byte read once and written once
    gbps = moved / m["median_s"] / 1e9
    p.metric("hbm_copy_gbps", sig(gbps), "GB/s")
    p.evidence["copy"] = dict(m, best_gbps=sig(moved / m["best_s"] / 1e9), exact=exact)
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    if not exact:
        p.finish("fail", f"a {human_bytes(args.copy_mib << 20)} device copy came back different", causes=["D3"])
        return
    p.finish("pass", f"{p.evidence['device']}: bf16 {p.metrics[0]['value']:.0f} / fp16 {p.metrics[1]['value']:.0f} "
                     f"TFLOP/s, copy {gbps:.0f} GB/s")


if __name__ == "__main__":
    Probe.run(main)
