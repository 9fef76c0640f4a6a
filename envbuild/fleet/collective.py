"""The cross-node collectives one Ray rank runs: all-reduce and all-to-all over every rank of the fleet,
timed, checked for the right answer, turned into nccl-tests' algbw/busbw (nccl-tests doc/PERFORMANCE.md:
all-reduce busbw = algbw x 2(n-1)/n, all-to-all busbw = algbw x (n-1)/n).

Runs inside the Ray worker's own process, with the torch of the Ray job's environment (imported here, never
by envbuild at large): NCCL on the rank's GPU, gloo on the CPU when the fleet has no GPUs.
"""
from __future__ import annotations

import datetime as _dt
import os
import time
from typing import Any, Dict, Optional


def free_port() -> int:
    """A TCP port free on this node now, for rank 0's rendezvous (below the ephemeral range: see rendezvous_port)."""
    from envbuild.doctor.rankproc import rendezvous_port

    return rendezvous_port("")


def _sync(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_rank(rank: int, world: int, master: str, port: int, backend: str, size_bytes: int, iters: int,
             timeout_s: float, gpu: Optional[int] = None, on_phase=None) -> Dict[str, Any]:
    """Join the fleet's process group as `rank`, time both collectives, leave; one dict of numbers per rank."""
    import torch
    import torch.distributed as dist

    phase = on_phase or (lambda text: None)
    device = torch.device("cuda", gpu if gpu is not None else 0) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    phase(f"joining the {backend} process group of {world} ranks at {master}:{port} as rank {rank}")
    dist.init_process_group(backend, init_method=f"tcp://{master}:{port}", rank=rank, world_size=world,
                            timeout=_dt.timedelta(seconds=timeout_s))
    out: Dict[str, Any] = {"rank": rank, "world": world, "backend": backend, "size_bytes": size_bytes,
                           "iters": iters, "pid": os.getpid()}
    try:
        n = max(world, size_bytes // 4 // world * world)  # float32 elements, divisible by world for all-to-all
        x = torch.ones(n, dtype=torch.float32, device=device)
        phase(f"all-reduce of {n * 4 / 1e6:.1f} MB x {iters} (rank {rank} of {world})")
        dist.all_reduce(x)  # warm-up: connections are set up lazily
        dist.barrier()
        _sync(torch, device)
        t0 = time.perf_counter()
        for _ in range(iters):
            x.fill_(1.0)
            dist.all_reduce(x)
        _sync(torch, device)
        t_ar = (time.perf_counter() - t0) / iters
        out["allreduce_ok"] = bool(torch.all(x == float(world)).item())
        y = torch.full((n,), float(rank), dtype=torch.float32, device=device)
        z = torch.empty_like(y)
        phase(f"all-to-all of {n * 4 / 1e6:.1f} MB x {iters} (rank {rank} of {world})")
        dist.all_to_all_single(z, y)
        dist.barrier()
        _sync(torch, device)
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_to_all_single(z, y)
        _sync(torch, device)
        t_a2a = (time.perf_counter() - t0) / iters
        expect = torch.arange(world, dtype=torch.float32, device=device).repeat_interleave(n // world)
        out["alltoall_ok"] = bool(torch.equal(z, expect))
        size = n * 4
        out["allreduce"] = bus_bandwidth("allreduce", size, t_ar, world)
        out["alltoall"] = bus_bandwidth("alltoall", size, t_a2a, world)
        phase("leaving the process group")
    finally:
        dist.destroy_process_group()
    return out


def bus_bandwidth(op: str, size_bytes: int, seconds: float, world: int) -> Dict[str, float]:
    """nccl-tests' numbers: time per op, algbw = bytes / time, busbw = algbw x the op's factor (GB/s)."""
    factor = {"allreduce": 2 * (world - 1) / world, "alltoall": (world - 1) / world}[op]
    algbw = size_bytes / seconds / 1e9 if seconds > 0 else 0.0
    return {"time_s": round(seconds, 6), "algbw_gbps": round(algbw, 4), "busbw_gbps": round(algbw * factor, 4)}
