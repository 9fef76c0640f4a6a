"""NCCL: which release this env runs against the image's (C2), and how many copies it can load (C3)."""
from __future__ import annotations

import os

from envbuild.doctor.registry import check, verdict
from envbuild.facts import stack_view as sv
from envbuild.report.model import Result, Status

# Why the NCCL release matters under slime, with the fixes that sit between common releases
# (research/error999.md §2 C2, from the NCCL release notes).
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
        status = Status.FAIL if comp.severity == "fail" else Status.WARN
        where = "; ".join(f"{k} = {v}" for k, v in bad.items())
        return verdict(status,
                      f"NCCL {next(iter(bad.values()))} differs from the image's {comp.version} ({where}). "
                      f"Why it matters: {NCCL_WHY}",
                      evidence=evidence, causes=["C2", "M4"],
                      remediation=f"pip install {comp.pip_name or 'nvidia-nccl-cu12'}=={comp.version} "
                                  "(and remove any other NCCL from the library path)")
    return verdict(Status.PASS,
                  f"NCCL {next(iter(seen.values()))} as in {ctx.profile.name}", evidence=evidence)


@check("stack.nccl_copies", "stack", "exactly one libnccl is mapped and the reachable copies agree", causes=("C3",))
def nccl_copies(ctx) -> Result:
    """Every copy is SONAME libnccl.so.2 and the first one loaded wins, so two copies let trainer and
    rollout (or torch and cupy/pynccl) run different NCCL builds in one communicator."""
    stack = ctx.facts.stack()
    maps = sv.distinct_files(sv.mapped(stack, "libnccl"))
    reach = sv.distinct_files(sv.reachable(stack, "libnccl"))
    rows = []
    for real, e in sorted(reach.items()):
        rows.append({"path": e["path"], "real": real, "version": e.get("version"), "origins": e.get("origins"),
                     "mapped": real in maps or e["path"] in {m["path"] for m in maps.values()}})
    evidence = {"mapped": [{"path": m["path"], "version": m.get("version")} for m in maps.values()],
                "reachable": rows}
    if len(maps) > 1:
        desc = ", ".join(f"{m['path']} ({m.get('version') or '?'})" for m in maps.values())
        return verdict(Status.FAIL,
                      f"{len(maps)} different libnccl files are mapped into one process: {desc}",
                      evidence=evidence, causes=["C3"],
                      remediation="keep one NCCL: remove the conda/system copy from LD_LIBRARY_PATH and the ld.so "
                                  "cache, and point SGLANG_NCCL_SO_PATH/VLLM_NCCL_SO_PATH at torch's "
                                  "site-packages/nvidia/nccl/lib/libnccl.so.2")
    versions = {r["version"] for r in rows if r["version"]}
    if len(versions) > 1:
        in_use = next((m.get("version") for m in maps.values()), None)
        desc = "; ".join(f"{r['path']} = {r['version'] or '?'} via {','.join(r['origins'] or [])}" for r in rows)
        return verdict(Status.WARN,
                      f"{len(rows)} libnccl copies with different versions are reachable ({desc}); this process maps "
                      f"{in_use or 'none'}, but a library that asks for libnccl.so.2 by name (cupy, sglang's pynccl) "
                      "can load another",
                      evidence=evidence, causes=["C3"],
                      remediation="remove the extra copies or keep them off LD_LIBRARY_PATH and the ld.so cache; "
                                  "set SGLANG_NCCL_SO_PATH to the mapped copy")
    if not rows and not maps:
        return verdict(Status.PASS,
                      "no libnccl reachable (a torch that links NCCL statically, or no NCCL at all)", evidence=evidence)
    one = next(iter(maps.values()), None) or next(iter(reach.values()))
    return verdict(Status.PASS,
                  f"one NCCL: {os.path.basename(one['path'])} {one.get('version') or ''} at {os.path.dirname(one['path'])}"
                  + (f" ({len(rows)} reachable paths, same version)" if len(rows) > 1 else ""),
                  evidence=evidence)
