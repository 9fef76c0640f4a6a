"""node.kernel_log: no Xid, fallen-off-the-bus, GSP or reset-required lines in the kernel log.

Causes (envbuild/knowledge/causes.toml, with their sources): D3 (Xid: 999 is the classic symptom, a reset is needed). Xid meanings:
NVIDIA's Xid catalog, https://docs.nvidia.com/deploy/xid-errors/.
"""
from __future__ import annotations

from typing import Any, Dict

from envbuild.doctor.checks._xid import XID_DOC
from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts import node_parse as P
from envbuild.report.model import Metric, Result, Status

CAT = "node"

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
