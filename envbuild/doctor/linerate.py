"""Line rates computed from the NVML snapshot (envbuild/facts/nvml.py): of one GPU pair (gpu.p2p) and of a
set of GPUs (the collectives, comm.nccl_collectives: the slowest pair bounds the set).

Why computed and not a constant: thresholds must scale with the topology NVML reports
(active links x per-link rate), so one rule serves an 18-link H200 pair, an H800 with fewer links, an
NVSwitch board and a PCIe box. A pair joined by no active NVLink falls back to its PCIe link.

Per-link rates are per direction, as `nvidia-smi nvlink -s` prints them:
- NVLink 4 (H100/H200/H800): 26.5625 GB/s; read on the lent 2xH200 machine as 18 x 26.562 GB/s =
  478 GB/s per direction (measured on the lent 2xH200, 2026-11-29). NVIDIA's marketing figure is 25 GB/s (450 GB/s per
  direction; NVIDIA in NVIDIA/nccl-tests#212, open-mpi/hwloc#574); the measured signalling rate is used so the fraction is honest.
- NVLink 2.x/3.x (V100, A100): 25 GB/s per link per direction (A100: 12 links = 300 GB/s per direction).
- NVLink 5 (B200): 50 GB/s per link per direction (18 links = 900 GB/s, "1.8 TB/s" bidirectional).
- NVLink 1 (P100): 20 GB/s.
PCIe per lane, per direction, after line encoding: gen1 0.25, gen2 0.5, gen3 0.985, gen4 1.969,
gen5 3.938, gen6 7.563 GB/s (PCI-SIG raw rates 2.5/5/8/16/32/64 GT/s; 8b/10b up to gen2, 128b/130b
from gen3). A gen5 x16 link: 63 GB/s (PCIe 5.0 x16: 32 GT/s x 16 lanes, 128b/130b); maximum, not current,
generation (see _pcie_rate).
When the text of `nvidia-smi nvlink -s` is given, the per-link rate it prints takes precedence over the
table (26.562 GB/s on the lent H200s).
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

# nvmlDeviceGetNvLinkVersion values (NVML_NVLINK_VERSION_*: 1_0=1, 2_0=2, 2_2=3, 3_0=4, 3_1=5, 4_0=6, 5_0=7).
NVLINK_GBPS_PER_LINK = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 25.0, 6: 26.5625, 7: 50.0}
NVLINK_GENERATION = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0"}
PCIE_GBPS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


@dataclass(frozen=True)
class LineRate:
    """Per-direction line rate of a GPU pair (or the slowest pair of a set) and how it was derived."""

    gbps: Optional[float]  # None: NVML could not say
    link: str  # "nvlink" | "pcie" | "unknown"
    detail: str
    links: int = 0  # active NVLinks counted (0 for PCIe)
    per_link_gbps: float = 0.0  # per NVLink, per direction (0 for PCIe)

    def describe(self) -> str:
        """One line for the report's evidence."""
        if self.gbps is None:
            return f"unknown: {self.detail}"
        return f"{self.gbps:.0f} GB/s per direction: {self.detail}"


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


def norm_bus(bus: Optional[str]) -> str:
    """A PCI address as bus:device.function in lower case ("3b:00.0"), "" for none.

    NVML prints 00000000:3B:00.0, lspci and torch 0000:3b:00.0: the domain's width and the case differ, so
    addresses from different sources are compared on this form."""
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
    return LineRate(round(min(rates), 3), "pcie", "PCIe: " + ", ".join(parts))


def pair_line_rate(snapshot: Dict[str, Any], i: int, j: int,
                   smi_rates: Optional[Dict[int, List[float]]] = None) -> LineRate:
    """Per-direction line rate between NVML devices i and j.

    `smi_rates` (nvlink_rates_from_smi): when either GPU has a positive rate there, the slowest of
    them is the per-link rate instead of the NVLink version's.

    Direct NVLinks: active links of i whose remote end is j's PCI address, x per-link rate.
    NVSwitch (or a remote end NVML does not name): links of i whose remote is not another GPU, when NVML
    says the pair talks over NVLink; the pair is bounded by the GPU with fewer such links.
    Otherwise the PCIe link (see _pcie_rate).
    """
    a, b = _device(snapshot, i), _device(snapshot, j)
    smi = [r for g in (i, j) for r in (smi_rates or {}).get(g, []) if r > 0]
    gpu_buses = {norm_bus(d.get("pci_bus_id")) for d in snapshot.get("devices") or []}
    bus_b = norm_bus(b.get("pci_bus_id"))
    direct = [ln for ln in _active_links(a) if norm_bus(ln.get("remote_pci")) == bus_b and bus_b]
    if direct:
        return _nvlink_rate(direct, f"{len(direct)} active NVLinks GPU {i} -> GPU {j}", smi)
    p2p = (snapshot.get("p2p") or {}).get(f"{i}-{j}") or {}
    if p2p.get("nvlink") == "ok":
        sw_a = [ln for ln in _active_links(a) if norm_bus(ln.get("remote_pci")) not in gpu_buses]
        sw_b = [ln for ln in _active_links(b) if norm_bus(ln.get("remote_pci")) not in gpu_buses]
        if sw_a and sw_b:
            fewer = sw_a if len(sw_a) <= len(sw_b) else sw_b
            hidden = all(norm_bus(ln.get("remote_pci")) in ("", "ff:ff.0") for ln in sw_a + sw_b)
            where = ("NVML does not name the remote end (FFFFFFFF:FF:FF.0: a VM or NVSwitch hides it) and "
                     "reports NVLink P2P ok for the pair" if hidden else "links end on NVSwitches")
            return _nvlink_rate(fewer, f"GPU {i} {len(sw_a)} and GPU {j} {len(sw_b)} active NVLinks, {where}; "
                                       f"the pair is bounded by the fewer: {len(fewer)} links", smi)
    return _pcie_rate(a, b)


def _nvlink_rate(links: List[Dict[str, Any]], detail: str, smi: List[float]) -> LineRate:
    if smi:
        per, source = min(smi), "nvidia-smi nvlink -s"
    else:
        versions = {ln.get("version") for ln in links}
        if len(versions) != 1 or next(iter(versions)) not in NVLINK_GBPS_PER_LINK:
            return LineRate(None, "nvlink", f"{detail}; NVLink version {sorted(map(str, versions))} has no known rate",
                            links=len(links))
        v = next(iter(versions))
        per, source = NVLINK_GBPS_PER_LINK[v], f"NVLink {NVLINK_GENERATION[v]}"
    return LineRate(round(per * len(links), 3), "nvlink", f"{detail} x {per} GB/s ({source}) per direction",
                    links=len(links), per_link_gbps=per)


def line_rate(snapshot: Dict[str, Any], gpus: Sequence[int], smi_nvlink: Optional[str] = None) -> Optional[LineRate]:
    """Per-GPU, per-direction line rate of the set `gpus` (NVML indices) for collectives: the slowest pair.

    `smi_nvlink` is the text of `nvidia-smi nvlink -s`, whose per-link rates take precedence. None when
    fewer than two of `gpus` are in the snapshot or NVML did not report enough to rate some pair.
    """
    known = {d.get("index") for d in snapshot.get("devices") or []}
    chosen = [g for g in gpus if g in known]
    if len(chosen) < 2:
        return None
    smi = nvlink_rates_from_smi(smi_nvlink) if smi_nvlink else None
    pairs = {(i, j): pair_line_rate(snapshot, i, j, smi) for i, j in itertools.combinations(chosen, 2)}
    if any(r.gbps is None for r in pairs.values()):
        return None
    (i, j), slowest = min(pairs.items(), key=lambda kv: kv[1].gbps)
    if len(pairs) == 1:
        return slowest
    return LineRate(slowest.gbps, slowest.link, f"slowest of {len(pairs)} pairs, GPU {i}<->{j}: {slowest.detail}",
                    links=slowest.links, per_link_gbps=slowest.per_link_gbps)
