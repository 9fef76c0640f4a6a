"""Bandwidth expectations for the GPU probes: the fractions of the line rate a healthy node reaches, and
the churn tolerances. Every number here names its source.

Why fractions of a computed line rate and not a table per SKU: the same code must judge an H200 pair
(18 NVLink 4 links), an 8-GPU HGX board behind NVSwitches, an H800 (fewer links) and a PCIe box, and
the only honest common ground is "links x per-link rate" read from the node itself ("a
threshold names its source and is scaled by the topology that NVML reports"). The line rate itself is
computed in envbuild/doctor/linerate.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

MIB = 1 << 20


# -------------------------------------------------------------------------------------------------------
# NCCL collectives (comm.nccl_collectives). busbw as nccl-tests defines it (nccl-tests doc/PERFORMANCE.md),
# NVLS off. Anchors on the lent 2 x H200 (18 x 26.562 = 478 GB/s line rate; measured on the lent 2xH200, 2026-11-29):
# all_reduce busbw 268 GB/s at 64 MiB (0.56), 300 at 256 MiB (0.63), 326-331 at 1 GiB (0.69); all_gather
# averages 226 GB/s and alltoall 259 GB/s over 16 MiB-1 GiB. On 8-GPU HGX H100 without NVLS NVIDIA quotes
# ~370 of 450 GB/s (0.82; NVIDIA/nccl-tests#212). Bandwidth still ramps below 64 MiB, so
# smaller sizes are reported, not judged (Azure's H200 results ramp 368 GB/s at 64 MiB to 468 at 1 GiB, Azure/AI-benchmarking-guide).
# A healthy node sits well above WARN; SHM or NET fallback on an NVLink node lands far below FAIL
# (host-memory bounce: tens of GB/s).
# -------------------------------------------------------------------------------------------------------
COLLECTIVE_SOURCE = ("measured on the lent 2xH200, 2026-11-29 anchors (2xH200 NV18: all_reduce busbw 0.56/0.63/0.69 of line "
                     "rate at 64 MiB/256 MiB/1 GiB) and nccl-tests doc/PERFORMANCE.md-1.2")


@dataclass(frozen=True)
class Band:
    warn_below: float  # fraction of line rate
    fail_below: float


def collective_band(op: str, size_bytes: int, fabric: str) -> Optional[Band]:
    """Warn/fail fractions of the line rate for `op` at S = size_bytes, or None when not judged.

    PCIe numbers are looser: NCCL over PCIe peer-to-peer reaches roughly 0.6-0.8 of the link; below
    a quarter means P2P is off or bounced through the CPU."""
    if size_bytes < 64 * MIB:
        return None
    if fabric == "pcie":
        return Band(warn_below=0.35, fail_below=0.15)
    big = size_bytes >= 256 * MIB
    if op == "all_reduce":
        return Band(warn_below=0.45 if big else 0.38, fail_below=0.25 if big else 0.2)
    return Band(warn_below=0.35 if big else 0.28, fail_below=0.2 if big else 0.15)


# -------------------------------------------------------------------------------------------------------
# Communicator churn (comm.nccl_churn): growth per destroy/rebuild cycle that counts as a leak. Rebuilding ~20
# communicators must return to the same footprint; NCCL allocates per communicator (buffers, proxy
# state; envbuild/knowledge/causes.toml M4), so growth that persists across cycles is a leak. The tolerances
# absorb the caching allocator's and the CUDA context's one-off growth: we fit the slope after
# the first (warm-up) cycle.
# -------------------------------------------------------------------------------------------------------
CHURN_MEM_SLOPE_WARN_MIB = 8.0  # free GPU memory lost per cycle, MiB
CHURN_MEM_SLOPE_FAIL_MIB = 64.0
CHURN_FD_SLOPE_WARN = 1.0  # open file descriptors gained per cycle
CHURN_FD_SLOPE_FAIL = 8.0
CHURN_SOURCE = ("cause M4 of envbuild/knowledge/causes.toml (leaked IPC/multicast/FDs under per-step communicator rebuild; "
                "slime #956, #1731)")


# -------------------------------------------------------------------------------------------------------
# P2P copies between two GPUs (gpu.p2p), as fractions of the pair's per-direction line rate
# (envbuild/doctor/linerate.py). Anchors:
# - unidirectional: torch copy_ GPU0->GPU1 1 GiB on the lent 2xH200 NV18 = 394.5 GB/s = 0.83 of 478
#   (measured on the lent 2xH200, 2026-11-29); cuda-samples p2pBandwidthLatencyTest on 8xH100 371-377 of 450 = 0.83 and
#   nvbandwidth device_to_device_memcpy_read_ce 370-373 of 450 = 0.83 (Azure/azurehpc-health-checks, NVIDIA/nccl#1264).
#   WARN below 0.74 = Azure aznhc's nvbandwidth pass line (335 GB/s on a 450 GB/s link, azurehpc-health-checks
#   §1.2); FAIL below 0.50: lost links or a fallback through host memory, not tuning noise.
# - bidirectional (both directions at once, judged against 2 x line rate): the lent 2xH200 gave 580 GB/s
#   of 956 = 0.61 with the same torch method (measured on the lent 2xH200, 2026-11-29); p2pBandwidthLatencyTest reaches 783 of 900
#   = 0.87 on H100 (NVIDIA/nccl#1264). WARN below 0.50, FAIL below 0.30.
# -------------------------------------------------------------------------------------------------------
P2P_UNI_BAND = Band(warn_below=0.74, fail_below=0.50)
P2P_BIDIR_BAND = Band(warn_below=0.50, fail_below=0.30)
P2P_SOURCE = ("measured on the lent 2xH200, 2026-11-29 (2xH200: 394.5 GB/s = 0.83 uni, 580 GB/s = 0.61 bidir, torch copy_); "
              "p2pBandwidthLatencyTest 0.83 of line rate on 8xH100 (NVIDIA/nccl#1264); "
              "Azure aznhc pass line 335/450 = 0.74)")


def band_verdict(fraction: float, band: Band) -> str:
    """"pass", "warn" or "fail" for a measured fraction of the line rate."""
    if fraction < band.fail_below:
        return "fail"
    if fraction < band.warn_below:
        return "warn"
    return "pass"
