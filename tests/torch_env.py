"""A python that can import torch, for tests that run payloads (checks/*.py) on gloo CPU ranks.

Why not torch in the `test` extra: tests that build environments from the test interpreter (create,
pack) would then see a CPU torch and fail the stack checks. Instead the CPU wheel (on local disk on the
CI machine, ~20 s) is installed once per session with `pip install --target` into a scratch directory,
and payloads run under the test interpreter with that directory on PYTHONPATH: the environment under
test, as far as the payload can tell. When the test interpreter already has torch, it is used as is.

Use: take `torch_env` as a test argument (tests/conftest.py defines it once for every test; a module importing it
would define a fixture of its own and install torch once more):
      python, env = torch_env; launch(..., python=python, env={**env, ...})
"""
import shutil
import subprocess
import sys

import pytest

TORCH_SPEC = "torch==2.13.0"  # the CPU wheel this CI machine keeps on local disk


@pytest.fixture(scope="session")
def torch_env(tmp_path_factory):
    """(python, env) under which `import torch` works; skips with the reason when pip cannot get torch."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        yield sys.executable, {}
        return
    target = tmp_path_factory.mktemp("torch-site")
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                               "--target", str(target), TORCH_SPEC], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.skip(f"pip install {TORCH_SPEC} took longer than 600 s")
    if proc.returncode != 0:
        pytest.skip(f"pip install {TORCH_SPEC} failed: {proc.stderr.strip().splitlines()[-1:]}")
    yield sys.executable, {"PYTHONPATH": str(target)}
    shutil.rmtree(target, ignore_errors=True)  # 0.9 GB: none of it stays on the disk after the run
