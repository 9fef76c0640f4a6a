"""The CUDA a log's driver can run against the CUDA its software was built for, from the log's own facts.

A driver runs every CUDA up to its own (nvidia-smi's "CUDA Version", NCCL's cudaDriverVersion, or the driver
version through NVIDIA's table of minimum drivers); NCCL's banner (+cudaX.Y), torch's local version (+cuXYZ),
collect_env's "CUDA used to build PyTorch" and the cudart wheel say what the software needs. A newer CUDA major
than the driver's cannot run without a forward-compatible libcuda (D9); a newer minor of the same major usually
runs under minor-version compatibility (healthy runs do it every day), so it is only a hint when something failed.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

from envbuild.explain.scan import ScanResult

MM = Tuple[int, int]

# Minimum Linux x86_64 driver of each CUDA toolkit release (NVIDIA CUDA Toolkit Release Notes, table "CUDA Toolkit
# and Corresponding Driver Versions", GA releases). envbuild.install.activation.MIN_DRIVER holds the 12.0+ rows for
# create (a lower layer may not import it from here, nor this from there); tests/explain/test_explain_versions.py
# holds the two equal where they overlap.
MIN_DRIVER: Dict[str, str] = {
    "8.0": "375.26", "9.0": "384.81", "9.1": "390.46", "9.2": "396.26", "10.0": "410.48", "10.1": "418.39",
    "10.2": "440.33", "11.0": "450.36.06", "11.1": "455.23", "11.2": "460.27.03", "11.3": "465.19.01",
    "11.4": "470.42.01", "11.5": "495.29.05", "11.6": "510.39.01", "11.7": "515.43.04", "11.8": "520.61.05",
    "12.0": "525.60.13", "12.1": "530.30.02", "12.2": "535.54.03", "12.3": "545.23.06", "12.4": "550.54.14",
    "12.5": "555.42.02", "12.6": "560.28.03", "12.8": "570.26", "12.9": "575.51.03", "13.0": "580.65.06",
}


def _ints(v: str) -> Tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def _mm(v: str) -> Optional[MM]:
    t = _ints(v)
    return (t[0], t[1]) if len(t) >= 2 else None


def min_drivers() -> Dict[MM, Tuple[int, ...]]:
    return {_mm(k): _ints(v) for k, v in MIN_DRIVER.items()}  # type: ignore[misc]


def cuda_of_driver(driver: str) -> Optional[MM]:
    """The newest CUDA whose minimum driver this driver meets; a bare branch ("535") counts as its newest build."""
    d = _ints(driver)
    if not d:
        return None
    if len(d) == 1:
        d = (d[0], 999, 999)
    met = [mm for mm, need in min_drivers().items() if d >= need]
    return max(met) if met else None


def driver_caps(scan: ScanResult) -> List[Tuple[MM, str]]:
    """Every CUDA the log's drivers run, each with where it was read (nvidia-smi, NCCL's cudaDriverVersion, a
    driver version through NVIDIA's table)."""
    caps: List[Tuple[MM, str]] = []
    for v in scan.facts.get("driver_cuda", {}):
        mm = _mm(v)
        if mm:
            caps.append((mm, f"nvidia-smi's CUDA Version {v}"))
    for v in scan.facts.get("cuda_driver_version", {}):
        mm = _logged_code_mm(v)
        if mm:
            caps.append((mm, f"driver's CUDA {mm_text(mm)} ({v})"))
    for v in scan.facts.get("driver_version", {}):
        mm = cuda_of_driver(v)
        if mm:
            caps.append((mm, f"driver {v} (CUDA {mm_text(mm)} by NVIDIA's minimum-driver table)"))
    return caps


def driver_cap(scan: ScanResult) -> Optional[Tuple[MM, str]]:
    """The newest CUDA the log's driver runs (the most capable statement wins: a log that names two drivers, host
    and container, is not judged behind by the older one)."""
    caps = driver_caps(scan)
    return max(caps) if caps else None


def needed(scan: ScanResult) -> Optional[Tuple[MM, str]]:
    """The newest CUDA the log's software was built for, and which statement says so."""
    out: List[Tuple[MM, str]] = []
    for v in scan.facts.get("nccl_build_cuda", {}):
        mm = _mm(v)
        if mm:
            out.append((mm, f"NCCL built for CUDA {v}"))
    for v in scan.facts.get("torch_version", {}):
        m = re.search(r"\+cu(\d{2,3})$", v)
        if m:
            digits = m.group(1)
            mm = (int(digits[:-1]), int(digits[-1]))
            out.append((mm, f"torch {v}"))
    for fid, what in (("cuda_runtime", "CUDA runtime"), ("cuda_runtime_wheel", "the cudart wheel")):
        for v in scan.facts.get(fid, {}):
            mm = _mm(v)
            if mm:
                out.append((mm, f"{what} {v}"))
    for v in scan.facts.get("cuda_runtime_code", {}):
        mm = _logged_code_mm(v)
        if mm:
            out.append((mm, f"CUDA runtime {mm_text(mm)} ({v})"))
    return max(out) if out else None


def mm_text(mm: MM) -> str:
    """A (major, minor) pair as people write it: (12, 2) -> "12.2"."""
    return f"{mm[0]}.{mm[1]}"


def cuda_code_mm(code: int) -> MM:
    """CUDA's integer version as (major, minor): 12020 -> (12, 2), the way cudaRuntimeGetVersion, cuDriverGetVersion
    and NCCL's cudaDriverVersion write it. The one decoder of explain (the doctor's checks run inside the env's own
    python and keep theirs, envbuild/data/checks/_common.py)."""
    return code // 1000, (code % 1000) // 10


def cuda_code_text(code: int) -> str:
    """CUDA's integer version as people write it: 12020 -> "12.2"."""
    return mm_text(cuda_code_mm(code))


def _logged_code_mm(v: str) -> Optional[MM]:
    """A CUDA integer version found in a log's text; fewer than 4 digits is some other number (an error code, a
    count), not a version."""
    if not v.isdigit() or len(v) < 4:
        return None
    return cuda_code_mm(int(v))


def driver_ahead(scan: ScanResult) -> Optional[str]:
    """The sentence when every driver the log shows runs every CUDA its software was built for: a driver older than
    the runtime (D9) is then contradicted by the log itself, whatever its wording suggests. The least capable driver
    decides (the reverse of driver_cap): a log that pastes a working host beside the failing one is not cleared by
    the better of the two."""
    caps, need = driver_caps(scan), needed(scan)
    if not caps or not need:
        return None
    cap = min(caps)
    if need[0] > cap[0]:
        return None
    return (f"the log's {need[1]} needs CUDA {mm_text(need[0])}, and the {cap[1]} it shows runs CUDA up to "
            f"{mm_text(cap[0])}: the driver is not behind the runtime")


def driver_behind(scan: ScanResult) -> Optional[Tuple[str, str]]:
    """("major" | "minor", the sentence) when the log's software needs a newer CUDA than its driver runs."""
    cap, need = driver_cap(scan), needed(scan)
    if not cap or not need or need[0] <= cap[0]:
        return None
    kind = "major" if need[0][0] > cap[0][0] else "minor"
    said = f"the log's {need[1]} needs CUDA {mm_text(need[0])}; the {cap[1]} it shows runs CUDA up to {mm_text(cap[0])}"
    if kind == "major":
        return kind, said + ": a newer CUDA major than the driver's cannot run without a forward-compatible libcuda"
    return kind, said + " (minor-version compatibility usually covers it; a hint only because something failed)"


# The torch each vLLM release line was built against, as major.minor: vLLM's wheels ship compiled ops linked to one
# torch, pinned `torch == X.Y.Z` in the release's requirements (requirements.txt up to 0.4.0, requirements-cuda.txt,
# then requirements/cuda.txt, at each release tag on github.com/vllm-project/vllm). Another torch minor cannot
# load those ops (undefined symbols, "vllm._C" import errors). Patch releases are not told apart (a patch bump of
# torch keeps its ABI); releases outside these rows are not judged.
VLLM_TORCH: Tuple[Tuple[Tuple[int, int, int], Tuple[int, int, int], MM], ...] = (
    ((0, 3, 0), (0, 4, 0), (2, 1)),
    ((0, 4, 1), (0, 4, 1), (2, 2)),
    ((0, 4, 2), (0, 5, 3), (2, 3)),
    ((0, 5, 4), (0, 6, 3), (2, 4)),
    ((0, 6, 4), (0, 7, 3), (2, 5)),
    ((0, 8, 0), (0, 8, 5), (2, 6)),
    ((0, 9, 0), (0, 10, 1), (2, 7)),
    ((0, 10, 2), (0, 11, 0), (2, 8)),
)


def vllm_torch(vllm: str) -> Optional[MM]:
    """The torch major.minor a vLLM release was built against, or None for a release outside VLLM_TORCH."""
    t = _ints(vllm)[:3]
    if len(t) < 3:
        return None
    for lo, hi, torch in VLLM_TORCH:
        if lo <= t <= hi:
            return torch
    return None


def framework_torch_clash(scan: ScanResult) -> Optional[str]:
    """The sentence when the log states a vLLM and a torch that cannot go together: no stated torch is the minor
    that vLLM release was built against. One stated torch that fits is enough to say nothing (a listing may name
    the old and the new)."""
    torches = [mm for mm in (_mm(v) for v in scan.facts.get("torch_version", {})) if mm]
    if not torches:
        return None
    for v in scan.facts.get("vllm_version", {}):
        want = vllm_torch(v)
        if want and want not in torches:
            stated = ", ".join(sorted(scan.facts["torch_version"]))
            return (f"the log's vllm {v} was built against torch {mm_text(want)} (its release's requirements pin "
                    f"it); the log's torch is {stated}: vLLM's compiled ops do not load against another torch minor")
    return None


def toolkit_clash(scan: ScanResult) -> Optional[str]:
    """The sentence when nvcc's CUDA major differs from the one torch was built for: torch.utils.cpp_extension
    refuses to build a CUDA extension then (its _check_cuda_version raises on a major mismatch, warns on a minor),
    so flash-attn, apex or a hook built from source fails or is built against another CUDA."""
    nvcc = [mm for mm in (_mm(v) for v in scan.facts.get("nvcc_release", {})) if mm]
    if not nvcc:
        return None
    built: List[Tuple[int, str]] = []
    for v in scan.facts.get("torch_version", {}):
        m = re.search(r"\+cu(\d{2,3})$", v)
        if m:
            built.append((int(m.group(1)[:-1]), f"torch {v}"))
    for v in scan.facts.get("cuda_runtime", {}):
        mm = _mm(v)
        if mm:
            built.append((mm[0], f"torch built with CUDA {v}"))
    for major, what in built:
        if all(n[0] != major for n in nvcc):
            n = nvcc[0]
            return (f"the log's nvcc is CUDA {mm_text(n)}; its {what} is CUDA {major}: torch's cpp_extension will not "
                    "build a CUDA extension across majors")
    return None
