"""stack.tms_hook: torch_memory_saver has its native preload hook for torch's CUDA major (C9)."""
from __future__ import annotations

import os

from envbuild.doctor.registry import check, verdict
from envbuild.facts import stack_view as sv
from envbuild.report.model import Result, Status


@check("stack.tms_hook", "stack", "torch_memory_saver has its preload hook for torch's CUDA major", causes=("C9", "M3"))
def tms_hook(ctx) -> Result:
    """slime --offload-train LD_PRELOADs torch_memory_saver_hook_mode_preload_cu<major>; a python-only build
    (no --no-build-isolation) lacks it: 'Only hook_mode=preload supports pauseable CUDA Graph'."""
    from envbuild.facts.source import FactUnavailable

    stack = ctx.facts.stack()
    tms = stack.get("torch_memory_saver")
    if not tms:
        raise FactUnavailable("torch_memory_saver is not installed in this env (needed only for --offload-train)")
    t = sv.require_torch(stack)
    major = sv.torch_cuda_major(stack)
    hooks = [os.path.basename(h) for h in tms.get("hook_files") or []]
    evidence = {"location": tms.get("location"), "version": tms.get("version"), "hook_files": hooks,
                "torch_cuda": t.get("cuda")}
    fix = (f"rebuild it for CUDA {major}: TMS_CUDA_MAJOR={major} pip install --no-build-isolation "
           "'torch_memory_saver @ git+https://github.com/fzyzcjy/torch_memory_saver@<profile commit>'")
    preload = [h for h in hooks if "preload" in h]
    if major is not None:
        right = [h for h in preload if f"cu{major}" in h]
        unsuffixed = [h for h in preload if "_cu1" not in h]
        if right or unsuffixed:
            return verdict(Status.PASS,
                          f"torch_memory_saver preload hook for CUDA {major}: {(right or unsuffixed)[0]}",
                          evidence=evidence)
        if preload:
            return verdict(Status.FAIL,
                          f"torch_memory_saver has preload hooks only for another CUDA major ({', '.join(preload)}); "
                          f"torch is CUDA {t.get('cuda')}", evidence=evidence, causes=["C9"], remediation=fix)
    if not hooks:
        return verdict(Status.FAIL,
                      "torch_memory_saver is a python-only build: no native hook library, so --offload-train fails "
                      "('Only hook_mode=preload supports pauseable CUDA Graph')",
                      evidence=evidence, causes=["C9"], remediation=fix)
    return verdict(Status.WARN,
                  f"torch_memory_saver has native hooks ({', '.join(hooks)}) but no preload hook for torch's CUDA",
                  evidence=evidence, causes=["C9"], remediation=fix)
