"""Node checks on the NVIDIA driver itself: one driver version everywhere, nvidia_uvm and HMM, persistence, WSL.

Research: ../shared/research/error999.md §2 D1 (HMM on open modules), D2 (module/userspace mismatch),
D4 (nvidia_uvm), D6 (persistence), M1/D8 (WSL), C1 (the libcuda a process maps).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts import node_parse as P
from envbuild.facts import stack_view as sv
from envbuild.facts.source import FactUnavailable
from envbuild.report.model import Result, Status

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
       causes=("D2", "C1"))
def driver_version(ctx) -> Result:
    """The kernel module, NVML, the libnvidia-ml this process maps and the installed/mapped libcuda must agree.

    A mismatch is what a driver upgrade without a reboot leaves behind (D2): NVML fails with
    'Driver/library version mismatch' and CUDA init returns 803/999."""
    module = F.driver_module(ctx.facts)
    try:
        snap = ctx.facts.nvml()
        nvml_error = None
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
                          evidence=evidence, causes=["D2"],
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
        return verdict(Status.FAIL, f"driver versions disagree: {listing}", evidence=evidence,
                      causes=["D2"],
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


@check("node.uvm_hmm", CAT, "nvidia_uvm loaded; HMM off on open kernel modules", causes=("D1", "D4"))
def uvm_hmm(ctx) -> Result:
    """nvidia_uvm must be loaded for CUDA; HMM on the open kernel modules breaks cuInit on some kernels (D1)."""
    module = F.driver_module(ctx.facts)
    if module is None:
        raise FactUnavailable("no NVIDIA driver: /proc/driver/nvidia/version is absent (kernel module not loaded)")
    release = F.kernel_release(ctx.facts)
    uvm_dir = F.listdir_optional(ctx.facts, "/sys/module/nvidia_uvm")
    evidence: Dict[str, Any] = {"kernel": release, "open_kernel_module": module.open_module,
                                "driver": module.version}
    if uvm_dir is None:
        return verdict(Status.FAIL, "nvidia_uvm is not loaded: CUDA cannot initialise", evidence=evidence,
                      causes=["D4"], remediation="load it: `nvidia-modprobe -u -c 0` or `modprobe nvidia_uvm`")
    raw = F.read_optional(ctx.facts, "/sys/module/nvidia_uvm/parameters/uvm_disable_hmm")
    evidence["uvm_disable_hmm"] = raw.strip() if raw is not None else None
    disabled = P.parse_bool_param(raw) if raw is not None else None
    if raw is None:
        return verdict(Status.PASS,
                      f"nvidia_uvm loaded; this driver has no uvm_disable_hmm parameter (no HMM) on kernel {release}",
                      evidence=evidence)
    if not module.open_module:
        return verdict(Status.PASS,
                      f"nvidia_uvm loaded; proprietary module, HMM is not used (uvm_disable_hmm={raw.strip()})",
                      evidence=evidence)
    if disabled:
        return verdict(Status.PASS, f"nvidia_uvm loaded; HMM disabled on the open module (kernel {release})",
                      evidence=evidence)
    return verdict(Status.WARN,
                  f"HMM is enabled on the open kernel module {module.version} (kernel {release}): "
                  "known to break cuInit and crash at process exit on some kernels",
                  evidence=evidence, causes=["D1"],
                  remediation="add `options nvidia_uvm uvm_disable_hmm=1` to /etc/modprobe.d/nvidia-uvm.conf, then "
                              "reload nvidia_uvm or reboot (NVIDIA/open-gpu-kernel-modules #901, #947)")


@check("node.persistence_mode", CAT, "Persistence mode on for every GPU", causes=("D6",))
def persistence_mode(ctx) -> Result:
    """Without persistence the driver tears GPU state down between processes; inits get slow and flaky (D6)."""
    devs = F.devices(ctx.facts)
    off = [d["index"] for d in devs if d.get("persistence_mode") is False]
    unknown = [d["index"] for d in devs if d.get("persistence_mode") is None]
    evidence = {f"gpu{d['index']}": d.get("persistence_mode") for d in devs}
    if off:
        return verdict(Status.WARN, f"persistence mode is off on GPU {', '.join(map(str, off))}",
                      evidence=evidence, remediation="enable nvidia-persistenced (systemctl enable --now nvidia-persistenced)")
    if len(unknown) == len(devs):
        raise FactUnavailable("NVML did not report persistence mode: "
                              + devs[0].get("errors", {}).get("persistence_mode", "unknown"))
    return verdict(Status.PASS, f"persistence mode on for {len(devs) - len(unknown)} GPU(s)",
                  evidence=evidence)


@check("node.wsl", CAT, "Not WSL (NCCL's cuMem path is not functional there)", causes=("M1", "D8"))
def wsl(ctx) -> Result:
    release = F.kernel_release(ctx.facts)
    if release is None:
        raise FactUnavailable("/proc/sys/kernel/osrelease is absent")
    if "microsoft" in release.lower() or "wsl" in release.lower():
        return verdict(Status.WARN, f"running under WSL (kernel {release}): NCCL's cuMem allocations fail with 999",
                      evidence={"kernel": release}, causes=["M1", "D8"],
                      remediation="use a Linux host for multi-GPU runs; under WSL set NCCL_CUMEM_ENABLE=0 (NVIDIA/nccl #1653)")
    return verdict(Status.PASS, f"not WSL (kernel {release})", evidence={"kernel": release})
