"""node.pcie_link: every GPU's PCIe link at its maximum width (NVML).

Causes (envbuild/knowledge/causes.toml, with their sources): D3, N3.
"""
from __future__ import annotations

from typing import List

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.report.model import Metric, Result, Status

CAT = "node"


@check("node.pcie_link", CAT, "PCIe link width at its maximum (generation may drop at idle)", causes=("D3", "N3"))
def pcie_link(ctx) -> List[Result]:
    """A link trained narrower than its maximum (x8 of x16) is a seating/riser/retimer fault. A lower current
    generation is NOT a fault by itself: idle GPUs drop to gen1 to save power and go back up under load."""
    out: List[Result] = []
    for d in F.devices(ctx.facts):
        gpu = f"gpu{d['index']}"
        p = d.get("pcie") or {}
        wc, wm, gc, gm = p.get("width_current"), p.get("width_max"), p.get("gen_current"), p.get("gen_max")
        if wc is None or wm is None:
            out.append(verdict(Status.SKIP,
                              f"{gpu}: NVML gave no PCIe width ({d.get('errors', {}).get('pcie.width_current', '?')})",
                              subject=gpu))
            continue
        metrics = [Metric("pcie_width", wc, "lanes", f"== max x{wm}", "NVML max link width of this GPU/slot"),
                   Metric("pcie_gen", gc or 0, "gen", f"<= {gm} (lower at idle is normal)", "NVML")]
        if p.get("replay_counter") is not None:
            metrics.append(Metric("pcie_replays", p["replay_counter"], "count", None, "NVML"))
        gen_note = (f"; gen {gc} of {gm} now (idle GPUs downshift, not a fault)" if gc and gm and gc < gm
                    else f"; gen {gc}")
        if wc < wm:
            out.append(verdict(Status.WARN,
                              f"{gpu}: PCIe link trained at x{wc} of x{wm}: host<->GPU bandwidth is cut{gen_note}",
                              evidence=p, metrics=metrics, causes=["D3"], subject=gpu,
                              remediation="reseat the GPU / riser, check the slot and retimers; compare with "
                                          "`nvidia-smi -q -d PCIE` under load"))
        else:
            out.append(verdict(Status.PASS, f"{gpu}: PCIe x{wc} of x{wm}{gen_note}",
                              evidence=p, metrics=metrics, subject=gpu))
    return out
