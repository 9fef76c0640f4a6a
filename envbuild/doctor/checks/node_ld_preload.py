"""node.ld_preload: /etc/ld.so.preload injects nothing into CUDA processes.

Causes (envbuild/knowledge/causes.toml, with their sources): D8 (interposers in /etc/ld.so.preload).
"""
from __future__ import annotations

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.report.model import Result, Status

CAT = "node"


@check("node.ld_preload", CAT, "/etc/ld.so.preload injects nothing into CUDA processes", causes=("D8",))
def ld_preload(ctx) -> Result:
    """A global preload (GPU-sharing interposers such as HAMi's libvgpu.so) wraps driver calls in every process."""
    text = F.read_optional(ctx.facts, "/etc/ld.so.preload")
    if text is None:
        return verdict(Status.PASS, "no /etc/ld.so.preload")
    entries = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if not entries:
        return verdict(Status.PASS, "/etc/ld.so.preload is empty", evidence={"text": text[:200]})
    return verdict(Status.WARN, f"/etc/ld.so.preload loads {', '.join(entries)} into every process",
                  evidence={"entries": entries}, causes=["D8"],
                  remediation="remove GPU interposers from /etc/ld.so.preload on training nodes "
                              "(HAMi: CUDA_DISABLE_CONTROL=true); see cause D8")
