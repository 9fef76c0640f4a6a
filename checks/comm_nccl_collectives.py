"""Payload of comm.nccl_collectives: exact correctness and bandwidth of the five collectives slime uses.

Per op and size S (bytes as nccl-tests counts them, see _harness.op_bytes): one checked run with
integer fills whose results are exact (any wrong element is a failure), then a timed loop whose length
is chosen from its own first iteration so that each size costs about --budget-ms of device time
(nccl-tests runs a fixed 20 iterations twice, in and out of place, whatever the size). The iteration
count is agreed across ranks (all ranks must issue the same collectives). Time per iteration is the
slowest rank's; algbw/busbw follow nccl-tests' definitions. Metrics are named by the requested size
(all_reduce.busbw.64MiB) whatever S the rank count rounded it to, so the envbuild side's expectations
attach on 3 or 6 GPUs too.

Time (evidence): startup_s = process group + communicator + one checked run of every op at its smallest
size (the start-up nccl-tests also pays in a one-size run); measure_s = from the first checked collective
after that to the last timed one, every size checked exactly inside it; time_split divides each size's
wall time into check_s (fill, checked run, compare) and timing_s (the timed loop and the agreements).

Run by envbuild with one process per GPU (backend nccl) or per CPU rank (backend gloo, for CI).
Prints nothing; writes rank<k>.json through the harness. Test hook: ENVBUILD_TEST_CORRUPT_OP=<op> makes
the last rank change one element of that op's result before the check, to prove the check can fail.
"""
from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any, Dict, List

from _common import size_label
from _harness import Probe, Timer, algbw_busbw, exact_fill, exact_sum, fill_value_bound, mismatches, op_bytes

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")


def parse_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--sizes", default=str(1 << 20), help="comma-separated S in bytes")
    ap.add_argument("--dtype", default="float32", help="dtype of the timed runs (nccl-tests default: float)")
    ap.add_argument("--check-dtypes", default="bfloat16", help="extra dtypes checked for exactness at the "
                    "smallest size (reductions in bf16 are what training uses)")
    ap.add_argument("--budget-ms", type=float, default=60.0, help="device time to spend per (op, size)")
    ap.add_argument("--min-iters", type=int, default=3, help="timed iterations per (op, size), at least")
    ap.add_argument("--max-iters", type=int, default=50)
    return ap.parse_args(argv)


class Collectives:
    """Buffers, expected values and one call per op, for a given per-op S and dtype."""

    def __init__(self, dist, torch, rank: int, n: int, device):
        self.dist, self.torch, self.rank, self.n, self.device = dist, torch, rank, n, device
        self._gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self._rscatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    def numel(self, op: str, size: int, dtype) -> int:
        """Elements of the per-rank input for S = size, rounded so every shard is whole."""
        item = self.torch.empty((), dtype=dtype).element_size()
        per_rank = size // self.n if op == "all_gather" else size
        unit = self.n if op in ("reduce_scatter", "all_to_all") else 1
        return max(unit, (per_rank // item) // unit * unit)

    def prepare(self, op: str, numel: int, dtype, salt: int):
        """(input, output, expected) for one checked run of `op`."""
        t, r, n, dev = self.torch, self.rank, self.n, self.device
        if op == "all_reduce":
            return exact_fill(numel, r, n, dtype, dev, salt), None, exact_sum(numel, n, dtype, dev, salt)
        if op == "all_gather":
            inp = exact_fill(numel, r, n, dtype, dev, salt)
            want = t.cat([exact_fill(numel, k, n, dtype, dev, salt) for k in range(n)])
            return inp, t.empty(numel * n, dtype=dtype, device=dev), want
        if op == "reduce_scatter":
            shard = numel // n
            want = exact_sum(numel, n, dtype, dev, salt)[r * shard:(r + 1) * shard].clone()
            return exact_fill(numel, r, n, dtype, dev, salt), t.empty(shard, dtype=dtype, device=dev), want
        if op == "all_to_all":
            chunk = numel // n
            want = t.cat([exact_fill(numel, k, n, dtype, dev, salt)[r * chunk:(r + 1) * chunk] for k in range(n)])
            return exact_fill(numel, r, n, dtype, dev, salt), t.empty(numel, dtype=dtype, device=dev), want
        if op == "broadcast":
            src = exact_fill(numel, 0, n, dtype, dev, salt)
            inp = src if r == 0 else t.zeros(numel, dtype=dtype, device=dev)
            return inp, None, src
        raise ValueError(op)

    def call(self, op: str, inp, out) -> None:
        d = self.dist
        if op == "all_reduce":
            d.all_reduce(inp)
        elif op == "all_gather":
            self._gather(out, inp)
        elif op == "reduce_scatter":
            self._rscatter(out, inp)
        elif op == "all_to_all":
            d.all_to_all_single(out, inp)
        elif op == "broadcast":
            d.broadcast(inp, 0)

    def result_of(self, op: str, inp, out):
        return inp if op in ("all_reduce", "broadcast") else out


def agree_max(dist, torch, value: float, device) -> float:
    """The maximum of `value` over ranks (iteration counts, slowest rank's time)."""
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def warm_up(coll: Collectives, ops: List[str], dtypes: list) -> None:
    """One checked run of every op at its smallest whole size in every dtype, before the clock starts.

    This is the start-up nccl-tests pays in its one-size baseline run (-b 8 -e 8 -c 1, subtracted from its
    measurement time by benchmarks/bench_allreduce.py): the first launch of each fill, compare and
    collective kernel loads it (CUDA lazy loading), which is a cost of starting, not of any size.
    """
    for dt in dtypes:
        for op in ops:
            inp, out, want = coll.prepare(op, coll.numel(op, 0, dt), dt, salt=0)
            coll.call(op, inp, out)
            mismatches(coll.result_of(op, inp, out), want)


def measure(p: Probe, coll: Collectives, op: str, size: int, dtype, args, wrong: List[str]) -> Dict[str, Any]:
    """Check `op` at requested size `size` exactly once, then time it for about args.budget_ms.

    Sequence: checked run; line the ranks up; one timed iteration that sizes the loop (and counts as its
    first sample); agree the iteration count; the rest of the loop; agree the slowest rank's time.
    The row (the same on every rank) keeps both the requested size (what metrics are named and judged by)
    and S as nccl-tests counts it for the elements actually moved (a size the rank count does not divide
    is rounded down); this rank's own split of its wall time goes to evidence["time_split"].
    """
    dist, torch, n = coll.dist, coll.torch, coll.n
    t0 = time.perf_counter()
    numel = coll.numel(op, size, dtype)
    inp, out, want = coll.prepare(op, numel, dtype, salt=size % 97)
    coll.call(op, inp, out)
    got = coll.result_of(op, inp, out)
    if os.environ.get("ENVBUILD_TEST_CORRUPT_OP") == op and p.rank == p.world_size - 1:
        got.view(-1)[-1] += 1  # test hook: one wrong element must fail the probe
    bad = mismatches(got, want)
    if bad:
        wrong.append(f"{op} {args.dtype} S={size}: {bad} of {want.numel()} elements wrong")
    del want, got
    t_checked = time.perf_counter()
    agree_max(dist, torch, 0.0, p.device)  # ranks leave their checks at different times
    with Timer(p.device) as first:
        coll.call(op, inp, out)
    iters = math.ceil(args.budget_ms / 1e3 / max(first.seconds, 1e-6))
    iters = int(agree_max(dist, torch, min(args.max_iters, max(args.min_iters, iters)), p.device))
    with Timer(p.device) as rest:
        for _ in range(iters - 1):
            coll.call(op, inp, out)
    per_iter = agree_max(dist, torch, (first.seconds + rest.seconds) / iters, p.device)
    s_bytes = op_bytes(op, numel * inp.element_size(), n)
    algbw, busbw = algbw_busbw(op, s_bytes, per_iter, n)
    p.metric(f"{op}.busbw.{size_label(size)}", round(busbw, 2), "GB/s")
    # where this rank's wall time for the size went: fill + checked run + compare, then the timing
    p.evidence.setdefault("time_split", []).append(
        {"op": op, "requested": size, "check_s": round(t_checked - t0, 5),
         "timing_s": round(time.perf_counter() - t_checked, 5)})
    return {"op": op, "requested": size, "size": s_bytes, "iters": iters, "time_us": round(per_iter * 1e6, 2),
            "algbw": round(algbw, 2), "busbw": round(busbw, 2)}


def main(p: Probe) -> None:
    args = parse_args()
    import torch

    ops = [o for o in args.ops.split(",") if o]
    sizes = [int(s) for s in args.sizes.split(",") if s]
    dtype = getattr(torch, args.dtype)
    check_dtypes = [getattr(torch, d) for d in args.check_dtypes.split(",") if d and d != args.dtype]
    with p.phase("init"):
        t_start = time.perf_counter()
        dist = p.init_dist()
        n = dist.get_world_size()
        p.evidence["torch"] = torch.__version__
        if p.device.type == "cuda":
            p.evidence["nccl_version_torch"] = ".".join(str(x) for x in torch.cuda.nccl.version())
            p.evidence["device"] = torch.cuda.get_device_name(p.device)
        coll = Collectives(dist, torch, p.rank, n, p.device)
        warm_up(coll, ops, [dtype] + check_dtypes)
        agree_max(dist, torch, 0.0, p.device)  # every rank starts the clock together
    p.evidence["startup_s"] = round(time.perf_counter() - t_start, 3)
    wrong: List[str] = []
    rows = []
    t_measure0 = time.perf_counter()
    for cdt in check_dtypes:
        dt_name = str(cdt).replace("torch.", "")
        for op in ops:
            with p.phase(f"{op} check {dt_name}"):
                numel = coll.numel(op, min(sizes), cdt)
                inp, out, want = coll.prepare(op, numel, cdt, salt=1)
                coll.call(op, inp, out)
                bad = mismatches(coll.result_of(op, inp, out), want)
                if bad:
                    wrong.append(f"{op} {dt_name} {numel} elements: {bad} wrong")
    for op in ops:
        # Largest first: torch's caching allocator then serves every smaller size from the blocks the
        # largest one allocated, instead of new cudaMallocs at each size.
        for size in sorted(sizes, reverse=True):
            with p.phase(f"{op} {size_label(size)}"):
                rows.append(measure(p, coll, op, size, dtype, args, wrong))
    p.evidence["measure_s"] = round(time.perf_counter() - t_measure0, 3)
    p.evidence["rows"] = sorted(rows, key=lambda r: (ops.index(r["op"]), r["requested"]))
    p.evidence["nranks"] = n
    p.evidence["dtype"] = args.dtype
    if wrong:
        p.finish("fail", "wrong results: " + "; ".join(wrong[:4]), wrong=wrong, causes=["M5", "N3"])
    else:
        p.finish("pass", f"{len(ops)} collectives exact at {len(sizes)} sizes on {n} ranks",
                 exact_limit=fill_value_bound("bfloat16", n))


if __name__ == "__main__":
    Probe.run(main)
