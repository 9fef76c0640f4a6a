"""stack.cudnn_version: the cuDNN torch loads equals the profile's (C9)."""
from __future__ import annotations

from envbuild.doctor.registry import check, verdict
from envbuild.doctor.verdict import mismatch_status
from envbuild.facts import stack_view as sv
from envbuild.report.model import Result, Status


@check("stack.cudnn_version", "stack", "cuDNN torch loads equals the profile's", needs=("profile",), causes=("C9",))
def cudnn_version(ctx) -> Result:
    """cuDNN changes kernels and numerics; slime's conda recipe and its image differ here (9.16 vs 9.19)."""
    stack = ctx.facts.stack()
    t = sv.require_torch(stack)
    comp = ctx.profile.components.get("cudnn")
    if comp is None or not comp.version:
        return verdict(Status.SKIP, f"profile {ctx.profile.name} pins no cuDNN version")
    seen = {}
    if t.get("cudnn_version"):
        seen["torch.backends.cudnn.version()"] = t["cudnn_version"]
    for m in sv.main_library(sv.mapped(stack, "libcudnn"), "libcudnn.so"):
        if m.get("api_version"):
            seen[f"mapped {m['path']}"] = m["api_version"]
    d = sv.dist(stack, comp.pip_name or "nvidia-cudnn-cu12")
    if d:
        seen[f"pip {d['name']}"] = d["version"]
    evidence = {"profile": comp.version, "seen": seen, "source": comp.source}
    if not seen:
        return verdict(Status.SKIP, "torch reports no cuDNN and no libcudnn is mapped",
                      evidence=evidence)
    bad = {k: v for k, v in seen.items() if not sv.version_matches(comp.version, v)}
    if bad:
        status = mismatch_status(comp.severity)
        where = "; ".join(f"{k} = {v}" for k, v in bad.items())
        return verdict(status,
                      f"cuDNN differs from the image's {comp.version} ({where}): {comp.why}",
                      evidence=evidence, causes=["C9"],
                      remediation=f"pip install {comp.pip_name or 'nvidia-cudnn-cu12'}=={comp.version}")
    return verdict(Status.PASS,
                  f"cuDNN {next(iter(seen.values()))} as in {ctx.profile.name}", evidence=evidence)
