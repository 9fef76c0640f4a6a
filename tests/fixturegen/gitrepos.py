"""Local git repositories with real commits and patches, for the git-source and source-build tests.

`make_patched_repo` gives a repository with two commits on main (plus one commit reachable from no
branch, as a force-pushed PR commit would be) and three patch files made with `git diff`: two that apply
in order (the second edits what the first added) and one whose context no longer matches.
`make_c_extension_repo` gives a setuptools project with a C extension that takes gcc real work to compile,
so the wheel cache has something worth skipping.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

_ENV = {
    "GIT_AUTHOR_NAME": "envbuild tests", "GIT_AUTHOR_EMAIL": "tests@envbuild.invalid",
    "GIT_COMMITTER_NAME": "envbuild tests", "GIT_COMMITTER_EMAIL": "tests@envbuild.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    env = dict(os.environ, **_ENV)
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _write(repo: Path, files: Dict[str, str]) -> None:
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def commit(repo: Path, files: Dict[str, str], message: str) -> str:
    _write(repo, files)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def init_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    return path


@dataclass
class PatchedRepo:
    path: Path
    commits: List[str]  # on main, oldest first
    orphan: str  # a commit no branch reaches
    patch_dir: Path  # the "profile folder"; patches are relative to it
    good: List[str]  # relative names of patches that apply in order at commits[0]
    bad: str  # relative name of a patch that does not apply to pkg/core.py at commits[0]


def make_patched_repo(root: Path) -> PatchedRepo:
    repo = init_repo(root / "upstream")
    c1 = commit(repo, {"pkg/__init__.py": "", "pkg/core.py": "def answer():\n    return 41\n",
                       "README": "upstream\n"}, "c1")
    profile = root / "profile"
    (profile / "patches").mkdir(parents=True)
    _write(repo, {"pkg/core.py": "def answer():\n    return 42\n", "pkg/extra.py": "EXTRA = 1\n"})
    git(repo, "add", "-A")
    (profile / "patches" / "0001-answer.patch").write_text(git(repo, "diff", "--cached", "HEAD") + "\n")
    git(repo, "commit", "-q", "-m", "tmp1")
    _write(repo, {"pkg/extra.py": "EXTRA = 2\n"})
    (profile / "patches" / "0002-extra.patch").write_text(git(repo, "diff", "HEAD") + "\n")
    git(repo, "reset", "-q", "--hard", c1)
    # a patch written against other content: its context does not match pkg/core.py at c1
    (profile / "patches" / "0003-stale.patch").write_text(
        "diff --git a/pkg/core.py b/pkg/core.py\n--- a/pkg/core.py\n+++ b/pkg/core.py\n"
        "@@ -1,2 +1,2 @@\n def answer():\n-    return 7\n+    return 8\n")
    c2 = commit(repo, {"README": "upstream, second commit\n"}, "c2")
    git(repo, "checkout", "-q", "-b", "side")
    orphan = commit(repo, {"side.txt": "only on a deleted branch\n"}, "side")
    git(repo, "checkout", "-q", "main")
    git(repo, "branch", "-q", "-D", "side")
    return PatchedRepo(path=repo, commits=[c1, c2], orphan=orphan, patch_dir=profile,
                       good=["patches/0001-answer.patch", "patches/0002-extra.patch"], bad="patches/0003-stale.patch")


def _c_source(functions: int) -> str:
    """A C extension with `functions` small numeric kernels: enough code that -O2 takes gcc a while."""
    body = ['#define PY_SSIZE_T_CLEAN', '#include <Python.h>', '']
    for i in range(functions):
        body.append(
            f"static double k{i}(double x) {{ double s = 0; for (int j = 0; j < {i % 7 + 3}; j++) "
            f"{{ s += x * j + {i}; s = s > 1e9 ? s / 3 : s * 1.0001; }} return s; }}")
    body.append("static PyObject* total(PyObject* self, PyObject* arg) {")
    body.append("  double x = PyFloat_AsDouble(arg); double s = 0;")
    body += [f"  s += k{i}(x);" for i in range(functions)]
    body.append("  return PyFloat_FromDouble(s); }")
    body.append('static PyMethodDef M[] = {{"total", total, METH_O, "sum of kernels"}, {NULL, NULL, 0, NULL}};')
    body.append('static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "fastext", NULL, -1, M};')
    body.append("PyMODINIT_FUNC PyInit_fastext(void) { return PyModule_Create(&D); }")
    return "\n".join(body) + "\n"


def make_c_extension_repo(root: Path, functions: int = 400) -> PatchedRepo:
    """A setuptools project `fastext` (C extension) at one commit; no patches."""
    repo = init_repo(root / "fastext")
    setup = (
        "from setuptools import setup, Extension\n"
        "import os\n"
        "setup(name='fastext', version='0.1.0',\n"
        "      ext_modules=[Extension('fastext', ['fastext.c'], extra_compile_args=['-O2'],\n"
        "                             define_macros=[('FASTEXT_ARCH', os.environ.get('FASTEXT_ARCH', 'none'))])])\n"
    )
    c1 = commit(repo, {"setup.py": setup, "fastext.c": _c_source(functions)}, "fastext")
    return PatchedRepo(path=repo, commits=[c1], orphan="", patch_dir=root, good=[], bad="")


_CUDA_SETUP = r'''
import os, subprocess, sysconfig
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class Nvcc(build_ext):
    """Compile the module with the CUDA_HOME envbuild sets, its nvcc and the host compiler it names."""

    def build_extension(self, ext):
        home = os.environ["CUDA_HOME"]
        out = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        arch = os.environ.get("TORCH_CUDA_ARCH_LIST", "9.0").replace(".", "")
        cmd = [os.path.join(home, "bin", "nvcc"), "-shared", "-Xcompiler", "-fPIC",
               f"-gencode=arch=compute_{arch},code=sm_{arch}", "-I", sysconfig.get_paths()["include"],
               "cudaext.cu", "-o", out, "-L", os.path.join(home, "lib64"), "-lcudart",
               "-Xlinker", "-rpath=$ORIGIN/nvidia/cu13/lib"]
        if os.environ.get("CUDAHOSTCXX"):
            cmd[1:1] = ["-ccbin", os.environ["CUDAHOSTCXX"]]
        print("nvcc:", " ".join(cmd), flush=True)
        subprocess.check_call(cmd)


setup(name="cudaext", version="0.1.0", ext_modules=[Extension("cudaext", ["cudaext.cu"])], cmdclass={"build_ext": Nvcc})
'''

_CUDA_SOURCE = r'''
#include <Python.h>
#include <cuda_runtime.h>

__global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }

static PyObject* runtime_version(PyObject*, PyObject*) {
  int v = 0;
  cudaError_t rc = cudaRuntimeGetVersion(&v);
  return Py_BuildValue("(ii)", (int)rc, v);
}
static PyObject* device_count(PyObject*, PyObject*) {
  int n = -1;
  cudaError_t rc = cudaGetDeviceCount(&n);
  return Py_BuildValue("(ii)", (int)rc, n);
}
static PyMethodDef M[] = {{"runtime_version", runtime_version, METH_NOARGS, "cudaRuntimeGetVersion"},
                          {"device_count", device_count, METH_NOARGS, "cudaGetDeviceCount"},
                          {NULL, NULL, 0, NULL}};
static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "cudaext", NULL, -1, M};
PyMODINIT_FUNC PyInit_cudaext(void) { return PyModule_Create(&D); }
'''


def make_cuda_extension_repo(root: Path) -> PatchedRepo:
    """A setuptools project `cudaext`: a Python module with a CUDA kernel, compiled by the nvcc of $CUDA_HOME
    and linked to libcudart through $CUDA_HOME/lib64 (the layout envbuild assembles from NVIDIA's wheels)."""
    repo = init_repo(root / "cudaext")
    c1 = commit(repo, {"setup.py": _CUDA_SETUP, "cudaext.cu": _CUDA_SOURCE}, "cudaext")
    return PatchedRepo(path=repo, commits=[c1], orphan="", patch_dir=root, good=[], bad="")
