"""Reading the stack probe's JSON: versions, library copies and CUDA majors, as small pure functions.

The stack checks and `envbuild capture --env` share these, so that a version means the same thing in a
doctor verdict and in a captured profile. Keys of the probe's JSON are documented in
envbuild/facts/stack.py.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

from envbuild.facts.errors import FactUnavailable


def canonical(name: str) -> str:
    """PEP 503 name: 'Transformer_Engine' -> 'transformer-engine'."""
    return re.sub(r"[-_.]+", "-", name or "").lower()


def dist_map(stack: Dict[str, Any]) -> Dict[str, List[Dict[str, Any]]]:
    """Canonical distribution name -> every installed copy (more than one means shadowing)."""
    out: Dict[str, List[Dict[str, Any]]] = {}
    for d in stack.get("distributions") or []:
        out.setdefault(canonical(d.get("name", "")), []).append(d)
    return out


def dist(stack: Dict[str, Any], *names: str) -> Optional[Dict[str, Any]]:
    """The first installed copy of the first of `names` that is installed."""
    m = dist_map(stack)
    for n in names:
        if canonical(n) in m:
            return m[canonical(n)][0]
    return None


def unmet_requirements(stack: Dict[str, Any], name: str) -> List[str]:
    """Requirements of installed distribution `name` (its Requires-Dist, recorded by the probe) that apply to the
    env's python and are not met: "sympy>=1.13.3 (not installed)", "filelock>=3.12 (3.0 installed)", what
    `pip check` reports. An unreadable requirement is skipped."""
    from packaging.markers import InvalidMarker, UndefinedEnvironmentName, default_environment
    from packaging.requirements import InvalidRequirement, Requirement

    d = dist(stack, name)
    if not d or not d.get("requires"):
        return []
    py = stack.get("python") or {}
    env = default_environment()
    version = str(py.get("version") or "")
    if version:
        env.update(python_full_version=version, python_version=".".join(version.split(".")[:2]))
    if py.get("machine"):
        env["platform_machine"] = py["machine"]
    if py.get("platform"):
        env["sys_platform"] = py["platform"]
    if py.get("implementation"):
        env["implementation_name"] = py["implementation"]
    installed = dist_map(stack)
    unmet = []
    for line in d["requires"]:
        try:
            req = Requirement(line)
            applies = req.marker is None or req.marker.evaluate({**env, "extra": ""})
        except (InvalidRequirement, InvalidMarker, UndefinedEnvironmentName):
            continue
        if not applies:
            continue
        copies = installed.get(canonical(req.name))
        if not copies:
            unmet.append(f"{req} (not installed)")
        elif req.specifier and not req.specifier.contains(str(copies[0].get("version")), prereleases=True):
            unmet.append(f"{req} ({copies[0].get('version')} installed)")
    return unmet


def dist_any_flavour(stack: Dict[str, Any], pip_name: str) -> Optional[Dict[str, Any]]:
    """The distribution, or its other CUDA flavour (nvidia-nvshmem-cu13 for a profile's -cu12): a profile names
    one flavour, and an env of the other CUDA major still has the component."""
    d = dist(stack, pip_name)
    if d is None:
        for a, b in (("-cu12", "-cu13"), ("-cu13", "-cu12")):
            if pip_name.endswith(a):
                d = dist(stack, pip_name[: -len(a)] + b)
    return d


@dataclass(frozen=True)
class SourcePackage:
    """sglang or Megatron as the env has it. The image patches a git checkout of each, so the commit matters:
    the probe's git facts of the imported package come first, the PEP 610 metadata of its distribution
    (pip install git+URL@commit) second."""

    pkg: Dict[str, Any] = field(default_factory=dict)  # the probe's `sglang` / `megatron` object
    git: Dict[str, Any] = field(default_factory=dict)  # its `git` part: root, commit, dirty, patches
    dist: Optional[Dict[str, Any]] = None  # the installed distribution
    version: Optional[str] = None
    commit: Optional[str] = None


def source_package(stack: Dict[str, Any], key: str, pip_name: str) -> SourcePackage:
    """`key` is the probe's name ("sglang", "megatron"); `pip_name` its distribution's."""
    pkg = stack.get(key) or {}
    git = pkg.get("git") or {}
    d = dist(stack, pip_name)
    return SourcePackage(pkg=pkg, git=git, dist=d, version=pkg.get("version") or (d or {}).get("version"),
                         commit=git.get("commit") or (d or {}).get("commit"))


def _release(v: str) -> List[str]:
    return [p for p in re.split(r"[.]", v) if p != ""]


def version_matches(expected: str, actual: Optional[str], cuda_tag: Optional[str] = None) -> bool:
    """Does `actual` satisfy the profile's pin `expected`?

    The release parts are compared up to the shorter of the two, so a profile's "12.9.1" matches
    torch.version.cuda "12.9" and a pin "1" matches numpy "1.26.4"; a local tag in the pin ("+cu129")
    must be equal in the actual version (2.11.0+cu130 is not 2.11.0+cu129). A wheel without a local tag
    (PyPI's default torchvision 0.26.0) takes `cuda_tag`, the CUDA tag of the env's torch."""
    if actual is None:
        return False
    exp_rel, _, exp_local = expected.partition("+")
    act_rel, _, act_local = actual.partition("+")
    act_local = act_local or (cuda_tag or "")
    if exp_local and exp_local != act_local:
        return False
    a, b = _release(exp_rel), _release(act_rel)
    n = min(len(a), len(b))
    return n > 0 and a[:n] == b[:n]


def commit_matches(expected: str, actual: Optional[str]) -> bool:
    return bool(actual) and (actual.startswith(expected) or expected.startswith(actual or "-"))


def torch_info(stack: Dict[str, Any]) -> Dict[str, Any]:
    return stack.get("torch") or {"present": False}


def torch_cuda_major(stack: Dict[str, Any]) -> Optional[int]:
    cuda = torch_info(stack).get("cuda")
    if cuda:
        try:
            return int(str(cuda).split(".")[0])
        except ValueError:
            return None
    return None


def major_minor(v: Optional[str]) -> Optional[Tuple[int, int]]:
    if not v:
        return None
    m = re.match(r"(\d+)\.(\d+)", str(v))
    return (int(m.group(1)), int(m.group(2))) if m else None


def mapped(stack: Dict[str, Any], family: str) -> List[Dict[str, Any]]:
    return [m for m in stack.get("mapped") or [] if m.get("family") == family]


def reachable(stack: Dict[str, Any], family: str) -> List[Dict[str, Any]]:
    return [m for m in stack.get("reachable") or [] if m.get("family") == family]


def distinct_files(entries: Iterable[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Entries keyed by real file (symlinks libnccl.so -> libnccl.so.2 count once)."""
    out: Dict[str, Dict[str, Any]] = {}
    for e in entries:
        out.setdefault(e.get("realpath") or e.get("path"), e)
    return out


def main_library(entries: Iterable[Dict[str, Any]], soname_prefix: str) -> List[Dict[str, Any]]:
    """Only the main library of a family (libcudnn.so.9, not libcudnn_ops.so.9)."""
    return [e for e in entries if os.path.basename(e.get("path", "")).startswith(soname_prefix)]


def nccl_banner_version(stack: Dict[str, Any]) -> Optional[str]:
    """The version in NCCL's own banner when the probe's 1-rank group ran (None without a GPU): what really ran."""
    return (stack.get("init") or {}).get("nccl_banner_version")


def nccl_version_in_use(stack: Dict[str, Any]) -> Tuple[Optional[str], str]:
    """The NCCL this env runs, and where that was read: NCCL's own banner, else the mapped libnccl, else torch's
    report."""
    banner = nccl_banner_version(stack)
    if banner:
        return banner, "NCCL's banner in the probe's process group"
    libs = mapped(stack, "libnccl")
    for m in libs:
        if m.get("version"):
            return m["version"], f"mapped {m['path']}"
    v = torch_info(stack).get("nccl_version")
    if v:
        return v, "torch.cuda.nccl.version()"
    return None, "no libnccl mapped and torch did not report one"


_CU_SUFFIX = re.compile(r"-cu(\d+)$")
_CUDA_IN_NAME = re.compile(r"-cuda(\d+)(?:x|-|$)")  # cupy-cuda13x, jax-cuda13-plugin
# CUDA 13 wheels dropped the -cuXX suffix for toolkit parts. Only those whose version major IS the CUDA
# major are read by version (cuFFT 12.x, cuRAND 10.x, cuSOLVER 12.x, cuSPARSE 12.x ship with CUDA 13).
_VERSION_IS_CUDA = re.compile(r"^(nvidia-cuda-(runtime|nvrtc|cupti|nvcc|cccl|crt|culibos|sanitizer-api)|nvidia-cublas"
                              r"|nvidia-nvjitlink|nvidia-nvtx|nvidia-nvvm|cuda-toolkit|cuda-bindings|cuda-python)$")


def cuda_major_of_dist(d: Dict[str, Any]) -> Optional[int]:
    """Which CUDA major a distribution is built for, when its name or version says so."""
    name = canonical(d.get("name", ""))
    version = str(d.get("version", ""))
    m = _CU_SUFFIX.search(name)
    if m:
        digits = m.group(1)
        return int(digits[:2]) if len(digits) >= 3 else int(digits)
    m = _CUDA_IN_NAME.search(name)
    if m:
        return int(m.group(1))
    m = re.search(r"\+cu(\d{3})", version)
    if m:
        return int(m.group(1)[:2])
    if _VERSION_IS_CUDA.match(name):
        try:
            return int(version.split(".")[0])
        except ValueError:
            return None
    return None


def cuda_majors(stack: Dict[str, Any]) -> Dict[int, List[str]]:
    """CUDA major -> 'name==version' of each distribution built for it."""
    out: Dict[int, List[str]] = {}
    for d in stack.get("distributions") or []:
        major = cuda_major_of_dist(d)
        if major is not None and major >= 10:
            out.setdefault(major, []).append(f"{d.get('name')}=={d.get('version')}")
    return out


def gpu_names(facts: Any) -> List[str]:
    """GPU names from NVML through the fact source, [] when NVML is not available."""
    try:
        return [d.get("name") or "" for d in facts.nvml().get("devices", [])]
    except FactUnavailable:
        return []


def forward_compat_supported(name: str) -> Optional[bool]:
    """CUDA forward compatibility works on datacenter GPUs (and select RTX server SKUs), not on GeForce.

    Returns False for GeForce/TITAN, None (unknown) for RTX workstation cards, True otherwise."""
    low = name.lower()
    if "geforce" in low or "titan" in low:
        return False
    if "rtx" in low or "quadro" in low:
        return None
    return True


def require_torch(stack: Dict[str, Any]) -> Dict[str, Any]:
    """torch's facts, or FactUnavailable (-> skip) naming the interpreter when torch is not importable."""
    t = torch_info(stack)
    if not t.get("present"):
        exe = (stack.get("python") or {}).get("executable", "the env's python")
        raise FactUnavailable(f"torch is not importable with {exe} ({t.get('error', 'not installed')}); "
                              "pass --python/--prefix of the environment under test")
    return t
