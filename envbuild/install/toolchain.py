"""The toolchain source builds compile with, and which layer each piece of it comes from.

A conda env gets nvcc, CCCL, the CUDA headers, cmake, ninja and a compiler from conda-forge. Where no conda
channel answers, the same pieces come from PyPI (NVIDIA publishes the CUDA toolkit as wheels, e.g.
`nvidia-cuda-nvcc`, `nvidia-cuda-cccl`, `nvidia-cuda-crt`, `nvidia-cuda-runtime`, pinned together by the
`cuda-toolkit[...]` meta-package of one CUDA release: https://pypi.org/project/cuda-toolkit/; cmake and
ninja are wheels too) and the host C++ compiler from the system. The profile declares them in
[recipe.toolchain]; they are locked with hashes like every other pin.

The wheels unpack under `site-packages/nvidia/` (`cu13/` for CUDA 13, one folder per component for 12),
which is no CUDA_HOME a build system recognises: there is no `lib64/` and no unversioned `libcudart.so`.
`cuda_home` assembles one, `<prefix>/envbuild/cuda`, out of relative links, so it survives the rename of
the staging prefix into place. A test compile of one kernel for the build's GPU arch (`preflight`) then
proves nvcc, its host compiler and the headers work together in seconds, before a build of many minutes.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from envbuild.errors import EnvbuildError
from envbuild.leftovers import tmp_prefix

ASSEMBLED = "envbuild/cuda"  # relative to the prefix
# piece of the toolchain -> the PyPI names that provide it (CUDA 13 names, then the -cu12 series)
PIP_PIECES = (
    ("nvcc", ("nvidia-cuda-nvcc", "nvidia-cuda-nvcc-cu12")),
    ("CCCL", ("nvidia-cuda-cccl", "nvidia-cuda-cccl-cu12")),
    ("CUDA runtime headers", ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12")),
    ("cmake", ("cmake",)),
    ("ninja", ("ninja",)),
)
_ARCH_RE = re.compile(r"(\d+)\.(\d+)")


@dataclass(frozen=True)
class Piece:
    what: str
    layer: str  # "pip", "conda", "system", "missing"
    detail: str  # version and package, or path


def host_compiler(cxx: str) -> Tuple[Optional[str], str]:
    """(path, first line of `--version`) of the host compiler command, or (None, why not)."""
    path = shutil.which(cxx or "g++")
    if path is None:
        return None, f"{cxx or 'g++'} is not on PATH"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{path} --version failed: {exc}"
    return path, (out.strip().splitlines() or ["?"])[0]


def pieces(recipe: object, pip_versions: Mapping[str, str], conda_names: Sequence[str]) -> List[Piece]:
    """Where each toolchain piece comes from for this create (the plan prints it). nvcc and the C++ compiler
    are required ("missing" when no layer has them); cmake and ninja fall back to the system's, or "none"
    (a setuptools build needs neither)."""
    out = []
    conda = set(conda_names)
    for what, names in PIP_PIECES:
        conda_name = {"nvcc": "cuda-nvcc", "CCCL": "cuda-cccl", "CUDA runtime headers": "cuda-cudart-dev"}.get(what, what)
        hit = next((n for n in names if n in pip_versions), None)
        system = shutil.which(what) if what in ("cmake", "ninja") else None
        if conda_name in conda:
            out.append(Piece(what, "conda", conda_name))
        elif hit:
            out.append(Piece(what, "pip", f"{hit} {pip_versions[hit]}"))
        elif system:
            out.append(Piece(what, "system", system))
        else:
            out.append(Piece(what, "missing" if what == "nvcc" else "none", "in neither the conda nor the pip lock"))
    toolchain = getattr(recipe, "toolchain", None)
    cxx = getattr(toolchain, "cxx", "") or "g++"
    if any(n.startswith("gxx") for n in conda):
        out.append(Piece("C++ compiler", "conda", "gxx"))
    else:
        path, version = host_compiler(cxx)
        out.append(Piece("C++ compiler", "system" if path else "missing", f"{path}: {version}" if path else version))
    return out


def site_packages(prefix: Path) -> Optional[Path]:
    found = sorted(Path(prefix).glob("lib/python3*/site-packages"))
    return found[0] if found else None


def _link(dest: Path, target: Path) -> None:
    """A relative symlink dest -> target (replacing a stale one)."""
    rel = os.path.relpath(target, dest.parent)
    if dest.is_symlink() or dest.exists():
        if dest.is_symlink() and os.readlink(dest) == rel:
            return
        dest.unlink()
    dest.symlink_to(rel)


def cuda_home(prefix: Path) -> Path:
    """The CUDA_HOME source builds in this env use: the conda layer's (`<prefix>/bin/nvcc`), else one
    assembled from NVIDIA's wheels under site-packages/nvidia (EnvbuildError when neither has nvcc)."""
    prefix = Path(prefix)
    if (prefix / "bin" / "nvcc").is_file():
        return prefix
    sp = site_packages(prefix)
    roots = sorted(p for p in (sp / "nvidia").iterdir() if p.is_dir()) if sp and (sp / "nvidia").is_dir() else []
    if not any((r / "bin" / "nvcc").is_file() for r in roots):
        raise EnvbuildError(f"no nvcc in {prefix}: neither the conda layer nor the pip lock installs one; add the "
                            f"CUDA toolkit wheels to [recipe.toolchain] pip (e.g. cuda-toolkit[nvcc,cccl,crt]) and re-lock")
    home = prefix / ASSEMBLED
    for sub in ("bin", "include", "lib64"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    for root in roots:
        for sub, into in (("bin", "bin"), ("include", "include"), ("lib", "lib64"), ("lib64", "lib64")):
            folder = root / sub
            if not folder.is_dir():
                continue
            for item in sorted(folder.iterdir()):
                dest = home / into / item.name
                if not (dest.is_symlink() and dest.exists()):  # the first component that ships a name wins
                    _link(dest, item)
        if (root / "nvvm").is_dir() and not (home / "nvvm").exists():
            _link(home / "nvvm", root / "nvvm")
    # linkers look for libX.so; the wheels ship libX.so.<major> only
    for lib in sorted((home / "lib64").glob("lib*.so.*")):
        plain = lib.parent / (lib.name.split(".so.")[0] + ".so")
        if not plain.exists():
            _link(plain, lib.resolve())
    return home


def build_env(prefix: Path, recipe: object) -> Dict[str, str]:
    """Variables every source build of this env runs with: CUDA_HOME (cuda_home), the toolkit and the env's
    bin/ (cmake, ninja wheels) first on PATH, the host compiler of [recipe.toolchain] as CXX/CUDAHOSTCXX."""
    prefix = Path(prefix)
    home = cuda_home(prefix)
    env = {"CUDA_HOME": str(home), "CUDA_PATH": str(home), "CUDACXX": str(home / "bin" / "nvcc"),
           "PATH": os.pathsep.join([str(prefix / "bin"), str(home / "bin"), os.environ.get("PATH", "")])}
    cxx = getattr(getattr(recipe, "toolchain", None), "cxx", "")
    if cxx:
        path, why = host_compiler(cxx)
        if path is None:
            raise EnvbuildError(f"[recipe.toolchain] cxx: {why}")
        env["CXX"] = env["CUDAHOSTCXX"] = path
    if home != prefix:
        stubs = driver_stub(home, env.get("CXX") or "g++")
        env["LIBRARY_PATH"] = os.pathsep.join(p for p in (str(home / "lib64"), str(stubs),
                                                          os.environ.get("LIBRARY_PATH", "")) if p)
    return env


_DRIVER_FUNCTION = re.compile(r"\bCUresult\s+(cu[A-Za-z0-9_]+)\s*\(")
CUDA_ERROR_STUB_LIBRARY = 34  # cuda.h: "the CUDA driver is a stub library"


def driver_stub(home: Path, cxx: str) -> Path:
    """`<home>/lib64/stubs/libcuda.so`, a link-time stand-in for the driver library, made once.

    Extensions that call the driver API (torch_memory_saver, DeepEP) link `-lcuda`; NVIDIA's toolkit ships
    a stub for that in lib64/stubs (from its cuda-driver-dev package), its wheels do not. This one exports
    every function the wheel's cuda.h declares (the names after the preprocessor maps cuMemAlloc to
    cuMemAlloc_v2 and the like), each returning CUDA_ERROR_STUB_LIBRARY, with the real library's SONAME
    libcuda.so.1: a program linked against it loads the node's driver at run time, never the stub."""
    stubs = Path(home) / "lib64" / "stubs"
    lib = stubs / "libcuda.so"
    if lib.is_file():
        return stubs
    header = Path(home) / "include" / "cuda.h"
    if not header.is_file():
        raise EnvbuildError(f"{header}: missing; the CUDA runtime wheel (nvidia-cuda-runtime) ships it")
    stubs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=tmp_prefix("envbuild-stub")) as tmp:
        pre = subprocess.run([cxx, "-E", "-P", "-x", "c", "-I", str(header.parent), "-"], input="#include <cuda.h>\n",
                             capture_output=True, text=True)
        names = sorted(set(_DRIVER_FUNCTION.findall(pre.stdout)))
        if pre.returncode != 0 or not names:
            raise EnvbuildError(f"cannot read the driver API from {header} with {cxx}: {pre.stderr.strip()[-200:]}")
        src = Path(tmp) / "libcuda_stub.c"
        src.write_text("".join(f"int {n}(void) {{ return {CUDA_ERROR_STUB_LIBRARY}; }}\n" for n in names),
                       encoding="utf-8")
        part = stubs / f".libcuda.so.{os.getpid()}"
        proc = subprocess.run([cxx, "-x", "c", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(part),
                               str(src)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise EnvbuildError(f"cannot build the libcuda link stub with {cxx}: {proc.stderr.strip()[-200:]}")
        os.replace(part, lib)
    return stubs


def _archs(arch_list: str) -> List[str]:
    return [f"{m.group(1)}{m.group(2)}" for m in _ARCH_RE.finditer(arch_list or "")]


def preflight(prefix: Path, env: Mapping[str, str], arch_list: str, log_dir: Path) -> str:
    """Compile one CUDA kernel with this env's nvcc and host compiler for every arch of `arch_list`
    ("9.0", "8.0;9.0"): the toolchain proven in seconds, before builds of many minutes. Returns a one-line
    summary; EnvbuildError naming the log on failure."""
    nvcc = Path(env["CUDA_HOME"]) / "bin" / "nvcc"
    archs = _archs(arch_list) or ["90"]
    with tempfile.TemporaryDirectory(prefix=tmp_prefix("envbuild-nvcc")) as tmp:
        src = Path(tmp) / "probe.cu"
        src.write_text("#include <cuda_runtime.h>\n__global__ void envbuild_probe(float* x) { x[threadIdx.x] *= 2.f; }\n"
                       "int main() { return envbuild_probe == nullptr; }\n", encoding="utf-8")
        cmd = [str(nvcc), *[f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs], "-o", str(Path(tmp) / "probe"),
               str(src)]
        if env.get("CUDAHOSTCXX"):
            cmd[1:1] = ["-ccbin", env["CUDAHOSTCXX"]]
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **env), timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EnvbuildError(f"toolchain test compile could not run {nvcc}: {exc}") from exc
        seconds = time.monotonic() - t0
    version = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, env=dict(os.environ, **env)).stdout
    release = re.search(r"release (\d+\.\d+), V([\d.]+)", version)
    if proc.returncode != 0:
        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / "toolchain-preflight.log"
        log.write_text(" ".join(cmd) + "\n\n" + proc.stdout + proc.stderr, encoding="utf-8")
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        raise EnvbuildError(f"the toolchain cannot compile a CUDA kernel for sm_{','.join(archs)} ({last[0][:200]}); "
                            f"log: {log}")
    return (f"nvcc {release.group(2) if release else '?'} compiled a kernel for sm_{',sm_'.join(archs)} in "
            f"{seconds:.1f} s")
