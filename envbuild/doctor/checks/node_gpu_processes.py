"""node.gpu_processes: no compute processes already hold the GPUs.

Causes (envbuild/knowledge/causes.toml, with their sources): D7 (stale processes from a crashed run).
"""
from __future__ import annotations

from typing import Any, Dict

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts.source import FactUnavailable
from envbuild.report.model import Metric, Result, Status

CAT = "node"


@check("node.gpu_processes", CAT, "No compute processes already holding the GPUs", causes=("D7",))
def gpu_processes(ctx) -> Result:
    """Compute processes NVML lists before a job starts: leftovers of a crashed run hold memory and contexts."""
    devs = F.devices(ctx.facts)
    if all(d.get("processes") is None for d in devs):
        raise FactUnavailable("NVML did not list compute processes: "
                              + str(devs[0].get("errors", {}).get("processes", "unknown")))
    held: Dict[str, Any] = {}
    total_mib = 0
    for d in devs:
        procs = d.get("processes") or []
        if procs:
            held[f"gpu{d['index']}"] = procs
            total_mib += sum(p.get("used_memory_mib") or 0 for p in procs)
    metrics = [Metric("gpu_compute_processes", sum(len(v) for v in held.values()), "processes", "0 before a job",
                      "envbuild/knowledge/causes.toml D7")]
    if not held:
        return verdict(Status.PASS, f"no compute process on {len(devs)} GPU(s)", metrics=metrics)
    pids = sorted({p["pid"] for v in held.values() for p in v})
    return verdict(Status.WARN,
                  f"{len(pids)} process(es) hold {total_mib} MiB on {', '.join(held)} (pids {pids[:8]}): "
                  "leftovers of a crashed run if no job should be running", evidence={"processes": held},
                  metrics=metrics, causes=["D7"],
                  remediation="if no job should run: `ray stop`, then kill those pids; check with "
                              "nvidia-smi --query-compute-apps=pid,used_memory --format=csv")
