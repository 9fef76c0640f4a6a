"""The side-by-side table: every component of the profile's image against this env, with why a
mismatch matters. The terminal report prints the rows as a table (envbuild/report/terminal.py)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from envbuild.doctor.registry import check, verdict
from envbuild.facts import stack_view as sv
from envbuild.report.model import Result, Status

# Which cause a mismatch of a component points to (envbuild/knowledge/causes.toml); others default to C9.
_CAUSE = {"nccl": "C2", "cuda": "C6", "torch": "C10", "cuda_python": "C6", "sglang_kernel": "C6", "sgl_deep_gemm": "C6",
          "sglang": "M4", "megatron": "M4", "cudnn": "C9"}
_GENERIC_WHY = {"fail": "the image's code paths were built and tested against this pin",
                "warn": "may change kernels or numerics", "info": "informational"}


def env_value(stack: Dict[str, Any], comp) -> Tuple[Optional[str], Optional[str], str]:
    """(version, commit, where) of a profile component in the probed env; (None, None, why) if absent."""
    t = sv.torch_info(stack)
    name = comp.name
    if name == "cuda":
        return t.get("cuda"), None, "torch.version.cuda"
    if name == "python":
        return (stack.get("python") or {}).get("version"), None, "sys.version_info"
    if name == "torch" and t.get("present"):
        return t.get("version"), None, "torch.__version__"
    if name == "nccl":
        v, where = sv.nccl_version_in_use(stack)
        if v:
            return v, None, where
    if name == "cudnn":
        d = sv.dist_any_flavour(stack, comp.pip_name or "nvidia-cudnn-cu12")
        if d:
            return d["version"], None, f"pip {d['name']}"
        if t.get("cudnn_version"):
            return t["cudnn_version"], None, "torch.backends.cudnn.version()"
    if name in ("sglang", "megatron"):
        src = sv.source_package(stack, name, comp.pip_name or name)
        if src.commit or src.version:
            return src.version, src.commit, (f"git checkout {src.git['root']}" if src.git.get("commit") else
                                             f"pip {src.pkg.get('distribution') or (src.dist or {}).get('name')}")
        return None, None, "not installed"
    if comp.pip_name:
        d = sv.dist_any_flavour(stack, comp.pip_name)
        if d:
            return d.get("version"), d.get("commit"), f"pip {d['name']}"
        return None, None, "not installed"
    return None, None, "not checked (no distribution name in the profile)"


def _other_flavour(comp, where: str) -> Optional[str]:
    """The installed distribution's name when it is another CUDA flavour than the profile's pip_name."""
    if not comp.pip_name or not where.startswith("pip "):
        return None
    installed = where[4:]
    return installed if sv.canonical(installed) != sv.canonical(comp.pip_name) else None


def compare(stack: Dict[str, Any], comp) -> Dict[str, Any]:
    """One row: component | image | this env | verdict (+ why, severity, source)."""
    version, commit, where = env_value(stack, comp)
    image = " @".join(x for x in (comp.version, comp.commit) if x)
    env = " @".join(x for x in (version, (commit or "")[:12] or None) if x) if (version or commit) else "-"
    if version is None and commit is None:
        verdict = "not checked" if where.startswith("not checked") else "missing"
    elif comp.commit and commit:
        verdict = "match" if sv.commit_matches(comp.commit, commit) else "differs"
    elif comp.version and version:
        tag = sv.torch_info(stack).get("cuda_tag") if comp.name != "torch" else None
        verdict = "match" if sv.version_matches(comp.version, version, tag) else "differs"
        if verdict == "match" and comp.commit and not commit:
            verdict = "match (commit unknown)"
    else:
        verdict = "unknown commit"
    flavour = _other_flavour(comp, where)
    if flavour and verdict != "missing":
        verdict = "differs"
        env = f"{env} ({flavour})"
    why = ""
    if verdict not in ("match", "match (commit unknown)", "not checked"):
        why = comp.why or _GENERIC_WHY.get(comp.severity, "")
    return {"component": comp.name, "image": image, "env": env, "verdict": verdict, "where": where,
            "severity": comp.severity, "why": why, "source": comp.source, "verified": comp.verified}


@check("stack.profile_match", "stack", "every component equals the reference image's (side-by-side table)",
       needs=("profile",), causes=("C2", "C6", "C9"))
def profile_match(ctx) -> Result:
    """A different component under slime's per-step communicator rebuild and weight sync is exactly the
    conda-vs-Docker difference; each row says why its mismatch matters."""
    stack = ctx.facts.stack()
    prof = ctx.profile
    rows: List[Dict[str, Any]] = [compare(stack, c) for c in prof.components.values()]
    differs = [r for r in rows if r["verdict"] == "differs"]
    missing = [r for r in rows if r["verdict"] in ("missing", "unknown commit") and r["severity"] != "info"]
    evidence = {"profile": prof.name, "image": prof.image, "rows": rows,
                "note": "image facts with verified=false come from the image's public build files, not from the image itself"}
    bad_fail = [r for r in differs if r["severity"] == "fail"]
    bad_warn = [r for r in differs if r["severity"] == "warn"]
    status = Status.FAIL if bad_fail else (Status.WARN if bad_warn or missing else Status.PASS)
    matched = sum(1 for r in rows if r["verdict"].startswith("match"))
    if status == Status.PASS:
        info = [r for r in differs if r["severity"] == "info"]
        return verdict(Status.PASS,
                      f"{matched} of {len(rows)} components equal {prof.image}"
                      + (f"; informational differences: {', '.join(r['component'] for r in info)}" if info else ""),
                      evidence=evidence)
    shown = bad_fail + bad_warn + missing
    parts = [f"{r['component']} {r['env']} (image {r['image']})" if r["verdict"] == "differs"
             else f"{r['component']} {r['verdict']}" for r in shown[:5]]
    causes: List[str] = []
    for r in (bad_fail or bad_warn or missing):
        c = _CAUSE.get(r["component"], "C9")
        if r["component"] == "torch" and "+cu" in r["env"] and r["env"].split("+cu")[1][:2] != r["image"].split("+cu")[-1][:2]:
            c = "C6"
        if c not in causes:
            causes.append(c)
    first = shown[0]
    return verdict(status,
                  f"{len(differs)} differ, {len(missing)} missing of {len(rows)} components vs {prof.image}: "
                  + "; ".join(parts) + (f" (+{len(shown) - 5} more)" if len(shown) > 5 else "")
                  + (f". {first['component']}: {first['why']}" if first.get("why") else ""),
                  evidence=evidence, causes=causes,
                  remediation=f"rebuild the env from the profile (envbuild create --profile {prof.name}) or install "
                              "the image's pins shown in the table")
