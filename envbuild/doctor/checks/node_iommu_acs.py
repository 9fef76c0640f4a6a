"""IOMMU and PCIe ACS on the path between GPUs that talk over PCIe.

Causes (envbuild/knowledge/causes.toml, with their sources): N3. NCCL's troubleshooting guide (ACS section): with ACS source validation on a
PCIe switch, P2P writes are redirected to the root complex, which hangs or corrupts transfers; with the
IOMMU translating (not `iommu=pt`), P2P between devices can fail the same way. NVLink P2P does not cross
PCIe, so GPUs whose every pair talks over NVLink are not affected.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts import node_parse as P
from envbuild.facts.source import FactUnavailable
from envbuild.report.model import Result, Status

CAT = "node"
CID = "node.iommu_acs"
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def _upstream_bridges(ctx, bdf: str) -> List[str]:
    """PCI addresses above a GPU, from its sysfs link (…/pci0000:00/0000:00:01.0/0000:01:00.0)."""
    try:
        target = ctx.facts.readlink(f"/sys/bus/pci/devices/{bdf}")
    except (OSError, FactUnavailable):
        return []
    parts = [p for p in target.split("/") if _BDF.match(p)]
    return parts[:-1]


@check(CID, CAT, "No ACS redirect or translating IOMMU on PCIe P2P paths between GPUs", causes=("N3",))
def iommu_acs(ctx) -> Result:
    """IOMMU mode (/sys/class/iommu, /proc/cmdline) and ACSCtl of the bridges above each GPU (lspci -vvv)."""
    devs = F.devices(ctx.facts)
    matrix = ctx.facts.nvml().get("p2p") or {}
    cmdline = (F.read_optional(ctx.facts, "/proc/cmdline") or "").strip()
    iommu_units = F.listdir_optional(ctx.facts, "/sys/class/iommu") or []
    passthrough = bool(re.search(r"\biommu=pt\b|\biommu\.passthrough=1\b", cmdline))
    iommu_off = bool(re.search(r"\b(intel_iommu|amd_iommu)=off\b|\biommu=off\b", cmdline))
    evidence: Dict[str, Any] = {"cmdline": cmdline, "iommu_units": iommu_units, "iommu_passthrough": passthrough}
    if len(devs) < 2:
        return verdict(Status.PASS, "one GPU: no GPU-to-GPU P2P to break", evidence=evidence)
    pcie_pairs = [pair for pair, st in matrix.items() if st.get("nvlink") != "ok"]
    evidence["pcie_p2p_pairs"] = pcie_pairs
    if matrix and not pcie_pairs:
        return verdict(Status.PASS,
                      f"all {len(matrix)} GPU pairs use NVLink P2P; IOMMU ({'on' if iommu_units else 'off'}) "
                      "and ACS affect only PCIe P2P", evidence=evidence)
    acs_on: Dict[str, str] = {}
    try:
        lspci = ctx.facts.command("lspci-vvv").stdout
        acs = P.parse_lspci_acs(lspci)
        evidence["lspci_capabilities_visible"] = "ACSCtl" in lspci or "Capabilities: [" in lspci
        for d in devs:
            for bridge in _upstream_bridges(ctx, P.pci_short(d.get("pci_bus_id") or "")):
                line = acs.get(bridge)
                if line and "SrcValid+" in line:
                    acs_on[bridge] = line
    except FactUnavailable as exc:
        evidence["lspci"] = str(exc)
    evidence["acs_srcvalid_bridges"] = acs_on
    if acs_on:
        return verdict(Status.FAIL,
                      f"ACS source validation on {len(acs_on)} bridge(s) above the GPUs ({', '.join(sorted(acs_on))}): "
                      "PCIe P2P is redirected through the root complex (hangs, corruption)", evidence=evidence,
                      causes=["N3"],
                      remediation="disable ACS on those bridges (setpci -s BDF ECAP_ACS+0x6.w=0000, or in the BIOS); "
                                  "workaround NCCL_P2P_DISABLE=1")
    if iommu_units and not passthrough and not iommu_off:
        return verdict(Status.WARN,
                      f"IOMMU translating ({len(iommu_units)} unit(s), no iommu=pt) with {len(pcie_pairs)} GPU pair(s) "
                      "on PCIe P2P", evidence=evidence, causes=["N3"],
                      remediation="boot with iommu=pt (or intel_iommu=off / amd_iommu=off) on bare metal")
    return verdict(Status.PASS,
                  f"IOMMU {'passthrough' if passthrough else 'off' if not iommu_units or iommu_off else 'on'}, "
                  "no ACS redirect above the GPUs", evidence=evidence)
