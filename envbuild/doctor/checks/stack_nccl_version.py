"""stack.nccl_version: the NCCL release this env runs equals the image's (C2)."""
from __future__ import annotations

from envbuild.doctor.registry import check, verdict
from envbuild.doctor.verdict import mismatch_status
from envbuild.facts import stack_view as sv
from envbuild.report.model import Result, Status

# Why the NCCL release matters under slime, with the fixes that sit between common releases
# (envbuild/knowledge/causes.toml C2, from the NCCL release notes).
NCCL_WHY = ("slime destroys and re-creates every NCCL communicator at each offload/onload step "
            "(ReloadableProcessGroup), so init/teardown bugs differ by release: 2.27.6 fixed the current device "
            "changing across ncclCommDestroy/Abort, 2.27.7 fp8 symmetric-kernel init on pre-Blackwell GPUs, 2.28.7 "
            "crashes of new CUDA builds on older drivers and multicast-object leaks, 2.28.9 main/proxy ordering hangs")


@check("stack.nccl_version", "stack", "NCCL torch runs equals the image's", needs=("profile",), causes=("C2", "M4"))
def nccl_version(ctx) -> Result:
    """Compares NCCL's own banner from the probe's 1-rank group (the NCCL that really ran: a preloaded or
    path-first libnccl shows there, while torch.cuda.nccl.version() keeps reporting its build's), torch's report
    (without torch, the libnccl the loader mapped) and the pip wheel with the profile's NCCL. Extra mapped copies are stack.nccl_copies'."""
    stack = ctx.facts.stack()
    comp = ctx.profile.components.get("nccl")
    if comp is None or not comp.version:
        return verdict(Status.SKIP, f"profile {ctx.profile.name} pins no NCCL version")
    seen = {}
    t = sv.torch_info(stack)
    banner = sv.nccl_banner_version(stack)
    if banner:  # what ran: a preloaded or path-first libnccl shows here, not in torch's own report
        seen["NCCL's banner (the NCCL that ran)"] = banner
    if t.get("nccl_version"):
        seen["torch.cuda.nccl.version()"] = t["nccl_version"]
    mapped = {m["path"]: m.get("version") for m in sv.mapped(stack, "libnccl")}
    if not seen:  # no torch: the copy the loader mapped is what this env runs (copies: stack.nccl_copies)
        for path, v in mapped.items():
            if v:
                seen[f"mapped {path}"] = v
                break
    d = sv.dist(stack, comp.pip_name or "nvidia-nccl-cu12")
    if d:
        seen[f"pip {d['name']}"] = d["version"]
    evidence = {"profile": comp.version, "profile_source": comp.source, "profile_verified": comp.verified,
                "seen": seen, "mapped": mapped}
    if not seen:
        if not t.get("present"):
            sv.require_torch(stack)
        return verdict(Status.SKIP,
                      "no NCCL found: torch reports none, no libnccl is mapped and no NCCL wheel is installed",
                      evidence=evidence)
    bad = {k: v for k, v in seen.items() if not sv.version_matches(comp.version, v)}
    if bad:
        status = mismatch_status(comp.severity)
        where = "; ".join(f"{k} = {v}" for k, v in bad.items())
        return verdict(status,
                      f"NCCL {next(iter(bad.values()))} differs from the image's {comp.version} ({where}). "
                      f"Why it matters: {NCCL_WHY}",
                      evidence=evidence, causes=["C2", "M4"],
                      remediation=f"pip install {comp.pip_name or 'nvidia-nccl-cu12'}=={comp.version} "
                                  "(and remove any other NCCL from the library path)")
    return verdict(Status.PASS,
                  f"NCCL {next(iter(seen.values()))} as in {ctx.profile.name}", evidence=evidence)
