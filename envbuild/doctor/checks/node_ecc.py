"""node.ecc: no uncorrectable ECC errors, no pending or failed row remaps or page retirements (NVML).

Causes (envbuild/knowledge/causes.toml, with their sources): D3 (ECC, remap).
"""
from __future__ import annotations

from typing import List

from envbuild.doctor.checks._xid import XID_DOC
from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.report.model import Metric, Result, Status

CAT = "node"


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
