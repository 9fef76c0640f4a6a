"""node.persistence_mode: persistence mode on for every GPU.

Causes (envbuild/knowledge/causes.toml, with their sources): D6 (persistence).
"""
from __future__ import annotations

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts.source import FactUnavailable
from envbuild.report.model import Result, Status

CAT = "node"


@check("node.persistence_mode", CAT, "Persistence mode on for every GPU", causes=("D6",))
def persistence_mode(ctx) -> Result:
    """Without persistence the driver tears GPU state down between processes; inits get slow and flaky (D6)."""
    devs = F.devices(ctx.facts)
    off = [d["index"] for d in devs if d.get("persistence_mode") is False]
    unknown = [d["index"] for d in devs if d.get("persistence_mode") is None]
    evidence = {f"gpu{d['index']}": d.get("persistence_mode") for d in devs}
    if off:
        return verdict(Status.WARN, f"persistence mode is off on GPU {', '.join(map(str, off))}",
                      evidence=evidence, remediation="enable nvidia-persistenced (systemctl enable --now nvidia-persistenced)")
    if len(unknown) == len(devs):
        raise FactUnavailable("NVML did not report persistence mode: "
                              + devs[0].get("errors", {}).get("persistence_mode", "unknown"))
    return verdict(Status.PASS, f"persistence mode on for {len(devs) - len(unknown)} GPU(s)",
                  evidence=evidence)
