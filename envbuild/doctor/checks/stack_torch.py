"""stack.torch: the env's torch libraries load, it is a CUDA build, CUDA and NCCL initialise (C6, C10), and its Python
requirements are met (U5)."""
from __future__ import annotations

from envbuild.doctor.registry import check, verdict
from envbuild.doctor.signatures import causes_in_text
from envbuild.facts import stack_view as sv
from envbuild.report.model import Result, Status


@check("stack.torch", "stack", "torch's libraries load, it is a CUDA build, CUDA/NCCL initialise, its Python "
       "requirements are met", causes=("C6", "C10", "U5"))
def torch_present(ctx) -> Result:
    """The env's torch must be a CUDA build whose CUDA and NCCL initialise; a failure here names the cause
    the probe's error text matches (a stub libcuda, 803/804, an old driver)."""
    stack = ctx.facts.stack()
    t = sv.require_torch(stack)
    init = stack.get("init") or {}
    evidence = {k: t.get(k) for k in ("version", "cuda", "cuda_tag", "nccl_version", "cudnn_version",
                                       "cuda_available", "device_count", "arch_list", "file")}
    evidence["init"] = init
    if t.get("cuda_tag") == "cpu" or not t.get("cuda"):
        no_gpu = ctx.nvml_unavailable_reason()
        if no_gpu is not None and not ctx.require_gpu:
            return verdict(Status.SKIP,
                          f"torch {t.get('version')} is a CPU-only build and this node has no usable GPU driver "
                          f"({no_gpu}); pass --python/--prefix of the GPU environment on a GPU node",
                          evidence=evidence)
        return verdict(Status.FAIL,
                      f"torch {t.get('version')} is a CPU-only build: no CUDA, no NCCL",
                      evidence=evidence, causes=["C6"],
                      remediation="install the CUDA build of torch from the profile's index "
                                  "(e.g. --index-url https://download.pytorch.org/whl/cu129)")
    err = (stack.get("errors") or {}).get("init")
    if err:
        evidence["init_error"] = err
        return verdict(Status.FAIL,
                      f"torch {t['version']} could not initialise CUDA/NCCL: {err.splitlines()[0][:200]}",
                      evidence=evidence, causes=causes_in_text(err) or ["C1", "D9"],
                      remediation="see the stack.libcuda_* and stack.cuda_runtime_driver results for the library "
                                  "that was loaded; re-run with NCCL_DEBUG=INFO for the failing call")
    what = f"torch {t['version']} (CUDA {t['cuda']}, NCCL {t.get('nccl_version') or '?'}, cuDNN {t.get('cudnn_version') or '?'})"
    if t.get("cuda_available"):
        what += f"; {t.get('device_count')} GPU(s) visible; " + (
            "CUDA tensor and a 1-rank NCCL group initialised" if init.get("nccl_group") else "CUDA initialised")
    else:
        what += "; no GPU visible, so CUDA and NCCL were not initialised (libraries are those `import torch` maps)"
    unmet = sv.unmet_requirements(stack, "torch")
    if unmet:  # the probe loads torch's libraries without its Python part: what that part needs, pip check's way
        evidence["unmet_requirements"] = unmet
        return verdict(Status.WARN,
                      f"{what}; but torch's requirements are not met: {', '.join(unmet)}; `import torch`, or the "
                      "parts of torch that use them, can fail (ModuleNotFoundError, ImportError)",
                      evidence=evidence, causes=["U5"],
                      remediation="pip install " + " ".join(f"'{r.split(' (')[0]}'" for r in unmet) +
                                  " (then `pip check`)")
    return verdict(Status.PASS, what, evidence=evidence)
