"""The CUDA runtime and the user-mode driver (libcuda) this env really loads: versions, stubs, compat."""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from envbuild.data.checks._common import cuda_version_string
from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts import stack_view as sv
from envbuild.facts.source import FactUnavailable
from envbuild.report.model import Result, Status


def _driver_cuda(ctx, stack: Dict[str, Any]) -> Tuple[Optional[str], str]:
    """Driver's CUDA version: cuDriverGetVersion of the mapped libcuda, else NVML's."""
    drv = stack.get("cuda_driver") or {}
    if drv.get("version"):
        return drv["version"], f"cuDriverGetVersion of mapped {drv.get('path')}"
    try:
        code = ctx.facts.nvml().get("cuda_driver_version")
    except FactUnavailable:
        code = None
    if code:
        return cuda_version_string(int(code)), "NVML nvmlSystemGetCudaDriverVersion"
    return None, ""


def _kernel_driver(ctx) -> Optional[str]:
    """The kernel module's driver version (NVML, else /proc/driver/nvidia/version)."""
    try:
        v = ctx.facts.nvml().get("driver_version")
        if v:
            return v
    except FactUnavailable:
        pass
    try:
        module = F.driver_module(ctx.facts)
    except FactUnavailable:
        return None
    return module.version if module else None


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


def _libcuda_rows(stack: Dict[str, Any]) -> Dict[str, Any]:
    mapped = sv.mapped(stack, "libcuda")
    order = (stack.get("resolution") or {}).get("libcuda.so.1", [])
    return {"mapped": [{k: m.get(k) for k in ("path", "file_version", "api_version", "api_error", "stub", "compat")}
                       for m in mapped],
            "search_order_libcuda.so.1": order,
            "LD_LIBRARY_PATH": (stack.get("env") or {}).get("LD_LIBRARY_PATH")}


@check("stack.libcuda_stub", "stack", "no stub libcuda is loaded or first on the library path", causes=("C7",))
def libcuda_stub(ctx) -> Result:
    """The toolkit's stub libcuda only exists for linking; loaded at run time every call returns
    CUDA_ERROR_STUB_LIBRARY (34)."""
    stack = ctx.facts.stack()
    ev = _libcuda_rows(stack)
    fix = ("remove the stubs directory from LD_LIBRARY_PATH and /etc/ld.so.conf.d (then `ldconfig`); link against "
           "stubs only at build time")
    for m in sv.mapped(stack, "libcuda"):
        if m.get("stub") or "returned 34" in (m.get("api_error") or ""):
            return verdict(Status.FAIL,
                          f"the stub libcuda {m['path']} is loaded: every driver call returns CUDA_ERROR_STUB_LIBRARY",
                          evidence=ev, causes=["C7"], remediation=fix)
    order = ev["search_order_libcuda.so.1"]
    if order and order[0].get("stub"):
        return verdict(Status.FAIL,
                      f"the stub {order[0]['path']} is first in the loader's search for libcuda.so.1 (via "
                      f"{order[0]['origin']}): a process that loads the driver by name gets the stub",
                      evidence=ev, causes=["C7"], remediation=fix)
    where = ev["mapped"][0]["path"] if ev["mapped"] else (order[0]["path"] if order else None)
    return verdict(Status.PASS,
                  f"libcuda is the driver's ({where})" if where else "no libcuda loaded or on the search path; no stubs",
                  evidence=ev)


def _num(v: Optional[str]) -> List[int]:
    return [int(x) for x in re.findall(r"\d+", v or "")]


@check("stack.libcuda_compat", "stack", "a forward-compat libcuda is only used where it works", causes=("C8", "C1"))
def libcuda_compat(ctx) -> Result:
    """cuda-compat's libcuda works only on datacenter GPUs and only when it is newer than the kernel driver;
    elsewhere CUDA fails with 803 (unsupported combination) or 804 (forward compat on unsupported HW)."""
    stack = ctx.facts.stack()
    ev = _libcuda_rows(stack)
    compat = [m for m in sv.mapped(stack, "libcuda") if m.get("compat")]
    how = "mapped"
    if not compat:
        order = ev["search_order_libcuda.so.1"]
        if order and order[0].get("compat"):
            first = order[0]
            match = [r for r in sv.reachable(stack, "libcuda") if r.get("path") == first["path"]]
            compat = match or [dict(first)]
            how = f"first in the search for libcuda.so.1 (via {first['origin']})"
    if not compat:
        return verdict(Status.PASS, "no forward-compat (cuda-compat) libcuda in use",
                      evidence=ev)
    lib = compat[0]
    compat_ver = lib.get("file_version")
    kernel = _kernel_driver(ctx)
    names = sv.gpu_names(ctx.facts)
    ev.update({"compat_libcuda": lib.get("path"), "compat_version": compat_ver, "kernel_driver": kernel,
               "gpus": names})
    fix = ("remove cuda-compat from the library path (conda remove cuda-compat; drop /usr/local/cuda/compat from "
           "LD_LIBRARY_PATH) and use the host driver's libcuda, or upgrade the host driver")
    api_err = lib.get("api_error") or ""
    unsupported = [n for n in names if sv.forward_compat_supported(n) is False]
    if unsupported:
        return verdict(Status.FAIL,
                      f"the forward-compat libcuda {lib['path']} is {how}, but {unsupported[0]} does not support "
                      "forward compatibility (CUDA error 804)", evidence=ev, causes=["C8"], remediation=fix)
    if "803" in api_err or "804" in api_err:
        return verdict(Status.FAIL,
                      f"the forward-compat libcuda {lib['path']} is {how} and fails: {api_err}",
                      evidence=ev, causes=["C8"], remediation=fix)
    if kernel and compat_ver and _num(compat_ver)[:1] <= _num(kernel)[:1]:
        return verdict(Status.FAIL,
                      f"the forward-compat libcuda {compat_ver} ({lib['path']}) is {how} but is not newer than the "
                      f"kernel driver {kernel}: an unsupported driver combination (CUDA error 803)",
                      evidence=ev, causes=["C8"], remediation=fix)
    if not kernel or not compat_ver:
        return verdict(Status.WARN,
                      f"the forward-compat libcuda {lib['path']} is {how}; the kernel driver "
                      f"({kernel or 'unknown'}) or its version ({compat_ver or 'unknown'}) cannot be compared",
                      evidence=ev, causes=["C8", "C1"], remediation=fix)
    return verdict(Status.WARN,
                  f"forward compat in use: libcuda {compat_ver} on kernel driver {kernel}; it works only on datacenter "
                  "GPUs with a supported driver branch, and bare-metal envs without it run another user-mode driver "
                  "than this one", evidence=ev, causes=["C1"], remediation=fix)
