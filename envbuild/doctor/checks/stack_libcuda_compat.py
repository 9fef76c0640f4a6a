"""stack.libcuda_compat: a forward-compat (cuda-compat) libcuda is only used where it works (C8, C1)."""
from __future__ import annotations

import re
from typing import List, Optional

from envbuild.doctor.checks._libcuda import libcuda_rows
from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts import stack_view as sv
from envbuild.facts.source import FactUnavailable
from envbuild.report.model import Result, Status

# What CUDA reports in this env's processes when the compat libcuda does not work here (doctor/fold.py folds
# those failures, stack.torch's included, under this check): CUDA runtime API enum cudaError 803 and 804.
EXPLAINS = [r"cudaErrorSystemDriverMismatch", r"cudaErrorCompatNotSupportedOnDevice", r"Error 80[34]\b",
            r"forward compatibility was attempted", r"unsupported display driver"]


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


def _num(v: Optional[str]) -> List[int]:
    return [int(x) for x in re.findall(r"\d+", v or "")]


@check("stack.libcuda_compat", "stack", "a forward-compat libcuda is only used where it works", causes=("C8", "C1"))
def libcuda_compat(ctx) -> Result:
    """cuda-compat's libcuda works only on datacenter GPUs and only when it is newer than the kernel driver;
    elsewhere CUDA fails with 803 (unsupported combination) or 804 (forward compat on unsupported HW)."""
    stack = ctx.facts.stack()
    ev = libcuda_rows(stack)
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
                      "forward compatibility (CUDA error 804)", evidence={**ev, "explains": EXPLAINS}, causes=["C8"],
                      remediation=fix)
    if "803" in api_err or "804" in api_err:
        return verdict(Status.FAIL,
                      f"the forward-compat libcuda {lib['path']} is {how} and fails: {api_err}",
                      evidence={**ev, "explains": EXPLAINS}, causes=["C8"], remediation=fix)
    if kernel and compat_ver and _num(compat_ver)[:1] <= _num(kernel)[:1]:
        return verdict(Status.FAIL,
                      f"the forward-compat libcuda {compat_ver} ({lib['path']}) is {how} but is not newer than the "
                      f"kernel driver {kernel}: an unsupported driver combination (CUDA error 803)",
                      evidence={**ev, "explains": EXPLAINS}, causes=["C8"], remediation=fix)
    if not kernel or not compat_ver:
        return verdict(Status.WARN,
                      f"the forward-compat libcuda {lib['path']} is {how}; the kernel driver "
                      f"({kernel or 'unknown'}) or its version ({compat_ver or 'unknown'}) cannot be compared",
                      evidence=ev, causes=["C8", "C1"], remediation=fix)
    return verdict(Status.WARN,
                  f"forward compat in use: libcuda {compat_ver} on kernel driver {kernel}; it works only on datacenter "
                  "GPUs with a supported driver branch, and bare-metal envs without it run another user-mode driver "
                  "than this one", evidence=ev, causes=["C1"], remediation=fix)
