"""stack.torch: the env's torch libraries load, it is a CUDA build, CUDA and NCCL initialise (C6, C10), and its Python
requirements are met (U5)."""
from __future__ import annotations

import re
from typing import Optional, Tuple

from envbuild.data.checks._common import LOADER_TRACE, RESOLVED_INIT
from envbuild.doctor.registry import check, verdict
from envbuild.doctor.signatures import causes_in_text
from envbuild.facts import stack_view as sv
from envbuild.report.model import Result, Status


CUDA_ERRORS_DOC = "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html (enum cudaError)"
# What cudaGetDeviceCount's error means (the CUDA runtime API's enum cudaError) and the causes it points to.
CUDA_INIT_ERRORS = {
    3: ("cudaErrorInitializationError", "the CUDA driver and runtime could not be initialized", ["D4", "D2", "O4"]),
    34: ("cudaErrorStubLibrary", "the CUDA driver loaded is a stub library, not the real driver", ["C7"]),
    35: ("cudaErrorInsufficientDriver", "the installed NVIDIA driver is older than the CUDA runtime library",
         ["D9", "C1"]),
    46: ("cudaErrorDevicesUnavailable", "every CUDA device is busy or unavailable (exclusive compute mode, held "
         "by another process)", ["D7"]),
    100: ("cudaErrorNoDevice", "the installed CUDA driver detected no CUDA-capable device", ["C4", "D5"]),
    101: ("cudaErrorInvalidDevice", "the device ordinal is not a valid CUDA device (CUDA_VISIBLE_DEVICES)", ["C4"]),
    802: ("cudaErrorSystemNotReady", "the system is not yet ready to start CUDA work (on NVSwitch systems: the "
          "fabric manager)", ["N2"]),
    803: ("cudaErrorSystemDriverMismatch", "the display driver and the CUDA driver (libcuda) versions do not match",
          ["C8", "D2"]),
    804: ("cudaErrorCompatNotSupportedOnDevice", "forward compatibility was set up, but the visible GPU does not "
          "support it", ["C8"]),
    805: ("cudaErrorMpsConnectionFailed", "the MPS client could not connect to the MPS control daemon", ["D8"]),
    999: ("cudaErrorUnknown", "an unknown internal error (often nvidia_uvm missing or broken)", ["D4", "D1"]),
}
# Without a usable driver a CUDA build of torch reports one of these: the node has no GPU to use, not a fault.
NO_DRIVER_CODES = (35, 100)


def cuda_error_code(text: str) -> Optional[int]:
    """The CUDA error number in the probe's 'cudaGetDeviceCount: Error 803 <name>: <text>'."""
    m = re.search(r"Error (\d+)", text or "")
    return int(m.group(1)) if m else None


def judge_cuda_error(text: str) -> Tuple[str, list]:
    """(what the error means, its causes) for the summary; the CUDA docs' meaning when the code is known."""
    code = cuda_error_code(text)
    if code in CUDA_INIT_ERRORS:
        name, meaning, causes = CUDA_INIT_ERRORS[code]
        return f"CUDA error {code} {name}: {meaning}", list(causes)
    return f"CUDA error: {text}", causes_in_text(text) or ["C1", "D9"]


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
    # Where the probe's seconds went (the static doctor's critical path: 3.15 s on a node's first run, 1.1-1.2 s
    # after, docs/gpu-runs/s7): the main thread's phases and the inventory thread beside them.
    evidence["probe_s"] = {"elapsed": stack.get("elapsed_s"), "phases": stack.get("phase_s"),
                           "inventory": stack.get("inventory_s")}
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
    cuda_error = t.get("cuda_error")
    if cuda_error and not t.get("cuda_available"):  # CUDA refused: judged, not reported as "no GPU visible"
        no_driver = ctx.nvml_unavailable_reason()
        code = cuda_error_code(cuda_error)
        evidence["cuda_error_code"] = code
        if not (no_driver is not None and code in NO_DRIVER_CODES and not ctx.require_gpu):
            meaning, causes = judge_cuda_error(cuda_error)
            evidence["cuda_error_source"] = CUDA_ERRORS_DOC
            return verdict(Status.FAIL,
                          f"torch {t['version']}: CUDA reports no usable GPU, {meaning} ({cuda_error})",
                          evidence=evidence, causes=causes,
                          remediation="see stack.libcuda_compat, stack.libcuda_stub, stack.cuda_runtime_driver and "
                                      "node.driver_version for the libcuda this env loads and the kernel driver")
    what = f"torch {t['version']} (CUDA {t['cuda']}, NCCL {t.get('nccl_version') or '?'}, cuDNN {t.get('cudnn_version') or '?'})"
    if t.get("cuda_available"):
        what += f"; {t.get('device_count')} GPU(s) visible; " + (
            "CUDA tensor and a 1-rank NCCL group initialised" if init.get("nccl_group") else "CUDA initialised")
    elif init.get("source") == LOADER_TRACE and not str(init.get("method", "")).startswith(RESOLVED_INIT):
        # create's gate: the libraries were resolved, never loaded
        what += "; libraries resolved by the dynamic loader's trace, not loaded: CUDA and NCCL not initialised"
    else:
        libraries = ("those the dynamic loader's trace resolved" if init.get("source") == LOADER_TRACE
                     else "those `import torch` maps")
        what += f"; no GPU visible, so CUDA and NCCL were not initialised (libraries are {libraries})"
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
