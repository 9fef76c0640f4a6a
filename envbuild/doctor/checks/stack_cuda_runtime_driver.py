"""stack.cuda_runtime_driver: the driver supports the CUDA runtime this env really loads (D9, C1, C10)."""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from envbuild.data.checks._common import cuda_version_string
from envbuild.doctor.registry import check, verdict
from envbuild.facts import stack_view as sv
from envbuild.facts.source import FactHung, FactUnavailable
from envbuild.report.model import Result, Status


def _driver_cuda(ctx, stack: Dict[str, Any]) -> Tuple[Optional[str], str]:
    """Driver's CUDA version: cuDriverGetVersion of the mapped libcuda, else NVML's."""
    drv = stack.get("cuda_driver") or {}
    if drv.get("version"):
        return drv["version"], f"cuDriverGetVersion of mapped {drv.get('path')}"
    try:
        code = ctx.facts.nvml().get("cuda_driver_version")
    except FactHung:  # a driver that does not answer is not a missing one: the runner's error, folded under D3
        raise
    except FactUnavailable:
        code = None
    if code:
        return cuda_version_string(int(code)), "NVML nvmlSystemGetCudaDriverVersion"
    return None, ""


@check("stack.cuda_runtime_driver", "stack", "the driver supports the CUDA runtime torch loads", causes=("D9", "C1", "C10"))
def cuda_runtime_driver(ctx) -> Result:
    """A runtime newer than the driver's CUDA fails outright across majors (error 35) and runs with a
    limited feature set within one major (minor-version compatibility: PTX/JIT failures)."""
    stack = ctx.facts.stack()
    t = sv.torch_info(stack)
    rt = stack.get("cuda_runtime") or {}
    runtime = rt.get("version") or t.get("cuda")
    runtime_src = f"cudaRuntimeGetVersion of mapped {rt.get('path')}" if rt.get("version") else "torch.version.cuda"
    driver, driver_src = _driver_cuda(ctx, stack)
    cudarts = sv.distinct_files(sv.mapped(stack, "libcudart"))
    evidence = {"runtime": runtime, "runtime_source": runtime_src, "driver_cuda": driver, "driver_source": driver_src,
                "torch.version.cuda": t.get("cuda"),
                "mapped_libcudart": [{"path": m["path"], "version": m.get("api_version")} for m in cudarts.values()]}
    if runtime is None:
        raise FactUnavailable("no CUDA runtime mapped and torch reports no CUDA version")
    majors = {sv.major_minor(m.get("api_version"))[0] for m in cudarts.values() if sv.major_minor(m.get("api_version"))}
    if len(majors) > 1:
        return verdict(Status.FAIL,
                      "libcudart of CUDA majors " + " and ".join(str(m) for m in sorted(majors))
                      + " are mapped into one process: cu12 and cu13 pieces are mixed",
                      evidence=evidence, causes=["C6"],
                      remediation="reinstall the extensions of the wrong major (see stack.cuda_wheel_mix)")
    if driver is None:
        raise FactUnavailable("no driver: no libcuda mapped and NVML is not available, so the driver's CUDA "
                              f"version is unknown (runtime {runtime})")
    r, d = sv.major_minor(runtime), sv.major_minor(driver)
    if r and d and r[0] > d[0]:
        return verdict(Status.FAIL,
                      f"CUDA runtime {runtime} is newer than the driver's CUDA {driver}: across majors this fails with "
                      "'CUDA driver version is insufficient for CUDA runtime version'",
                      evidence=evidence, causes=["D9", "C6", "C1"],
                      remediation=f"upgrade the driver to one that supports CUDA {runtime} (>= 580 for CUDA 13), or "
                                  "use the profile's cu12 build")
    if r and d and r > d:
        return verdict(Status.WARN,
                      f"CUDA runtime {runtime} is newer than the driver's CUDA {driver}: minor-version compatibility "
                      "only (PTX from newer toolchains and JIT kernels can fail); the image may run a forward-compat "
                      "libcuda here instead",
                      evidence=evidence, causes=["D9", "C1"],
                      remediation=f"upgrade the driver to one that supports CUDA {runtime}")
    tv = sv.major_minor(t.get("cuda"))
    if rt.get("version") and tv and sv.major_minor(rt["version"]) != tv:
        return verdict(Status.WARN,
                      f"the mapped libcudart is CUDA {rt['version']} but torch was built for {t.get('cuda')}",
                      evidence=evidence, causes=["C10"],
                      remediation="keep the CUDA runtime from the nvidia-cuda-runtime wheel torch depends on; remove "
                                  "other libcudart directories from LD_LIBRARY_PATH")
    if len(cudarts) > 1:
        return verdict(Status.WARN,
                      f"{len(cudarts)} libcudart copies are mapped: " + ", ".join(cudarts),
                      evidence=evidence, causes=["C9", "C10"],
                      remediation="rebuild the extensions against torch's CUDA runtime wheel")
    return verdict(Status.PASS,
                  f"CUDA runtime {runtime} on a driver supporting CUDA {driver}", evidence=evidence)
