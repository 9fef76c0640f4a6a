"""Payload of comm.nccl_churn: slime's ReloadableProcessGroup pattern, K times over.

Every training step slime destroys its ~20 NCCL communicators (TP, DP, PP, EP, CP and their
combinations) and builds them again ("Reloading 20 process groups"); failures then show up steps
later as `Cuda failure 999`, `Failed to CUDA calloc` or hangs (envbuild/knowledge/causes.toml M4). Per cycle:
  build   --groups subgroups, a mix of world-wide groups (DP/EP-like: every rank) and per-rank
          groups (TP-like with TP=1 on a small node) or halves when the world allows;
  use     one exact all_reduce on each group (the first collective creates the communicator);
  destroy destroy_process_group(g) for each, then sync, gc and empty the caching allocator;
  measure free GPU memory (cudaMemGetInfo) and open file descriptors (/proc/self/fd).
The growth per cycle is a least-squares slope over cycles 1..K (cycle 0 pays one-off costs).
Test hook: ENVBUILD_TEST_LEAK_FDS=<n> keeps n extra descriptors open per cycle (a leak to detect).
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import time

from _harness import Probe, exact_fill, exact_sum, mismatches


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--groups", type=int, default=20)
    ap.add_argument("--numel", type=int, default=1 << 20)
    return ap.parse_args()


def layouts(n: int, count: int):
    """`count` rank lists, cycling through world, singletons and halves: what TP/DP/EP/PP groups are
    on a node of n ranks. Every rank calls new_group for every list (torch requires it)."""
    shapes = [list(range(n))]
    if n >= 4:
        half = n // 2
        shapes += [list(range(half)), list(range(half, n)), list(range(0, n, 2)), list(range(1, n, 2))]
    shapes += [[r] for r in range(n)]
    out = []
    while len(out) < count:
        out.extend(shapes)
    return out[:count]


def slope(ys):
    """Least-squares slope of ys against 0..len-1 (0.0 for fewer than 2 points)."""
    m = len(ys)
    if m < 2:
        return 0.0
    mx = (m - 1) / 2
    my = sum(ys) / m
    den = sum((i - mx) ** 2 for i in range(m))
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / den


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def main(p: Probe) -> None:
    args = parse_args()
    import torch

    with p.phase("init"):
        dist = p.init_dist()
        n = dist.get_world_size()
        dist.barrier()
    cuda = p.device.type == "cuda"
    shapes = layouts(n, args.groups)
    free_mib, fds, cycle_s, wrong, leaked = [], [], [], [], []
    dtype = torch.bfloat16
    for c in range(args.cycles):
        t0 = time.perf_counter()
        with p.phase(f"cycle {c} build"):
            groups = [dist.new_group(ranks=ranks) for ranks in shapes]
        with p.phase(f"cycle {c} collectives"):
            for i, (ranks, g) in enumerate(zip(shapes, groups)):
                if p.rank not in ranks:
                    continue
                x = exact_fill(args.numel, ranks.index(p.rank), len(ranks), dtype, p.device, salt=i)
                dist.all_reduce(x, group=g)
                bad = mismatches(x, exact_sum(args.numel, len(ranks), dtype, p.device, salt=i))
                if bad:
                    wrong.append(f"cycle {c} group {i} {ranks}: {bad} wrong")
            p.synchronize()
        with p.phase(f"cycle {c} destroy"):
            for g in groups:
                dist.destroy_process_group(g)
            del groups
            gc.collect()
            if cuda:
                torch.cuda.synchronize(p.device)
                torch.cuda.empty_cache()
        if os.environ.get("ENVBUILD_TEST_LEAK_FDS"):  # test hook: leak N descriptors per cycle
            leaked.extend(os.open("/dev/null", os.O_RDONLY) for _ in range(int(os.environ["ENVBUILD_TEST_LEAK_FDS"])))
        with p.phase(f"cycle {c} measure"):
            dist.barrier()
            if cuda:
                free_mib.append(torch.cuda.mem_get_info(p.device)[0] / (1 << 20))
            fds.append(open_fds())
        cycle_s.append(round(time.perf_counter() - t0, 3))
    tail_mem = free_mib[1:]
    tail_fd = fds[1:]
    mem_slope = -slope(tail_mem) if cuda else 0.0  # free memory falling = growth
    fd_slope = slope(tail_fd)
    p.metric("gpu_mem_growth_per_cycle", round(mem_slope, 2), "MiB/cycle")
    p.metric("fd_growth_per_cycle", round(fd_slope, 2), "fds/cycle")
    p.metric("cycle_s_median", round(statistics.median(cycle_s), 4), "s")
    p.evidence.update(cycles=args.cycles, groups_per_cycle=len(shapes), group_layouts=shapes[:8],
                      free_mib=[round(v, 1) for v in free_mib], open_fds=fds, cycle_s=cycle_s,
                      world_size=n)
    if wrong:
        p.finish("fail", "wrong all_reduce results after rebuild: " + "; ".join(wrong[:3]), causes=["M4", "M5"])
    else:
        p.finish("pass", f"{args.cycles} cycles x {len(shapes)} communicators built, used and destroyed")


if __name__ == "__main__":
    Probe.run(main)
