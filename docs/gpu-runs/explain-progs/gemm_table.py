# A node acceptance GEMM table: every dtype the training stack might use, each cell timed on its own. Cells that
# the library refuses (a row-major fp8 operand, an int8 GEMM with too few rows) are logged with their traceback,
# marked in the table and retried with the layout the kernels want. Ends with gemm_table.csv.
import csv
import logging
import os
import time
import traceback

import torch

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s gemm: %(message)s")
log = logging.getLogger()
dev = torch.device("cpu") if os.environ.get("DEVICE") == "cpu" else torch.device("cuda", 0)
N = int(os.environ.get("SIZE", "8192"))
one = torch.ones((), device=dev, dtype=torch.float32)


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(fn, flops):
    fn(); sync()
    t0 = time.perf_counter()
    for _ in range(5):
        fn()
    sync()
    return flops * 5 / (time.perf_counter() - t0) / 1e12


def cells():
    f = 2.0 * N ** 3
    for dt in (torch.float64, torch.float32, torch.bfloat16, torch.float16):
        a = torch.randn(N, N, device=dev, dtype=dt); b = torch.randn(N, N, device=dev, dtype=dt)
        yield str(dt).split(".")[1], "row-major", lambda a=a, b=b: a @ b, f
    a8 = torch.randn(N, N, device=dev).to(torch.float8_e4m3fn)
    b8 = torch.randn(N, N, device=dev).to(torch.float8_e4m3fn)
    yield "float8_e4m3fn", "row-major B", lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16), f
    b8c = b8.t().contiguous().t()
    yield "float8_e4m3fn", "col-major B", lambda: torch._scaled_mm(a8, b8c, one, one, out_dtype=torch.bfloat16), f
    ai = torch.randint(-8, 8, (8, N), device=dev, dtype=torch.int8)
    bi = torch.randint(-8, 8, (N, N), device=dev, dtype=torch.int8)
    yield "int8", "M=8", lambda: torch._int_mm(ai, bi), 2.0 * 8 * N * N
    ai = torch.randint(-8, 8, (N, N), device=dev, dtype=torch.int8)
    yield "int8", f"M={N}", lambda: torch._int_mm(ai, bi), f


rows, failed = [], 0
for dtype, layout, fn, flops in cells():
    try:
        tf = timed(fn, flops)
        rows.append((dtype, layout, f"{tf:.1f}", "ok"))
        log.info("%s %s: %.1f TFLOP/s", dtype, layout, tf)
    except Exception as e:
        failed += 1
        log.error("%s %s refused:\n%s", dtype, layout, traceback.format_exc().rstrip())
        rows.append((dtype, layout, "-", f"error: {type(e).__name__}: {str(e).splitlines()[0][:60]}"))
print(f"\nGEMM {N}x{N}x{N} on {torch.cuda.get_device_name(0) if dev.type == 'cuda' else 'cpu'}")
print(f"{'dtype':14s} {'layout':12s} {'TFLOP/s':>8s}  note")
for r in rows:
    print(f"{r[0]:14s} {r[1]:12s} {r[2]:>8s}  {r[3]}")
with open("gemm_table.csv", "w", newline="") as fh:
    csv.writer(fh).writerows([("dtype", "layout", "tflops", "note")] + rows)
print(f"{len(rows) - failed} of {len(rows)} cells timed, {failed} refused as expected; gemm_table.csv written")
