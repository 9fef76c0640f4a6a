"""node.wsl: not WSL, where NCCL's cuMem path is not functional.

Causes (envbuild/knowledge/causes.toml, with their sources): M1/D8 (WSL).
"""
from __future__ import annotations

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts.source import FactUnavailable
from envbuild.report.model import Result, Status

CAT = "node"


@check("node.wsl", CAT, "Not WSL (NCCL's cuMem path is not functional there)", causes=("M1", "D8"))
def wsl(ctx) -> Result:
    release = F.kernel_release(ctx.facts)
    if release is None:
        raise FactUnavailable("/proc/sys/kernel/osrelease is absent")
    if "microsoft" in release.lower() or "wsl" in release.lower():
        return verdict(Status.WARN, f"running under WSL (kernel {release}): NCCL's cuMem allocations fail with 999",
                      evidence={"kernel": release}, causes=["M1", "D8"],
                      remediation="use a Linux host for multi-GPU runs; under WSL set NCCL_CUMEM_ENABLE=0 (NVIDIA/nccl #1653)")
    return verdict(Status.PASS, f"not WSL (kernel {release})", evidence={"kernel": release})
