"""stack.cuda_wheel_mix: every installed CUDA wheel is built for one CUDA major (C6)."""
from __future__ import annotations

from envbuild.doctor.registry import check, verdict
from envbuild.facts import stack_view as sv
from envbuild.report.model import Result, Status


@check("stack.cuda_wheel_mix", "stack", "all CUDA wheels are built for one CUDA major", causes=("C6",))
def cuda_wheel_mix(ctx) -> Result:
    """cu12 and cu13 wheels share site-packages/nvidia/* files and need different drivers; sglang >= 0.5.12
    pulls cu13 defaults into cu129 stacks (slime's build_conda.sh removes that 'cu13 spill')."""
    stack = ctx.facts.stack()
    majors = sv.cuda_majors(stack)
    tmajor = sv.torch_cuda_major(stack)
    evidence = {"by_cuda_major": {str(k): v for k, v in sorted(majors.items())}, "torch_cuda_major": tmajor}
    if tmajor is not None:
        majors.setdefault(tmajor, [])
    dups = {n: [c.get("location") for c in copies] for n, copies in sv.dist_map(stack).items() if len(copies) > 1}
    if dups:
        evidence["installed_twice"] = dups
    if len(majors) > 1:
        other = sorted(m for m in majors if m != tmajor) if tmajor is not None else sorted(majors)[1:]
        wrong = [p for m in other for p in majors[m]]
        base = f"torch is cu{tmajor}" if tmajor is not None else f"cu{sorted(majors)[0]}"
        return verdict(Status.FAIL,
                      f"CUDA majors are mixed: {base}, but {', '.join(wrong[:6])}"
                      + (f" and {len(wrong) - 6} more" if len(wrong) > 6 else "") + f" are built for CUDA "
                      + "/".join(str(m) for m in other),
                      evidence=evidence, causes=["C6"],
                      remediation="pip uninstall the wheels of the other major, then force-reinstall the "
                                  f"cu{tmajor or sorted(majors)[0]} ones (shared files under site-packages/nvidia "
                                  "were overwritten); pin cuda-python to the same major")
    only = next(iter(majors), None)
    return verdict(Status.PASS,
                  f"every CUDA wheel is built for CUDA {only}" if only else "no CUDA-specific wheels installed",
                  evidence=evidence)
