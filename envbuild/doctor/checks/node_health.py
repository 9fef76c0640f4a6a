"""GPU hardware health from the kernel log and NVML: Xid, ECC / row remapping, PCIe link, NVLink, P2P matrix.

Research: error999.md §2 D3 (Xid, ECC, remap: 999 is the classic symptom, a reset is needed), N3 (P2P broken),
§4 "Hardware errors" and "P2P". Xid meanings: NVIDIA's Xid catalog, https://docs.nvidia.com/deploy/xid-errors/.
"""
from __future__ import annotations

from typing import Any, Dict, List

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts import node_parse as P
from envbuild.facts.source import FactUnavailable
from envbuild.report.model import Metric, Result, Status

CAT = "node"
XID_DOC = "NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors); research/error999.md D3"

# Xids that mean the GPU (or its memory / links / firmware) needs a reset or service. Others (13, 31, 43, 45,
# ...) are usually raised by an application's own fault and only warn.
CRITICAL_XIDS = {
    48: "double-bit ECC error", 63: "row remapping event", 64: "row remapping failure", 74: "NVLink error",
    79: "GPU has fallen off the bus", 92: "high single-bit ECC rate", 94: "contained ECC error",
    95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error", 140: "unrecovered ECC error",
    154: "GPU recovery action required",
}


@check("node.kernel_log", CAT, "No Xid, fallen-off-the-bus, GSP or reset-required lines in the kernel log",
       causes=("D3", "D1"))
def kernel_log(ctx) -> Result:
    """Scan this boot's kernel log for NVRM Xid lines and GPU-fatal messages (D3); uvm_hmm traces point at D1."""
    text, source = F.kernel_log(ctx.facts)
    events = P.scan_kernel_log(text)
    critical = [e for e in events if (e.kind == "xid" and e.xid in CRITICAL_XIDS)
                or e.kind in ("fallen_off_bus", "gsp_timeout", "reset_required")]
    hmm = [e for e in events if e.kind == "uvm_hmm"]
    other = [e for e in events if e not in critical and e not in hmm]
    evidence: Dict[str, Any] = {"source": source, "lines_scanned": len(text.splitlines()),
                                "events": [e.line for e in events][:20]}
    metrics = [Metric("xid_events", sum(e.kind == "xid" for e in events), "count", "0", XID_DOC)]
    if critical:
        first = critical[0]
        what = (f"Xid {first.xid} ({CRITICAL_XIDS[first.xid]}) on PCI {first.pci}" if first.kind == "xid"
                else first.kind.replace("_", " "))
        return verdict(Status.FAIL, f"{len(critical)} GPU-fatal kernel event(s), first: {what}",
                      evidence=evidence, metrics=metrics, causes=["D3"],
                      remediation="drain the node, reset the GPU (nvidia-smi -r) or reboot; if it recurs, RMA. "
                                  "Runs on this GPU fail with 999 until then")
    if hmm:
        return verdict(Status.WARN, f"{len(hmm)} nvidia_uvm HMM line(s) in the kernel log",
                      evidence=evidence, metrics=metrics, causes=["D1"],
                      remediation="disable HMM: options nvidia_uvm uvm_disable_hmm=1, then reboot")
    if other:
        xids = sorted({e.xid for e in other if e.xid is not None})
        return verdict(Status.WARN,
                      f"{len(other)} non-fatal GPU kernel event(s)" + (f" (Xid {', '.join(map(str, xids))})" if xids else "")
                      + ": usually an application fault; check the time against failed runs",
                      evidence=evidence, metrics=metrics, causes=["D3", "M5"],
                      remediation="match the timestamps with the failing job; Xid 13/31/43 come from a faulting kernel")
    return verdict(Status.PASS, f"no Xid or GPU-fatal lines in {len(text.splitlines())} kernel log lines ({source})",
                  evidence=evidence, metrics=metrics)


@check("node.ecc", CAT, "No uncorrectable ECC errors, no pending or failed row remaps or page retirements",
       causes=("D3",))
def ecc(ctx) -> List[Result]:
    """Per GPU: volatile uncorrectable ECC, remapped rows pending/failed, retired pages pending (D3).

    Pending remaps and retirements take effect only after a GPU reset; until then the GPU may fault (999)."""
    out: List[Result] = []
    for d in F.devices(ctx.facts):
        gpu = f"gpu{d['index']}"
        ecc_mode = d.get("ecc_mode") or {}
        unc = d.get("ecc_uncorrected") or {}
        rows = d.get("remapped_rows") or {}
        pages = d.get("retired_pages") or {}
        ev = {"ecc_mode": ecc_mode, "ecc_uncorrected": unc, "remapped_rows": d.get("remapped_rows"),
              "retired_pages": pages, "nvml_errors": {k: v for k, v in d.get("errors", {}).items()
                                                      if k.startswith(("ecc", "remapped", "retired"))}}
        metrics = [Metric("ecc_uncorrected_volatile", unc.get("volatile") or 0, "count", "0", XID_DOC),
                   Metric("ecc_uncorrected_aggregate", unc.get("aggregate") or 0, "count", "0", XID_DOC),
                   Metric("remapped_rows_uncorrectable", rows.get("uncorrectable") or 0, "rows", None, XID_DOC)]
        problems = []
        if rows.get("pending"):
            problems.append("row remapping pending (needs a GPU reset)")
        if rows.get("failure"):
            problems.append("row remapping FAILED (the GPU needs service)")
        if pages.get("pending"):
            problems.append("page retirement pending (needs a GPU reset)")
        if (unc.get("volatile") or 0) > 0:
            problems.append(f"{unc['volatile']} uncorrectable ECC error(s) since the driver loaded")
        if problems:
            out.append(verdict(Status.FAIL, f"{gpu}: " + "; ".join(problems), evidence=ev,
                              metrics=metrics, causes=["D3"], subject=gpu,
                              remediation="drain the GPU and reset it (nvidia-smi -r -i N) or reboot; "
                                          "a remap failure or repeated errors mean RMA"))
            continue
        readings = [d.get("ecc_mode"), unc.get("volatile"), unc.get("aggregate"), d.get("remapped_rows"),
                    pages.get("pending")]
        if all(v is None for v in readings):
            out.append(verdict(Status.SKIP,
                              f"{gpu}: NVML gave no ECC readings ({ev['nvml_errors'] or 'not supported'})",
                              evidence=ev, subject=gpu))
            continue
        if ecc_mode and not ecc_mode.get("current"):
            out.append(verdict(Status.WARN, f"{gpu}: ECC is disabled; memory errors go unseen",
                              evidence=ev, metrics=metrics, causes=["D3"], subject=gpu,
                              remediation="enable ECC (nvidia-smi -e 1) and reboot"))
            continue
        if (unc.get("aggregate") or 0) > 0 or (pages.get("double_bit") or 0) > 0:
            out.append(verdict(Status.WARN,
                              f"{gpu}: {unc.get('aggregate')} uncorrectable ECC error(s) in the GPU's lifetime, "
                              "none since the driver loaded and nothing pending", evidence=ev, metrics=metrics,
                              causes=["D3"], subject=gpu, remediation="watch this GPU; RMA if the count grows"))
            continue
        out.append(verdict(Status.PASS,
                          f"{gpu}: ECC on, 0 uncorrectable, no remap or retirement pending", evidence=ev,
                          metrics=metrics, subject=gpu))
    return out


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
