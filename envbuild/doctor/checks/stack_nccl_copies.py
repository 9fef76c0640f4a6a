"""stack.nccl_copies: one libnccl mapped, and the copies the env can load agree (C3)."""
from __future__ import annotations

import os

from envbuild.doctor.registry import check, verdict
from envbuild.facts import stack_view as sv
from envbuild.report.model import Result, Status


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
