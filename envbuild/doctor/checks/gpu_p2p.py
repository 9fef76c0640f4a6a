"""gpu.p2p: peer access, bit-exact copies and P2P bandwidth of every GPU pair, against the NVML line rate."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from envbuild.doctor.registry import ProbeSpec, probe_check, verdict
from envbuild.report.model import Metric, Result, Status


@probe_check("gpu.p2p", "gpu", "P2P access matrix vs NVML, bit-exact copies both ways, uni/bidirectional GB/s vs "
             "line rate", needs=("gpu", "multi_gpu", "live"), causes=("N3", "N2", "D3"),
             probe=ProbeSpec("gpu_p2p.py", "the P2P probe", deadline_s={"quick": 90, "full": 300},
                             phase_deadlines={"init": 60, "*": 60}, ranks="one", hang_causes=("N3", "D3"),
                             crash_causes=("N3", "D3")))
def gpu_p2p(ctx, run) -> List[Result]:
    """One process sees every selected GPU and measures each pair (checks/gpu_p2p.py); judged here against
    the line rate computed from the NVML snapshot (envbuild/doctor/linerate.py)."""
    data = run.launch(["--mode", run.mode]).ranks[0].result or {}
    if data.get("status") == "skip":
        return [verdict(Status.SKIP, str(data.get("summary")))]
    return evaluate(data.get("evidence") or {}, ctx.facts.nvml(), run.gpus)


def _nvml_index(dev: Dict[str, Any], snapshot: Dict[str, Any], gpus: Sequence[int]) -> int:
    """NVML index of a CUDA device: by PCI bus id when the probe reported one, else the launcher's order."""
    from envbuild.doctor.linerate import norm_bus

    bus = norm_bus(dev.get("pci_bus_id"))
    for d in snapshot.get("devices") or []:
        if bus and norm_bus(d.get("pci_bus_id")) == bus:
            return int(d["index"])
    return gpus[dev["cuda_index"]]


def evaluate(ev: Dict[str, Any], snapshot: Dict[str, Any], gpus: Sequence[int]) -> List[Result]:
    """One Result per GPU pair from the probe's evidence and the NVML snapshot (pure; tested in CI)."""
    from envbuild.doctor.linerate import pair_line_rate
    from envbuild.doctor.probes import worst
    from envbuild.doctor.thresholds import P2P_BIDIR_BAND, P2P_SOURCE, P2P_UNI_BAND, band_verdict

    nv = {d["cuda_index"]: _nvml_index(d, snapshot, gpus) for d in ev.get("devices") or []}
    by_pair = {(q["src"], q["dst"]): q for q in ev.get("pairs") or []}
    bidir = {(b["a"], b["b"]): b for b in ev.get("bidirectional") or []}
    results = []
    for (a, b) in sorted(bidir) or sorted({tuple(sorted(k)) for k in by_pair}):
        ga, gb = nv.get(a, a), nv.get(b, b)
        rate = pair_line_rate(snapshot, ga, gb)
        statuses: List[str] = []
        notes: List[str] = []
        causes: List[str] = []
        metrics: List[Metric] = []
        evidence: Dict[str, Any] = {"line_rate": rate.__dict__, "directions": []}
        for (s, d) in ((a, b), (b, a)):
            q = by_pair.get((s, d))
            if q is None:
                continue
            gs, gd = nv.get(s, s), nv.get(d, d)
            evidence["directions"].append(q)
            nv_p2p = (snapshot.get("p2p") or {}).get(f"{gs}-{gd}") or {}
            nvml_ok = nv_p2p.get("read") == "ok" or nv_p2p.get("nvlink") == "ok"
            if nvml_ok and not q.get("can_access"):
                statuses.append("fail")
                causes += ["N3"]
                notes.append(f"GPU {gs}->{gd}: NVML reports P2P ok but CUDA cannot access the peer")
            elif q.get("can_access") and nv_p2p and not nvml_ok:
                statuses.append("warn")
                notes.append(f"GPU {gs}->{gd}: CUDA reports peer access, NVML says {nv_p2p}")
            if str(q.get("peer_access", "")).startswith("failed"):
                statuses.append("fail")
                causes += ["N3"]
                notes.append(f"GPU {gs}->{gd}: enabling peer access {q['peer_access']}")
            if q.get("mismatched_words"):
                statuses.append("fail")
                causes += ["N3", "D3"]
                notes.append(f"GPU {gs}->{gd}: {q['mismatched_words']} words corrupted in a "
                             f"{q.get('verify_bytes', 0) >> 20} MiB copy")
            uni = q.get("uni_gbps")
            if uni is not None and rate.gbps:
                frac = uni / rate.gbps
                v = band_verdict(frac, P2P_UNI_BAND)
                statuses.append(v)
                if v != "pass":
                    causes += ["N3", "N2"]
                    notes.append(f"GPU {gs}->{gd}: {uni:.0f} GB/s = {frac:.2f} of the {rate.gbps:.0f} GB/s line rate")
                metrics.append(Metric(f"gpu{gs}->gpu{gd}.uni_gbps", uni, "GB/s",
                                      expect=f">= {P2P_UNI_BAND.warn_below} x {rate.gbps:.0f} GB/s ({rate.link})",
                                      source=P2P_SOURCE))
                metrics.append(Metric(f"gpu{gs}->gpu{gd}.uni_fraction", round(frac, 3), "ratio"))
            elif uni is not None:
                metrics.append(Metric(f"gpu{gs}->gpu{gd}.uni_gbps", uni, "GB/s"))
        bd = bidir.get((a, b))
        if bd and rate.gbps:
            frac = bd["bidir_gbps"] / (2 * rate.gbps)
            v = band_verdict(frac, P2P_BIDIR_BAND)
            statuses.append(v)
            if v != "pass":
                causes += ["N3", "N2"]
                notes.append(f"both ways at once: {bd['bidir_gbps']:.0f} GB/s = {frac:.2f} of 2 x {rate.gbps:.0f}")
            metrics.append(Metric(f"gpu{ga}<->gpu{gb}.bidir_gbps", bd["bidir_gbps"], "GB/s",
                                  expect=f">= {P2P_BIDIR_BAND.warn_below} x 2 x {rate.gbps:.0f} GB/s",
                                  source=P2P_SOURCE))
            metrics.append(Metric(f"gpu{ga}<->gpu{gb}.bidir_fraction", round(frac, 3), "ratio"))
        evidence["bidirectional"] = bd
        if rate.gbps is None:
            notes.append(f"bandwidth not judged: {rate.detail}")
        status = worst(Status(s) for s in statuses)
        passed = status is Status.PASS
        summary = "; ".join(notes) if notes and not passed else _pass_summary(ga, gb, rate, by_pair, a, b, bd)
        results.append(verdict(status, summary, evidence=evidence, metrics=metrics,
                              causes=sorted(set(causes)), subject=f"gpu{ga}<->gpu{gb}",
                              remediation=None if passed else _REMEDY))
    return results


_REMEDY = ("check `nvidia-smi topo -m` and `nvidia-smi nvlink -s` for inactive links, Xid errors in the kernel "
           "log, and on PCIe boxes ACS/IOMMU (`lspci -vvv | grep ACSCtl`); NCCL_P2P_DISABLE=1 only hides it")


def _pass_summary(ga: int, gb: int, rate, by_pair, a: int, b: int, bd: Optional[Dict[str, Any]]) -> str:
    ab, ba = by_pair.get((a, b), {}), by_pair.get((b, a), {})
    line = f"{rate.gbps:.0f} GB/s" if rate.gbps else "unknown"
    parts = [f"copies exact; {ab.get('uni_gbps')} / {ba.get('uni_gbps')} GB/s one way"]
    if bd:
        parts.append(f"{bd['bidir_gbps']} GB/s both ways")
    return f"GPU {ga}<->{gb} ({rate.link}, line rate {line} per direction): " + ", ".join(parts)
