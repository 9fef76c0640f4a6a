"""node.nvlink: NVLink links up, no replays or recoveries (NVML).

Causes (envbuild/knowledge/causes.toml, with their sources): D3, N1.
"""
from __future__ import annotations

from typing import List

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.report.model import Metric, Result, Status

CAT = "node"

# nvmlNvlinkVersion_t -> NVLink generation (nvml.h: NVML_NVLINK_VERSION_1_0 = 1 ... NVML_NVLINK_VERSION_5_0 = 7)
_NVLINK_GEN = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0"}


@check("node.nvlink", CAT, "NVLink links up, no link replays or recoveries", causes=("D3", "N1"))
def nvlink(ctx) -> List[Result]:
    """Inactive links (some up, some down) and link replays / recoveries (retransmission and retraining, Xid 74
    territory, D3) slow or break NCCL. CRC counters are reported, not judged: the healthy lent H200 showed 1-24
    CRC-data errors per link with zero replays and recoveries (docs/gpu-runs/node-doctor-static.json), so a
    count without a rate says nothing (DCGM judges NVLink error *rates*)."""
    out: List[Result] = []
    for d in F.devices(ctx.facts):
        gpu = f"gpu{d['index']}"
        links = d.get("nvlink") or []
        if not links:
            out.append(verdict(Status.SKIP,
                              f"{gpu}: no NVLink reported ({d.get('errors', {}).get('nvlink', 'none')})", subject=gpu))
            continue
        active = [lk for lk in links if lk.get("active")]
        down = [lk["link"] for lk in links if not lk.get("active")]
        totals = {k: sum((lk.get("errors") or {}).get(k) or 0 for lk in links)
                  for k in ("replay", "recovery", "crc_flit", "crc_data")}
        metrics = [Metric("nvlink_active", len(active), "links", f"== {len(links)}", "NVML link count of this GPU")]
        metrics += [Metric(f"nvlink_{k}_errors", v, "count", "0" if k in ("recovery", "replay") else None,
                           "NVML NVLink error counters since driver load") for k, v in totals.items()]
        ev = {"links": len(links), "active": len(active), "down": down,
              "nvlink_versions": sorted({_NVLINK_GEN.get(lk.get("version"), str(lk.get("version")))
                                         for lk in links if lk.get("version")}),
              "remote": sorted({lk.get("remote_pci") for lk in active if lk.get("remote_pci")}), "errors": totals}
        if not active:
            out.append(verdict(Status.PASS, f"{gpu}: no active NVLink ({len(links)} links present, "
                              "none trained): PCIe-only GPU", evidence=ev, metrics=metrics, subject=gpu))
        elif down:
            out.append(verdict(Status.WARN,
                              f"{gpu}: {len(down)} of {len(links)} NVLinks down (links {down[:8]})",
                              evidence=ev, metrics=metrics, causes=["D3"], subject=gpu,
                              remediation="reset the GPU or reboot; if links stay down, service the baseboard"))
        elif totals["recovery"] or totals["replay"]:
            out.append(verdict(Status.WARN,
                              f"{gpu}: NVLink {totals['recovery']} recoveries, {totals['replay']} replays since the "
                              "driver loaded: links retrain or retransmit", evidence=ev, metrics=metrics,
                              causes=["D3"], subject=gpu,
                              remediation="watch the counters under load (nvidia-smi nvlink -e); rising counts need service"))
        else:
            out.append(verdict(Status.PASS,
                              f"{gpu}: {len(active)}/{len(links)} NVLinks active (NVLink "
                              f"{'/'.join(ev['nvlink_versions']) or '?'}), no replays or recoveries",
                              evidence=ev, metrics=metrics, subject=gpu))
    return out
