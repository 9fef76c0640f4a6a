"""Bandwidth expectations for the GPU probes: line rates from the topology NVML reports, and the
fractions of them a healthy node reaches. Every number here names its source.

Why fractions of a computed line rate and not a table per SKU: the same code must judge an H200 pair
(18 NVLink 4 links), an 8-GPU HGX board behind NVSwitches, an H800 (fewer links) and a PCIe box, and
the only honest common ground is "links x per-link rate" read from the node itself (DESIGN.md, "a
threshold names its source and is scaled by the topology that NVML reports").
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

MIB = 1 << 20

# Per-link, per-direction NVLink rate, GB/s (1e9 B/s), keyed by what nvmlDeviceGetNvLinkVersion
# returns. NVML numbers versions by its own enum, not the marketing name: 1 = NVLink 1.0, 2 = 2.0,
# 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0 (Hopper; the lent H200 reports 6), 7 = 5.0 (Blackwell).
# NVLink 2-4: 25 GB/s per link per direction ("18 links x 25 GB/s per direction = 450 GB/s" on
# H100/H200, research/validators.md §1.2); NVLink 5: 50 GB/s (1.8 TB/s bidirectional over 18 links);
# NVLink 1: 20 GB/s. Used only when `nvidia-smi nvlink -s`, which prints each link's rate (26.562 GB/s
# on the lent H200, research/gpu-machine.md), is unavailable.
NVLINK_GBPS_BY_VERSION = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 25.0, 6: 25.0, 7: 50.0}

# PCIe usable rate per lane and direction, GB/s, after line encoding (8b/10b for gen 1-2, 128b/130b
# from gen 3): gen5 x16 = 63 GB/s (research/validators.md §1.2, "Host<->device over PCIe Gen5 x16
# (theoretical ~63 GB/s per direction)").
PCIE_GBPS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


@dataclass(frozen=True)
class LineRate:
    """The per-GPU, per-direction bandwidth of the fabric joining a set of GPUs."""

    gbps: float
    fabric: str  # "nvlink" | "pcie"
    links: int  # NVLink links per GPU toward the others (0 for PCIe)
    per_link_gbps: float
    how: str  # how it was computed, for the evidence

    def describe(self) -> str:
        if self.fabric == "nvlink":
            return f"{self.links} NVLink x {self.per_link_gbps:g} GB/s = {self.gbps:.0f} GB/s per direction"
        return f"PCIe {self.how} = {self.gbps:.0f} GB/s per direction"


def nvlink_rates_from_smi(text: str) -> Dict[int, List[float]]:
    """Per-GPU link rates from `nvidia-smi nvlink -s` ("GPU 0: ..." then "Link 3: 26.562 GB/s")."""
    rates: Dict[int, List[float]] = {}
    gpu: Optional[int] = None
    for line in text.splitlines():
        m = re.match(r"\s*GPU\s+(\d+):", line)
        if m:
            gpu = int(m.group(1))
            rates.setdefault(gpu, [])
            continue
        m = re.match(r"\s*Link\s+\d+:\s*([\d.]+)\s*GB/s", line)
        if m and gpu is not None:
            rates[gpu].append(float(m.group(1)))
    return rates


def _links_toward(dev: Dict[str, Any], others_pci: Sequence[str]) -> int:
    """Active links of `dev` that reach the other GPUs: direct GPU links when any link lands on one of
    them, else every active link (they go to NVSwitches, which reach every GPU)."""
    active = [lk for lk in dev.get("nvlink") or [] if lk.get("active")]
    wanted = {p.lower() for p in others_pci if p}
    to_gpu = [lk for lk in active if (lk.get("remote_pci") or "").lower() in wanted]
    all_pci = wanted | {str(dev.get("pci_bus_id") or "").lower()}
    to_switch = [lk for lk in active if (lk.get("remote_pci") or "").lower() not in all_pci]
    if to_gpu:
        return len(to_gpu)
    return len(to_switch)


def line_rate(snapshot: Dict[str, Any], gpus: Sequence[int], smi_nvlink: Optional[str] = None) -> Optional[LineRate]:
    """The slowest GPU's per-direction bandwidth toward the others in `gpus` (NVML indices).

    NVLink when every GPU has active links toward the set (rate per link from `nvidia-smi nvlink -s`
    when given, else from the NVLink version); otherwise PCIe (current gen x width). None when NVML did
    not report enough to say.
    """
    devs = {d.get("index"): d for d in snapshot.get("devices", [])}
    chosen = [devs[g] for g in gpus if g in devs]
    if len(chosen) < 2:
        return None
    smi_rates = nvlink_rates_from_smi(smi_nvlink) if smi_nvlink else {}
    per_gpu = []
    for d in chosen:
        others = [o.get("pci_bus_id") for o in chosen if o is not d]
        n = _links_toward(d, others)
        if n == 0:
            per_gpu = []
            break
        rates = [r for r in smi_rates.get(d["index"], []) if r > 0]
        if rates:
            rate, how = min(rates), "nvidia-smi nvlink -s"
        else:
            versions = [lk.get("version") for lk in d.get("nvlink") or [] if lk.get("active")]
            rate = NVLINK_GBPS_BY_VERSION.get(max((v or 0) for v in versions) if versions else 0, 0.0)
            how = f"NVML NVLink version enum {max(versions) if versions else '?'}, nominal rate"
        if rate <= 0:
            per_gpu = []
            break
        per_gpu.append(LineRate(n * rate, "nvlink", n, rate, how))
    if per_gpu:
        return min(per_gpu, key=lambda lr: lr.gbps)
    pcie = []
    for d in chosen:
        p = d.get("pcie") or {}
        gen, width = p.get("gen_current") or p.get("gen_max"), p.get("width_current") or p.get("width_max")
        if not gen or not width or gen not in PCIE_GBPS_PER_LANE:
            return None
        pcie.append(LineRate(PCIE_GBPS_PER_LANE[gen] * width, "pcie", 0, 0.0, f"gen{gen} x{width}"))
    return min(pcie, key=lambda lr: lr.gbps)


# -------------------------------------------------------------------------------------------------------
# NCCL collectives (nccl.collectives). busbw as nccl-tests defines it (research/validators.md §1.1),
# NVLS off. Anchors on the lent 2 x H200 (18 x 26.562 = 478 GB/s line rate; research/gpu-machine.md):
# all_reduce busbw 268 GB/s at 64 MiB (0.56), 300 at 256 MiB (0.63), 326-331 at 1 GiB (0.69); all_gather
# averages 226 GB/s and alltoall 259 GB/s over 16 MiB-1 GiB. On 8-GPU HGX H100 without NVLS NVIDIA quotes
# ~370 of 450 GB/s (0.82; validators.md §1.2, nccl-tests#212). Bandwidth still ramps below 64 MiB, so
# smaller sizes are reported, not judged ("always pin the message size", validators.md §1.2).
# A healthy node sits well above WARN; SHM or NET fallback on an NVLink node lands far below FAIL
# (host-memory bounce: tens of GB/s).
# -------------------------------------------------------------------------------------------------------
COLLECTIVE_SOURCE = ("research/gpu-machine.md anchors (2xH200 NV18: all_reduce busbw 0.56/0.63/0.69 of line "
                     "rate at 64 MiB/256 MiB/1 GiB) and research/validators.md §1.1-1.2")


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
# Communicator churn (nccl.churn): growth per destroy/rebuild cycle that counts as a leak. Rebuilding ~20
# communicators must return to the same footprint; NCCL allocates per communicator (buffers, proxy
# state; research/error999.md M4), so growth that persists across cycles is a leak. The tolerances
# absorb the caching allocator's and the CUDA context's one-off growth: we fit the slope after
# the first (warm-up) cycle.
# -------------------------------------------------------------------------------------------------------
CHURN_MEM_SLOPE_WARN_MIB = 8.0  # free GPU memory lost per cycle, MiB
CHURN_MEM_SLOPE_FAIL_MIB = 64.0
CHURN_FD_SLOPE_WARN = 1.0  # open file descriptors gained per cycle
CHURN_FD_SLOPE_FAIL = 8.0
CHURN_SOURCE = ("research/error999.md M4 (leaked IPC/multicast/FDs under per-step communicator rebuild; "
                "slime #956, #1731)")


# -------------------------------------------------------------------------------------------------------
# P2P copies between two GPUs (gpu.p2p), as fractions of the pair's per-direction line rate
# (envbuild/doctor/linerate.py). Anchors:
# - unidirectional: torch copy_ GPU0->GPU1 1 GiB on the lent 2xH200 NV18 = 394.5 GB/s = 0.83 of 478
#   (research/gpu-machine.md); cuda-samples p2pBandwidthLatencyTest on 8xH100 371-377 of 450 = 0.83 and
#   nvbandwidth device_to_device_memcpy_read_ce 370-373 of 450 = 0.83 (research/validators.md §1.2).
#   WARN below 0.74 = Azure aznhc's nvbandwidth pass line (335 GB/s on a 450 GB/s link, validators.md
#   §1.2); FAIL below 0.50: lost links or a fallback through host memory, not tuning noise.
# - bidirectional (both directions at once, judged against 2 x line rate): the lent 2xH200 gave 580 GB/s
#   of 956 = 0.61 with the same torch method (gpu-machine.md); p2pBandwidthLatencyTest reaches 783 of 900
#   = 0.87 on H100 (validators.md §1.2). WARN below 0.50, FAIL below 0.30.
# -------------------------------------------------------------------------------------------------------
P2P_UNI_BAND = Band(warn_below=0.74, fail_below=0.50)
P2P_BIDIR_BAND = Band(warn_below=0.50, fail_below=0.30)
P2P_SOURCE = ("research/gpu-machine.md (2xH200: 394.5 GB/s = 0.83 uni, 580 GB/s = 0.61 bidir, torch copy_); "
              "research/validators.md §1.2 (p2pBandwidthLatencyTest/nvbandwidth 0.83 of line rate; "
              "Azure aznhc pass line 335/450 = 0.74)")


def band_verdict(fraction: float, band: Band) -> str:
    """"pass", "warn" or "fail" for a measured fraction of the line rate."""
    if fraction < band.fail_below:
        return "fail"
    if fraction < band.warn_below:
        return "warn"
    return "pass"
