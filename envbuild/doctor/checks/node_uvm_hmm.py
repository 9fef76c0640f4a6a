"""node.uvm_hmm: nvidia_uvm loaded, and HMM off on the open kernel modules.

Causes (envbuild/knowledge/causes.toml, with their sources): D1 (HMM on open modules), D4 (nvidia_uvm).
"""
from __future__ import annotations

from typing import Any, Dict

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts import node_parse as P
from envbuild.facts.source import FactUnavailable
from envbuild.report.model import Result, Status

CAT = "node"


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
        # CUDA's initialisation then fails in every process with an unknown error (999) or 3: folded under this
        evidence["explains"] = [r"cudaErrorUnknown", r"Error 999\b", r"unknown error", r"cudaErrorInitializationError",
                                r"initialization error", r"nvidia-uvm", r"nvidia_uvm"]
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
