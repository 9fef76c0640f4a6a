"""The P2P line rate of a GPU pair, computed from the NVML snapshot (envbuild/facts/nvml.py).

Why computed and not a constant: DESIGN.md wants thresholds scaled by the topology NVML reports
(active links x per-link rate), so one rule serves an 18-link H200 pair, an H800 with fewer links, an
NVSwitch board and a PCIe box. A pair joined by no active NVLink falls back to its PCIe link.

Per-link rates are per direction, as `nvidia-smi nvlink -s` prints them:
- NVLink 4 (H100/H200/H800): 26.5625 GB/s; read on the lent 2xH200 machine as 18 x 26.562 GB/s =
  478 GB/s per direction (research/gpu-machine.md). NVIDIA's marketing figure is 25 GB/s (450 GB/s per
  direction; research/validators.md §1.2); the measured signalling rate is used so the fraction is honest.
- NVLink 2.x/3.x (V100, A100): 25 GB/s per link per direction (A100: 12 links = 300 GB/s per direction).
- NVLink 5 (B200): 50 GB/s per link per direction (18 links = 900 GB/s, "1.8 TB/s" bidirectional).
- NVLink 1 (P100): 20 GB/s.
PCIe per lane, per direction, after line encoding: gen1 0.25, gen2 0.5, gen3 0.985, gen4 1.969,
gen5 3.938, gen6 7.563 GB/s (PCI-SIG raw rates 2.5/5/8/16/32/64 GT/s; 8b/10b up to gen2, 128b/130b
from gen3). A gen5 x16 link: 63 GB/s (validators.md §1.2 quotes ~63 for Gen5 x16).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

# nvmlDeviceGetNvLinkVersion values (NVML_NVLINK_VERSION_*: 1_0=1, 2_0=2, 2_2=3, 3_0=4, 3_1=5, 4_0=6, 5_0=7).
NVLINK_GBPS_PER_LINK = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 25.0, 6: 26.5625, 7: 50.0}
NVLINK_GENERATION = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0"}
PCIE_GBPS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


@dataclass
class LineRate:
    """Per-direction line rate of one GPU pair and how it was derived (shown in the report)."""

    gbps: Optional[float]  # None: NVML could not say
    link: str  # "nvlink" | "pcie" | "unknown"
    detail: str


def _norm_bus(bus: Optional[str]) -> str:
    """NVML prints 00000000:3B:00.0; lspci-style 0000:3b:00.0 also occurs. Compare on the last 3 fields."""
    if not bus:
        return ""
    parts = bus.strip().lower().split(":")
    return ":".join(parts[-2:]) if len(parts) >= 2 else bus.lower()


def _device(snapshot: Dict[str, Any], index: int) -> Dict[str, Any]:
    for d in snapshot.get("devices") or []:
        if d.get("index") == index:
            return d
    raise KeyError(f"NVML snapshot has no device {index}")


def _active_links(dev: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [ln for ln in (dev.get("nvlink") or []) if ln.get("active")]


def _pcie_rate(a: Dict[str, Any], b: Dict[str, Any]) -> LineRate:
    """The slower of the two GPUs' PCIe links at their maximum generation and width.

    Maximum, not current: an idle GPU drops its link to gen1 to save power, so the current generation
    read before the probe says nothing about the rate during it. The current values go into `detail`.
    """
    rates, parts = [], []
    for d in (a, b):
        p = d.get("pcie") or {}
        gen, width = p.get("gen_max"), p.get("width_max")
        if not gen or not width or gen not in PCIE_GBPS_PER_LANE:
            return LineRate(None, "unknown", f"GPU {d.get('index')}: NVML gave no PCIe max gen/width")
        rates.append(PCIE_GBPS_PER_LANE[gen] * width)
        parts.append(f"GPU {d.get('index')} gen{gen} x{width} (now gen{p.get('gen_current')} "
                     f"x{p.get('width_current')})")
    return LineRate(round(min(rates), 2), "pcie", "PCIe: " + ", ".join(parts))


def pair_line_rate(snapshot: Dict[str, Any], i: int, j: int) -> LineRate:
    """Per-direction line rate between NVML devices i and j.

    Direct NVLinks: active links of i whose remote end is j's PCI address, x per-link rate.
    NVSwitch (or a remote end NVML does not name): links of i whose remote is not another GPU, when NVML
    says the pair talks over NVLink; the pair is bounded by the GPU with fewer such links.
    Otherwise the PCIe link (see _pcie_rate).
    """
    a, b = _device(snapshot, i), _device(snapshot, j)
    gpu_buses = {_norm_bus(d.get("pci_bus_id")) for d in snapshot.get("devices") or []}
    bus_b = _norm_bus(b.get("pci_bus_id"))
    direct = [ln for ln in _active_links(a) if _norm_bus(ln.get("remote_pci")) == bus_b and bus_b]
    if direct:
        return _nvlink_rate(direct, "nvlink", f"{len(direct)} active NVLinks GPU {i} -> GPU {j}")
    p2p = (snapshot.get("p2p") or {}).get(f"{i}-{j}") or {}
    if p2p.get("nvlink") == "ok":
        sw_a = [ln for ln in _active_links(a) if _norm_bus(ln.get("remote_pci")) not in gpu_buses]
        sw_b = [ln for ln in _active_links(b) if _norm_bus(ln.get("remote_pci")) not in gpu_buses]
        if sw_a and sw_b:
            fewer = sw_a if len(sw_a) <= len(sw_b) else sw_b
            hidden = all(_norm_bus(ln.get("remote_pci")) in ("", "ff:ff.0") for ln in sw_a + sw_b)
            where = ("NVML does not name the remote end (FFFFFFFF:FF:FF.0: a VM or NVSwitch hides it) and "
                     "reports NVLink P2P ok for the pair" if hidden else "links end on NVSwitches")
            return _nvlink_rate(fewer, "nvlink", f"GPU {i} {len(sw_a)} and GPU {j} {len(sw_b)} active NVLinks, "
                                                 f"{where}; the pair is bounded by the fewer: {len(fewer)} links")
    return _pcie_rate(a, b)


def _nvlink_rate(links: List[Dict[str, Any]], kind: str, detail: str) -> LineRate:
    versions = {ln.get("version") for ln in links}
    if len(versions) != 1 or next(iter(versions)) not in NVLINK_GBPS_PER_LINK:
        return LineRate(None, kind, f"{detail}; NVLink version {sorted(map(str, versions))} has no known rate")
    v = next(iter(versions))
    per = NVLINK_GBPS_PER_LINK[v]
    return LineRate(round(per * len(links), 2), kind,
                    f"{detail} x {per} GB/s (NVLink {NVLINK_GENERATION[v]}) per direction")
