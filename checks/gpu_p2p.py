"""P2P probe: can-access matrix, peer access enabled, bit-exact copies both ways, uni/bidirectional GB/s.

One process sees every selected GPU (launched with nranks=1) and measures every ordered pair. It only
measures; envbuild/doctor/checks/gpu_p2p.py holds the numbers against the NVML topology's line rate,
because the NVML snapshot lives on the envbuild side (and in bundles).

Why copies are checked bit-exact: ACS/IOMMU misconfiguration can make P2P writes land corrupted without
any error (envbuild/knowledge/causes.toml N3). Why torch's copy_: it is the copy-engine path (cudaMemcpyAsync over
UVA) that NCCL's P2P transport and slime's weight moves ride on; measured on the lent 2xH200, 2026-11-29's anchor (394.5 GB/s per
direction on the lent H200 pair) was measured the same way.

Args: --mode quick|full.
"""
from __future__ import annotations

import time

from _harness import Probe, mismatches, parse_mode, word_pattern

SIZES = {"quick": (512 << 20, 8), "full": (1 << 30, 20)}  # (bytes per copy, timed iterations)
VERIFY_BYTES = 256 << 20
WARMUP = 2


def _pci_id(props) -> str:
    """NVML's bus-id spelling (00000000:3B:00.0), so the envbuild side can pair CUDA and NVML indices."""
    try:
        return f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
    except AttributeError:
        return ""


def _time_uni(torch, src, dst, iters: int) -> float:
    """Seconds for `iters` copies src -> dst, timed with events on the source device's current stream
    (torch enqueues a cross-device copy there)."""
    with torch.cuda.device(src.device):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dst.copy_(src, non_blocking=True)
        stop.record()
        stop.synchronize()
    torch.cuda.synchronize(dst.device)
    return start.elapsed_time(stop) / 1e3


def _time_bidir(torch, a_i, b_j, a_j, b_i, iters: int) -> float:
    """Wall seconds for `iters` rounds of i->j and j->i copies in flight together.

    torch orders a cross-device copy after the current streams of BOTH devices, so with the default
    streams the second direction would wait for the first; each direction gets its own pair of streams.
    """
    di, dj = a_i.device, a_j.device
    ij = (torch.cuda.Stream(device=di), torch.cuda.Stream(device=dj))
    ji = (torch.cuda.Stream(device=dj), torch.cuda.Stream(device=di))
    torch.cuda.synchronize(di)
    torch.cuda.synchronize(dj)
    t0 = time.perf_counter()
    for _ in range(iters):
        with torch.cuda.stream(ij[0]), torch.cuda.stream(ij[1]):
            b_j.copy_(a_i, non_blocking=True)
        with torch.cuda.stream(ji[0]), torch.cuda.stream(ji[1]):
            b_i.copy_(a_j, non_blocking=True)
    torch.cuda.synchronize(di)
    torch.cuda.synchronize(dj)
    return time.perf_counter() - t0


def main(p: Probe) -> None:
    mode = parse_mode().mode
    import torch

    from _cudrv import CudaError, Driver

    nbytes, iters = SIZES[mode]
    with p.phase("init"):
        n = torch.cuda.device_count()
        p.evidence["device_count"] = n
        devices = []
        for i in range(n):
            props = torch.cuda.get_device_properties(i)
            devices.append({"cuda_index": i, "name": props.name, "pci_bus_id": _pci_id(props)})
            torch.zeros(1, device=f"cuda:{i}")  # create the primary context before driver calls
        p.evidence["devices"] = devices
        drv = Driver()
    if n < 2:
        p.finish("skip", f"needs at least 2 visible GPUs; {n} visible")
        return
    pairs = []
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            pair = {"src": i, "dst": j, "can_access": bool(torch.cuda.can_device_access_peer(i, j))}
            with p.phase(f"enable peer {i}->{j}"):
                torch.cuda.set_device(i)
                try:
                    pair["peer_access"] = drv.enable_peer_access(i, j)
                except CudaError as exc:
                    pair["peer_access"] = f"failed: {exc.code} {exc.name}"
            with p.phase(f"verify copy {i}->{j}"):
                src = word_pattern(VERIFY_BYTES // 4, 0x5A5A0000 + 16 * i + j, f"cuda:{i}")
                dst = torch.empty_like(src, device=f"cuda:{j}")
                dst.copy_(src)
                want = word_pattern(VERIFY_BYTES // 4, 0x5A5A0000 + 16 * i + j, f"cuda:{j}")
                bad = mismatches(dst, want)
                pair["verify_bytes"] = VERIFY_BYTES
                pair["mismatched_words"] = bad
                del src, dst, want
            with p.phase(f"bandwidth {i}->{j}"):
                a = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{i}")
                b = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{j}")
                _time_uni(torch, a, b, WARMUP)
                secs = _time_uni(torch, a, b, iters)
                pair["uni_gbps"] = round(nbytes * iters / secs / 1e9, 2)
                del a, b
            pairs.append(pair)
    bidir = []
    for i in range(n):
        for j in range(i + 1, n):
            with p.phase(f"bidirectional {i}<->{j}"):
                a_i = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{i}")
                b_i = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{i}")
                a_j = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{j}")
                b_j = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{j}")
                _time_bidir(torch, a_i, b_j, a_j, b_i, WARMUP)
                secs = _time_bidir(torch, a_i, b_j, a_j, b_i, iters)
                bidir.append({"a": i, "b": j, "bidir_gbps": round(2 * nbytes * iters / secs / 1e9, 2)})
                del a_i, b_i, a_j, b_j
    p.evidence.update({"mode": mode, "copy_bytes": nbytes, "iterations": iters, "pairs": pairs,
                       "bidirectional": bidir, "torch": torch.__version__})
    bad = [f"{q['src']}->{q['dst']}" for q in pairs if q["mismatched_words"]]
    p.finish("fail" if bad else "pass",
             f"copies corrupted on {', '.join(bad)}" if bad else f"{len(pairs)} ordered pairs measured")


if __name__ == "__main__":
    Probe.run(main)
