"""node.driver_version: one NVIDIA driver version everywhere: kernel module = NVML = libnvidia-ml = the libcuda a
process maps.

Causes (envbuild/knowledge/causes.toml, with their sources): D2 (module/userspace mismatch), C1 (the libcuda a process maps).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts import node_parse as P
from envbuild.facts import stack_view as sv
from envbuild.facts.source import FactHung, FactUnavailable
from envbuild.report.model import Result, Status

# What CUDA and NVML report in this run's processes when the kernel module and the user-space driver differ
# (doctor/fold.py folds those failures under this check): 803, "version mismatch", cudaErrorSystemDriverMismatch.
MISMATCH_EXPLAINS = [r"[Vv]ersion mismatch", r"cudaErrorSystemDriverMismatch", r"Error 803\b",
                     r"unsupported display driver"]
# A driver that does not answer NVML does not answer CUDA either: the node checks that asked for NVML error, and the
# stack probe's CUDA/NCCL init hangs until its deadline (docs/gpu-runs/s18/probe-summary.txt).
HUNG_EXPLAINS = [r"NVML gave no answer", r"did not finish within [\d.]+ s", r"did not answer within [\d.]+ s"]

CAT = "node"


def _stack_libcuda(ctx) -> Dict[str, Any]:
    """The libcuda the env's python mapped after CUDA init, from the stack payload (envbuild/facts/stack.py:
    `mapped` entries of family libcuda, and `cuda_driver` = cuDriverGetVersion of the first one).

    Empty when the stack facts are unavailable: the driver verdict then rests on the node alone."""
    try:
        stack = ctx.facts.stack()
    except FactUnavailable:
        return {}
    libs = sv.mapped(stack, "libcuda")
    driver = stack.get("cuda_driver") if isinstance(stack.get("cuda_driver"), dict) else {}
    return {
        "libcuda_mapped": [{"path": m.get("realpath") or m.get("path"), "file_version": m.get("file_version"),
                            "stub": bool(m.get("stub")), "compat": bool(m.get("compat"))} for m in libs],
        "cuDriverGetVersion": driver.get("version_code"),
    }


@check("node.driver_version", CAT, "One NVIDIA driver version: kernel module = NVML = libnvidia-ml = libcuda",
       needs=("stack",), causes=("D2", "C1", "D3"))
def driver_version(ctx) -> Result:
    """The kernel module, NVML, the libnvidia-ml this process maps and the installed/mapped libcuda must agree.

    A mismatch is what a driver upgrade without a reboot leaves behind (D2): NVML fails with
    'Driver/library version mismatch' and CUDA init returns 803/999."""
    module = F.driver_module(ctx.facts)
    try:
        snap = ctx.facts.nvml()
        nvml_error = None
    except FactHung as exc:  # a driver that does not answer: the node's fault, and the root of what hangs after it
        return verdict(Status.FAIL, str(exc), causes=["D3"], evidence={"nvml": str(exc), "explains": HUNG_EXPLAINS},
                       remediation="look for `NVRM: Xid`, a GSP timeout or a GPU fallen off the bus in `dmesg`; "
                                   "`nvidia-smi -q` hanging too confirms it; reset the GPU (`nvidia-smi -r -i N`, "
                                   "no process on it) or reboot the node, then rerun")
    except FactUnavailable as exc:
        snap, nvml_error = {}, str(exc)
    if module is None and nvml_error is not None:
        why = nvml_error[len("no NVIDIA driver: "):] if nvml_error.startswith("no NVIDIA driver: ") else nvml_error
        reason = f"no NVIDIA driver: kernel module not loaded (no /proc/driver/nvidia/version); {why}"
        if ctx.require_gpu:
            return verdict(Status.FAIL, reason, causes=["D2"],
                          remediation="install and load the NVIDIA driver (or run on a GPU node); "
                                      "--require-gpu makes a driverless node a failure")
        return verdict(Status.SKIP, reason)

    versions: Dict[str, Optional[str]] = {"kernel_module": module.version if module else None}
    evidence: Dict[str, Any] = {"proc_driver_version": module.line if module else None,
                                "open_kernel_module": module.open_module if module else None}
    if nvml_error is not None:
        evidence["nvml"] = nvml_error
        if "mismatch" in nvml_error.lower():
            return verdict(Status.FAIL,
                          f"NVML refuses to start: Driver/library version mismatch (kernel module {versions['kernel_module']})",
                          evidence={**evidence, "explains": MISMATCH_EXPLAINS}, causes=["D2"],
                          remediation="reboot (or unload and reload the nvidia modules) so the kernel module matches "
                                      "the installed user-space driver; hold the driver packages afterwards")
    else:
        versions["nvml"] = snap.get("driver_version")
        evidence["cuda_driver_version"] = snap.get("cuda_driver_version")
        # NVML has just loaded libnvidia-ml into this process: its file name carries the user-space version.
        try:
            maps = ctx.facts.read_text("/proc/self/maps")
            nvml_libs = P.mapped_libraries(maps, "libnvidia-ml")
            evidence["libnvidia_ml_mapped"] = nvml_libs
            for path in nvml_libs:
                v = P.version_from_soname(path, "libnvidia-ml")
                if v:
                    versions["libnvidia_ml_mapped"] = v
        except FactUnavailable as exc:
            evidence["libnvidia_ml_mapped"] = f"unreadable: {exc}"
    installed = _installed_libcuda(ctx)
    evidence["libcuda_installed"] = installed
    for path, target in installed.items():
        v = P.version_from_soname(target, "libcuda")
        if v and "compat" not in path and "stubs" not in path:
            versions.setdefault("libcuda_installed", v)
    stack = _stack_libcuda(ctx)
    if stack:
        evidence["stack_payload"] = stack
        for lib in stack.get("libcuda_mapped", []):
            v = lib.get("file_version") or P.version_from_soname(lib.get("path") or "", "libcuda")
            # a forward-compat or stub libcuda differs from the module by design: stack.* checks judge those (C1/C7/C8)
            if v and not lib.get("compat") and not lib.get("stub"):
                versions["libcuda_mapped"] = v
    evidence["versions"] = versions
    known = {k: v for k, v in versions.items() if v}
    ref = versions.get("kernel_module") or versions.get("nvml")
    odd = {k: v for k, v in known.items() if v != ref}
    kind = "open" if module and module.open_module else "proprietary" if module else "unknown"
    if module is None:
        return verdict(Status.WARN,
                      f"NVML answers (driver {versions.get('nvml')}) but /proc/driver/nvidia/version is absent; "
                      "cannot compare with the kernel module", evidence=evidence, causes=["D2"],
                      remediation="check that this is the host (not a container without /proc/driver) and that "
                                  "the nvidia module is loaded (lsmod | grep nvidia)")
    if odd:
        listing = ", ".join(f"{k} {v}" for k, v in known.items())
        return verdict(Status.FAIL, f"driver versions disagree: {listing}",
                      evidence={**evidence, "explains": MISMATCH_EXPLAINS}, causes=["D2"],
                      remediation="reboot or reload the nvidia modules so the kernel module matches the user-space "
                                  "driver (libcuda, libnvidia-ml); never mix driver packages from two releases")
    return verdict(Status.PASS,
                  f"driver {ref} ({kind} kernel module) everywhere: " + ", ".join(sorted(known)),
                  evidence=evidence)


def _installed_libcuda(ctx) -> Dict[str, str]:
    """{path from `ldconfig -p`: the file it links to} for libcuda.so.1 (the loader's choice comes first)."""
    try:
        res = ctx.facts.command("ldconfig-p")
    except FactUnavailable:
        return {}
    out: Dict[str, str] = {}
    for ln in res.stdout.splitlines():
        s = ln.strip()
        if s.startswith("libcuda.so.1 ") and "=>" in s:
            path = s.split("=>", 1)[1].strip()
            try:
                out[path] = ctx.facts.readlink(path)
            except (OSError, FactUnavailable):
                out[path] = path
    return out
