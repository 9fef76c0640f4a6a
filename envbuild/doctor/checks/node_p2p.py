"""node.p2p: NVML reports P2P read/write between every GPU pair.

Causes (envbuild/knowledge/causes.toml, with their sources): N3 (P2P broken).
"""
from __future__ import annotations

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts.source import FactUnavailable
from envbuild.report.model import Metric, Result, Status

CAT = "node"


@check("node.p2p", CAT, "NVML reports P2P read/write between every GPU pair", causes=("N3",))
def p2p(ctx) -> Result:
    """NVML's P2P status matrix: a pair without P2P makes NCCL fall back to host memory, or hangs when ACS /
    IOMMU lets the driver think P2P works while the PCIe fabric drops it (N3)."""
    snap = ctx.facts.nvml()
    devs = F.devices(ctx.facts)
    if len(devs) < 2:
        raise FactUnavailable(f"only {len(devs)} GPU: no pair to check")
    matrix = snap.get("p2p") or {}
    if not matrix:
        raise FactUnavailable("NVML gave no P2P status: " + str(snap.get("errors", {}))[:200])
    bad = {pair: st for pair, st in matrix.items() if st.get("read") != "ok" or st.get("write") != "ok"}
    via_nvlink = sum(1 for st in matrix.values() if st.get("nvlink") == "ok")
    ev = {"matrix": matrix}
    metrics = [Metric("p2p_pairs_ok", len(matrix) - len(bad), "pairs", f"== {len(matrix)}", "NVML P2P status"),
               Metric("p2p_pairs_nvlink", via_nvlink, "pairs", None, "NVML P2P status")]
    if bad:
        listing = ", ".join(f"{k}: read {v.get('read')}, write {v.get('write')}" for k, v in list(bad.items())[:4])
        return verdict(Status.WARN, f"P2P unavailable on {len(bad)} of {len(matrix)} GPU pairs ({listing})",
                      evidence=ev, metrics=metrics, causes=["N3"],
                      remediation="on PCIe systems disable ACS / set iommu=pt (NCCL docs, ACS section); "
                                  "NCCL falls back to SHM, slower but correct")
    return verdict(Status.PASS, f"P2P read/write ok on all {len(matrix)} ordered GPU pairs "
                  f"({via_nvlink} over NVLink)", evidence=ev, metrics=metrics)
