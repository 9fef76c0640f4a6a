"""Fixtures for the stack probe and stack checks: real shared libraries built with gcc that export the
version APIs of libnccl / libcuda / libcudart, dist-info directories, and helpers to run the probe and
the doctor CLI against them. The libraries are tiny but real: the probe dlopens them, reads their
'NCCL version' strings and finds them in /proc/self/maps, exactly as with NVIDIA's."""
from __future__ import annotations

import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

REPO = Path(__file__).resolve().parent.parent
PROBE = REPO / "checks" / "stack_probe.py"

NCCL_SRC = r"""
__attribute__((used)) const char envbuild_fake_nccl_version[] = "NCCL version " VSTR;
int ncclGetVersion(int *v) { *v = VCODE; return 0; }
"""
CUDA_SRC = r"""
int cuDriverGetVersion(int *v) { if (RC) return RC; *v = VCODE; return 0; }
int cuInit(unsigned int f) { return RC; }
"""
CUDART_SRC = r"""
int cudaRuntimeGetVersion(int *v) { *v = VCODE; return 0; }
"""


def need_gcc() -> str:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler to build the fixture libraries")
    return gcc


def build_lib(directory: Path, filename: str, soname: str, source: str, defines: Dict[str, str],
              links: List[str] = ()) -> Path:
    """Compile `source` into directory/filename with SONAME `soname`; add symlinks `links` to it."""
    gcc = need_gcc()
    directory.mkdir(parents=True, exist_ok=True)
    src = directory / (filename + ".c")
    src.write_text(source)
    out = directory / filename
    cmd = [gcc, "-shared", "-fPIC", "-o", str(out), f"-Wl,-soname,{soname}", str(src)]
    cmd += [f"-D{k}={v}" for k, v in defines.items()]
    subprocess.run(cmd, check=True, capture_output=True)
    src.unlink()
    for name in links:
        (directory / name).symlink_to(filename)
    return out


def fake_nccl(directory: Path, version: str, cuda: str = "12.9") -> Path:
    major, minor, patch = (int(x) for x in version.split("."))
    return build_lib(directory, "libnccl.so.2", "libnccl.so.2", NCCL_SRC,
                     {"VSTR": f'"{version}+cuda{cuda}"', "VCODE": str(major * 10000 + minor * 100 + patch)})


def fake_libcuda(directory: Path, driver: str = "580.159.04", cuda_code: int = 13000, rc: int = 0) -> Path:
    """A libcuda.so.<driver> with libcuda.so.1 -> it; rc=34 makes it behave like the toolkit's stub."""
    return build_lib(directory, f"libcuda.so.{driver}", "libcuda.so.1", CUDA_SRC,
                     {"RC": str(rc), "VCODE": str(cuda_code)}, links=["libcuda.so.1"])


def fake_cudart(directory: Path, major: int, code: int) -> Path:
    return build_lib(directory, f"libcudart.so.{major}", f"libcudart.so.{major}", CUDART_SRC, {"VCODE": str(code)})


def dist_info(site: Path, name: str, version: str, direct_url: Optional[dict] = None) -> Path:
    """A minimal installed distribution (what pip leaves in site-packages)."""
    d = site / f"{name.replace('-', '_')}-{version}.dist-info"
    d.mkdir(parents=True, exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (d / "INSTALLER").write_text("pip\n")
    if direct_url is not None:
        (d / "direct_url.json").write_text(json.dumps(direct_url))
    return d




# A torch whose package must never be imported (its __init__ raises) but whose native libraries are real: the
# layout of the pip wheel (torch/lib, torch/_C*.so, RPATHs into site-packages/nvidia/*/lib), so the stack probe's
# fast path (checks/_torch_native.py) loads it as it loads NVIDIA's. Failures are chosen at run time through
# FAKE_CUDA_* variables.
FULL_CUDART_SRC = r"""
#include <stdlib.h>
#include <string.h>
static int env_rc(const char *name) { const char *v = getenv(name); return v ? atoi(v) : 0; }
static char memory[1 << 16];
int cudaRuntimeGetVersion(int *v) { *v = VCODE; return 0; }
#include <stdio.h>
#include <unistd.h>
int cudaGetDeviceCount(int *n) {
  const char *trace = getenv("FAKE_CUDA_TRACE");  /* the first CUDA call leaves a file behind */
  if (trace) { FILE *fh = fopen(trace, "w"); if (fh) fclose(fh); }
  const char *calls = getenv("FAKE_CUDA_CALLS");  /* each cudaGetDeviceCount appends its process id */
  if (calls) { FILE *fh = fopen(calls, "a"); if (fh) { fprintf(fh, "%d\n", (int)getpid()); fclose(fh); } }
  if (env_rc("FAKE_CUDA_COUNT_SLEEP")) sleep(env_rc("FAKE_CUDA_COUNT_SLEEP"));  /* a wedged cuInit */
  int rc = env_rc("FAKE_CUDA_COUNT_RC"); if (rc) return rc; *n = 1; return 0; }
int cudaSetDevice(int d) { return 0; }
int cudaMalloc(void **p, size_t n) { int rc = env_rc("FAKE_CUDA_MALLOC_RC"); if (rc) return rc; *p = memory; return 0; }
int cudaMemset(void *p, int v, size_t n) { memset(p, v, n); return 0; }
int cudaDeviceSynchronize(void) { return 0; }
int cudaFree(void *p) { return 0; }
const char *cudaGetErrorName(int rc) {
  return rc == 2 ? "cudaErrorMemoryAllocation" : rc == 35 ? "cudaErrorInsufficientDriver" : "cudaErrorUnknown"; }
const char *cudaGetErrorString(int rc) {
  return rc == 2 ? "out of memory" : rc == 35 ? "CUDA driver version is insufficient for CUDA runtime version"
                                              : "unknown error"; }
"""
FULL_NCCL_SRC = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
typedef struct { char internal[128]; } ncclUniqueId;
__attribute__((used)) const char envbuild_fake_nccl_version[] = "NCCL version " VSTR;
int ncclGetVersion(int *v) { *v = VCODE; return 0; }
int ncclGetUniqueId(ncclUniqueId *id) { memset(id->internal, 0, 128); strcpy(id->internal, "fake-id"); return 0; }
int ncclCommInitRank(void **comm, int n, ncclUniqueId id, int rank) {
  const char *wedge = getenv("FAKE_NCCL_INIT_SLEEP"); if (wedge) sleep(atoi(wedge));  /* a wedged NCCL init */
  const char *file = getenv("NCCL_DEBUG_FILE");
  if (n != 1 || rank != 0 || strcmp(id.internal, "fake-id") != 0) return 4;  /* ncclInvalidArgument */
  const char *level = getenv("NCCL_DEBUG");
  if (level && strcmp(level, "VERSION") == 0) {  /* as NCCL 2.28 does: the banner goes to stdout */
    printf("NCCL version %s\n", VSTR);
  } else if (level && file) {  /* INFO: into NCCL_DEBUG_FILE, %p = pid */
    char path[4096]; const char *p = strstr(file, "%p");
    if (p) snprintf(path, sizeof path, "%.*s%d%s", (int)(p - file), file, (int)getpid(), p + 2);
    else snprintf(path, sizeof path, "%s", file);
    FILE *fh = fopen(path, "w"); if (fh) { fprintf(fh, "host:1:1 [0] NCCL INFO NCCL version %s\n", VSTR); fclose(fh); }
  }
  *comm = (void *)0x1; return 0; }
int ncclAllReduce(const void *s, void *r, size_t c, int t, int op, void *comm, void *stream) { return comm ? 0 : 4; }
int ncclCommDestroy(void *comm) { return 0; }
const char *ncclGetErrorString(int rc) { return rc == 4 ? "invalid argument" : "unhandled cuda error"; }
"""
TORCH_CUDA_SRC = r"""
#include <stdio.h>
#include <stdlib.h>
unsigned long long _ZN5torch4cuda4nccl7versionEv(void) { return (2ULL << 32) | (28ULL << 16) | 9ULL; }
const char *_ZN5torch4cuda4nccl14version_suffixEv(void) { return ""; }
__attribute__((constructor)) static void envbuild_fake_torch_loaded(void) {  /* loading runs torch's code */
  const char *path = getenv("FAKE_TORCH_LOADED"); if (path) { FILE *fh = fopen(path, "w"); if (fh) fclose(fh); } }
"""


def full_nccl(directory: Path, version: str) -> Path:
    """A libnccl.so.2 that also initialises a 1-rank communicator and writes NCCL's VERSION banner."""
    major, minor, patch = (int(x) for x in version.split("."))
    return build_lib(directory, "libnccl.so.2", "libnccl.so.2", FULL_NCCL_SRC,
                     {"VSTR": f'"{version}+cuda13.0"', "VCODE": str(major * 10000 + minor * 100 + patch)})


# torch's package loads its libraries in _load_global_deps; torch 2.11's also preloads the CUDA wheels' libraries
# by path after libtorch_global_deps. This one does it (when `preloading`) for libnccl alone, with the same shape:
# a helper that asks torch.version, and a module that cannot be run as a whole.
TORCH_INIT = """import ctypes, glob, os, sys

PRELOADING = {preloading}
LOADER_FAILS = {loader_fails}


def _wheel_nccl():
    from torch.version import cuda
    if cuda is None or not PRELOADING:
        return []
    return [p for d in sys.path for p in sorted(glob.glob(os.path.join(d, "nvidia", "nccl", "lib", "libnccl.so.*[0-9]")))]


def _load_global_deps():
    if LOADER_FAILS:
        import torch.version  # the stand-in's submodule, then a failure: nothing of it may reach the fallback
        raise OSError("libcudart.so.13: cannot open shared object file")
    here = os.path.abspath(__file__)
    ctypes.CDLL(os.path.join(os.path.dirname(here), "lib", "libtorch_global_deps.so"), mode=ctypes.RTLD_GLOBAL)
    for path in _wheel_nccl()[:1]:
        ctypes.CDLL(path)


raise ImportError("this fake torch must never be imported")
"""


def fake_torch(site: Path, version: str = "2.11.0+cu130", nccl: str = "2.28.9", preloading: bool = False,
               loader_fails: bool = False, global_deps_nccl: bool = False, nccl_first: Optional[Path] = None) -> Path:
    """torch 2.11-shaped: torch/lib/libtorch_global_deps.so -> libcudart, torch/_C -> libtorch_cuda -> libnccl +
    libcudart, found through the wheel's RPATHs ($ORIGIN/../../nvidia/...). Its torch.cuda.nccl.version() is 2.28.9
    (built -O2, so that function is `return constant` as in torch's builds); loading libtorch_cuda creates the file
    named by FAKE_TORCH_LOADED.
    `preloading`: its __init__ holds a _load_global_deps that also preloads the wheel's libnccl by path;
    `loader_fails`: that function raises OSError as torch's does when a CUDA library is missing;
    `global_deps_nccl`: libtorch_global_deps also needs libnccl.so.2, found through its RPATH in the wheel;
    `nccl_first`: a directory libtorch_cuda's RPATH names before the wheel's (its libnccl.so.2 is the one bound)."""
    gcc = need_gcc()
    torch_dir, lib = site / "torch", site / "torch" / "lib"
    nccl_dir, cu13 = site / "nvidia" / "nccl" / "lib", site / "nvidia" / "cu13" / "lib"
    full_nccl(nccl_dir, nccl)
    build_lib(cu13, "libcudart.so.13", "libcudart.so.13", FULL_CUDART_SRC, {"VCODE": "13000"})
    lib.mkdir(parents=True)

    def link(out: Path, source: str, needs: List[str], rpath: str) -> None:
        src = out.with_suffix(".c")
        src.write_text(source)
        cmd = [gcc, "-shared", "-fPIC", "-O2", "-o", str(out), str(src), f"-Wl,-soname,{out.name}", "-Wl,--disable-new-dtags",
               f"-Wl,-rpath,{rpath}", f"-L{lib}", f"-L{nccl_dir}", f"-L{cu13}", "-Wl,--no-as-needed"] + [f"-l:{n}" for n in needs]
        subprocess.run(cmd, check=True, capture_output=True)
        src.unlink()

    link(lib / "libtorch_global_deps.so", "int envbuild_global_deps;\n",
         ["libcudart.so.13"] + (["libnccl.so.2"] if global_deps_nccl else []),
         "$ORIGIN/../../nvidia/cu13/lib:$ORIGIN/../../nvidia/nccl/lib")
    link(lib / "libtorch_cuda.so", TORCH_CUDA_SRC, ["libnccl.so.2", "libcudart.so.13"],
         ("%s:" % nccl_first if nccl_first else "") + "$ORIGIN/../../nvidia/nccl/lib:$ORIGIN/../../nvidia/cu13/lib")
    link(torch_dir / ("_C" + importlib.machinery.EXTENSION_SUFFIXES[0]), "int envbuild_torch_c;\n", ["libtorch_cuda.so"], "$ORIGIN/lib")
    (torch_dir / "__init__.py").write_text(TORCH_INIT.replace("{preloading}", str(preloading))
                                           .replace("{loader_fails}", str(loader_fails)))
    (torch_dir / "version.py").write_text(f"from typing import Optional\n\n__version__ = {version!r}\ndebug = False\n"
                                          "cuda: Optional[str] = '13.0'\ngit_version = 'fake'\n")
    return torch_dir


def no_torch_dir() -> Path:
    """A directory whose `torch` package raises ImportError: put first on PYTHONPATH, it makes the test
    venv behave like an env without torch whether or not the CPU torch wheel is installed in it."""
    pkg = Path(os.environ.get("PYTEST_TMPDIR", "/tmp")) / f"envbuild-no-torch-{os.getuid()}" / "torch"
    pkg.mkdir(parents=True, exist_ok=True)
    init = pkg / "__init__.py"
    if not init.exists():
        init.write_text("raise ImportError(\"No module named 'torch' (hidden for this test)\")\n")
    return pkg.parent


def clean_env(**extra: str) -> Dict[str, str]:
    """The test process's environment without the variables the probe reports, plus `extra`, with torch
    hidden (PYTHONPATH in `extra` is appended after the hiding directory)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NCCL_", "PYTORCH_", "TMS_", "SGLANG_", "LD_", "CONDA_PREFIX", "PYTHONPATH"))}
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join([str(no_torch_dir())] + ([extra["PYTHONPATH"]] if "PYTHONPATH" in extra else []))
    return env


def torch_env(**extra: str) -> Dict[str, str]:
    """Like clean_env but torch stays importable (when installed)."""
    env = clean_env(**extra)
    env["PYTHONPATH"] = extra.get("PYTHONPATH", "")
    return env


def run_probe(env: Dict[str, str], *args: str, python: str = sys.executable, timeout: float = 60) -> dict:
    proc = subprocess.run([python, str(PROBE)] + list(args), capture_output=True, text=True, env=env,
                          timeout=timeout)
    assert proc.stdout.strip(), f"probe printed nothing (rc {proc.returncode}): {proc.stderr[-2000:]}"
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, f"probe must print exactly one JSON line, got {len(lines)}"
    data = json.loads(lines[0])
    data["_rc"] = proc.returncode
    data["_stderr"] = proc.stderr
    return data


def run_doctor(args: List[str], env: Dict[str, str], tmp: Path, timeout: float = 120):
    """Run `envbuild doctor ... --json` as a user would; returns (process, {check_id: result dict})."""
    out = tmp / f"report-{len(list(tmp.glob('report-*.json')))}.json"
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("COLUMNS", "200")
    proc = subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--json", str(out)] + args,
                          capture_output=True, text=True, env=env, timeout=timeout)
    results = {}
    if out.exists():
        for r in json.loads(out.read_text())["results"]:
            results[r["check_id"]] = r
    return proc, results
