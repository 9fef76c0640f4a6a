"""The conda layer's job done from PyPI: a CUDA extension compiled for sm_90 on this CPU-only machine with
NVIDIA's real nvcc/CCCL/runtime wheels (locked with hashes from a loopback index) and the system g++.

The CUDA wheels are downloaded by .ci/run into $ENVBUILD_CUDA_WHEELS (about 100 MB; CI sets
ENVBUILD_REQUIRE_CUDA_WHEELS=1 so a missing download fails here instead of skipping)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixturegen.conda_channel import FIXTURE_PROFILE
from fixturegen.gitrepos import commit, make_cuda_extension_repo
from fixturegen.wheels import serve, write_simple_index

TOOLCHAIN = ["nvidia-cuda-nvcc==13.0.88", "nvidia-cuda-crt==13.0.88", "nvidia-nvvm==13.0.88",
             "nvidia-cuda-runtime==13.0.96", "nvidia-cuda-cccl==13.0.85"]
RECIPE = """
[recipe.pip]
indexes = [{{ name = "fixture", url = "{index}" }}]
requirements = ["setuptools==79.0.1", "pip==25.3"]
exclude_newer = "2026-06-01T00:00:00Z"

[recipe.toolchain]
pip = {toolchain}
cxx = "{cxx}"

[[recipe.git]]
name = "cudaext"
url = "{repo}"
commit = "{commit}"
install = "build"

[[recipe.build]]
name = "cudaext"
git = "cudaext"
env = {{ TORCH_CUDA_ARCH_LIST = "9.0" }}
pip_args = ["--no-build-isolation"]
"""


def _wheels() -> Path:
    folder = os.environ.get("ENVBUILD_CUDA_WHEELS", "")
    have = Path(folder) if folder else None
    if have is None or not any(have.glob("nvidia_cuda_nvcc-13.0.88-*.whl")):
        if os.environ.get("ENVBUILD_REQUIRE_CUDA_WHEELS") == "1":
            pytest.fail(f"ENVBUILD_CUDA_WHEELS={folder!r} holds no nvidia-cuda-nvcc 13.0.88 wheel (see .ci/run)")
        pytest.skip("no CUDA toolchain wheels: set ENVBUILD_CUDA_WHEELS (.ci/run downloads them)")
    return have


def envbuild(*args, env):
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, COLUMNS="300", **env))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    wheels = _wheels()
    root = tmp_path_factory.mktemp("pypitoolchain")
    write_simple_index(root / "index", sorted(wheels.glob("*.whl")))
    repo = make_cuda_extension_repo(root / "git")
    env = {"ENVBUILD_LOCKFILES": str(root / "lockfiles"), "ENVBUILD_CACHE_DIR": str(root / "cache"),
           "ENVBUILD_WHEEL_CACHE": str(root / "wheelcache"), "MAX_JOBS": "2"}
    with serve(root / "index") as url:
        def write(name: str, cxx: str = "g++", commit_id: str = repo.commits[0]) -> None:
            folder = root / "lockfiles" / name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "profile.toml").write_text(
                FIXTURE_PROFILE.format(name=name, channel=(root / "nochannel").as_uri(), mark="t")
                + RECIPE.format(index=url, toolchain=json.dumps(TOOLCHAIN), cxx=cxx, repo=repo.path, commit=commit_id))
            r = envbuild("lock", "--only", "pip", "--profile", name, env=env)
            assert r.returncode == 0, r.stderr
        yield {"root": root, "env": env, "repo": repo, "write": write}


def test_a_cuda_extension_compiles_with_the_wheels_nvcc_and_the_system_compiler(site):
    site["write"]("cudafx")
    target = site["root"] / "envs" / "cudafx"
    r = envbuild("create", "--backend", "venv", "--python", sys.executable, "--profile", "cudafx", "--prefix",
                 str(target), env=site["env"])
    assert r.returncode == 0, r.stderr
    assert "toolchain nvcc: pip (nvidia-cuda-nvcc 13.0.88)" in r.stderr
    assert "toolchain CCCL: pip (nvidia-cuda-cccl 13.0.85)" in r.stderr
    assert "toolchain C++ compiler: system (" in r.stderr and "g++" in r.stderr
    assert "nvcc 13.0.88 compiled a kernel for sm_90" in r.stderr, r.stderr
    probe = subprocess.run([str(target / "bin" / "python"), "-c",
                            "import cudaext; print(*cudaext.runtime_version())"], capture_output=True, text=True)
    assert probe.stdout.split() == ["0", "13000"], probe.stderr  # cudaSuccess, CUDA 13.0 runtime
    nvcc = target / "envbuild" / "cuda" / "bin" / "nvcc"
    assert nvcc.is_symlink() and nvcc.resolve().is_relative_to(target)  # relative links: survived the swap
    assert (target / "envbuild" / "cuda" / "lib64" / "libcudart.so").exists()
    # the driver's link stub: a program linked with -lcuda needs libcuda.so.1, the node's driver, at run time
    stubs = target / "envbuild" / "cuda" / "lib64" / "stubs"
    prog = site["root"] / "uses_driver"
    (site["root"] / "uses_driver.c").write_text("int cuInit(unsigned);\nint main(void) { return cuInit(0) == 0; }\n")
    subprocess.run(["gcc", str(site["root"] / "uses_driver.c"), "-L", str(stubs), "-lcuda", "-o", str(prog)], check=True)
    needed = subprocess.run(["readelf", "-d", str(prog)], capture_output=True, text=True, check=True).stdout
    assert "Shared library: [libcuda.so.1]" in needed
    nm = subprocess.run(["nm", "-D", "--defined-only", str(stubs / "libcuda.so")], capture_output=True, text=True).stdout
    assert " cuMemCreate" in nm and " cuMemAlloc_v2" in nm and " cuInit" in nm
    manifest = json.loads((target / "envbuild" / "manifest.json").read_text())
    (build,) = manifest["layers"]["builds"]
    assert build["name"] == "cudaext" and build["key"]["cuda"] == "13.0" and build["from"] == "built"


def test_a_missing_host_compiler_is_a_plan_line_before_any_work(site):
    site["write"]("nocxx", cxx="no-such-g++")
    target = site["root"] / "envs" / "nocxx"
    r = envbuild("create", "--backend", "venv", "--python", sys.executable, "--profile", "nocxx", "--prefix",
                 str(target), env=site["env"])
    assert r.returncode == 2
    assert "PROBLEM source builds need C++ compiler: no-such-g++ is not on PATH" in r.stderr
    assert not target.exists() and "Traceback" not in r.stderr


def test_a_compile_that_fails_names_its_log_and_keeps_the_previous_env(site):
    site["write"]("broken")
    target = site["root"] / "envs" / "broken"
    assert envbuild("create", "--backend", "venv", "--python", sys.executable, "--profile", "broken", "--prefix",
                    str(target), env=site["env"]).returncode == 0
    before = (target / "envbuild" / "manifest.json").read_bytes()
    bad = commit(site["repo"].path, {"cudaext.cu": "__global__ void twice(float* x) { x[threadIdx.x] *= ; }\n"},
                 "a syntax error")
    site["write"]("broken", commit_id=bad)
    r = envbuild("create", "--backend", "venv", "--python", sys.executable, "--profile", "broken", "--prefix",
                 str(target), env=site["env"])
    assert r.returncode == 2, r.stderr
    line = next(ln for ln in r.stderr.splitlines() if "source build 'cudaext' failed" in ln)
    log = Path(line.split("log: ", 1)[1].split(";", 1)[0])
    assert log.is_file() and "error" in log.read_text()
    assert "Traceback" not in r.stderr
    assert (target / "envbuild" / "manifest.json").read_bytes() == before
