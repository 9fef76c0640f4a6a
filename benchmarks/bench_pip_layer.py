"""The pip layer against uv and pip alone, in one run, on the same lock (real PyPI: this benchmark uses
the network; run it where PyPI is reachable).

    python benchmarks/bench_pip_layer.py --python /path/to/python3.12 [--profile slime-v0.3.1-cu130]
                                         [--exclude REGEX] [--repeat 1]
    (or: python benchmarks/bench_lock_create.py --pip-layer --python ...)

Lock: envbuild's resolution of the profile's [recipe.pip] (resolve_pip_entries: uv pip compile of a
throw-away project, pylock parsing, rendering) vs `uv pip compile` of the same requirements with the same
flags, written to requirements.txt (the anchor), each with a cold and a warm uv cache. Goal <= 1.2x.

Install: the committed lock, minus the packages matching --exclude (default: the multi-GB CUDA wheels,
so a run fits a small disk; --exclude '^$' installs all), into fresh venvs on --python:
  ours: envbuild.install.pip_layer.install_entries (direct references with --hash, uv pip install)
  uv:   `uv pip sync --require-hashes requirements.txt` (the anchor)
  pip:  `pip install --no-deps --require-hashes -r requirements.txt` (pip 26, its own cache)
cold (empty caches) and warm (caches filled by the cold run). Goal: ours <= 1.2x uv.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from envbuild.install.pip_layer import install_entries, read_locked_entries  # noqa: E402
from envbuild.lock.pip_lock import resolve_pip_entries, uv_python_platform  # noqa: E402
from envbuild.lock.pip_outputs import target  # noqa: E402
from envbuild.lock.uv_cli import uv_bin, uv_env  # noqa: E402
from envbuild.profile import load_profile, lockfiles_base  # noqa: E402

HEAVY = r"^(nvidia-|torch|triton|cuda-|sglang-kernel|sgl-deep-gemm|ray$|xgrammar|flashinfer|cupy)"


def timed(fn):
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def run(cmd, env=None, cwd=None):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(map(str, cmd))}\n{proc.stderr[-2000:]}")
    return proc


def venv(python: str, path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    run([uv_bin(), "venv", "--no-config", "--quiet", "--python", python, str(path)], env=uv_env())
    return path / "bin" / "python"


def ratio_line(label: str, ours: float, anchor: float, goal: float = 1.2) -> str:
    r = ours / anchor if anchor else float("inf")
    return f"{label}: ours {ours:.2f}s / anchor {anchor:.2f}s = {r:.2f}x (goal <= {goal}x: {'met' if r <= goal else 'NOT met'})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True, help="an interpreter of the profile's Python version")
    ap.add_argument("--profile", default="slime-v0.3.1-cu130")
    ap.add_argument("--exclude", default=HEAVY, help=f"packages left out of the install runs (default {HEAVY!r})")
    a = ap.parse_args(argv)
    profile = load_profile(a.profile, lockfiles_base(None))
    recipe = profile.require_recipe()
    python_version, tags = target(profile, recipe)
    tmp = Path(tempfile.mkdtemp(prefix="envbuild-bench-pip-"))
    try:
        # --- lock
        def ours_lock(cache):
            resolve_pip_entries(recipe.pip.requirements, recipe.pip.indexes, python_version, tags,
                                exclude_newer=recipe.pip.exclude_newer or None, cache_dir=cache)

        reqs = tmp / "requirements.in"
        reqs.write_text("\n".join(recipe.pip.requirements) + "\n")

        def uv_lock(cache):
            cmd = [uv_bin(), "pip", "compile", "--no-config", str(reqs), "--quiet", "-o", str(tmp / "uv-out.txt"),
                   "--python-version", python_version, "--python-platform", uv_python_platform(tags),
                   "--generate-hashes", "--only-binary", ":all:", "--index-strategy", "first-index",
                   "--default-index", recipe.pip.indexes[-1].url]
            if recipe.pip.exclude_newer:
                cmd += ["--exclude-newer", recipe.pip.exclude_newer]
            run(cmd, env=uv_env(cache))

        lock = {}
        for who, fn in (("uv", uv_lock), ("ours", ours_lock)):
            cache = tmp / f"lock-cache-{who}"
            lock[(who, "cold")] = timed(lambda: fn(cache))
            lock[(who, "warm")] = timed(lambda: fn(cache))
        # --- install
        entries = [e for e in read_locked_entries(profile.directory / "requirements.lock.txt")
                   if not re.search(a.exclude, e.canonical_name)]
        req = tmp / "requirements.txt"
        req.write_text("".join(f"{e.canonical_name}=={e.version} " + " ".join(f"--hash=sha256:{h}" for h in e.hashes)
                               + "\n" for e in entries))
        index = recipe.pip.indexes[-1].url
        pip_venv = tmp / "pip-tool"
        run([sys.executable, "-m", "venv", str(pip_venv)])
        run([str(pip_venv / "bin" / "python"), "-m", "pip", "install", "-q", "pip==26.3"])

        def ours_install(cache, env_dir):
            install_entries(venv(a.python, env_dir), entries, index_urls=[index], cache_dir=cache)

        def uv_install(cache, env_dir):
            py = venv(a.python, env_dir)
            run([uv_bin(), "pip", "sync", "--no-config", "--quiet", "--python", str(py), "--require-hashes",
                 "--default-index", index, "--python-platform", uv_python_platform(tags), str(req)], env=uv_env(cache))

        def pip_install(cache, env_dir):
            py = venv(a.python, env_dir)
            env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_CACHE_DIR=str(cache))
            run([str(pip_venv / "bin" / "python"), "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
                 "--require-hashes", "--only-binary", ":all:", "--index-url", index, "-r", str(req)], env=env)

        inst = {}
        for who, fn in (("uv", uv_install), ("ours", ours_install), ("pip", pip_install)):
            cache = tmp / f"install-cache-{who}"
            for state in ("cold", "warm"):
                inst[(who, state)] = timed(lambda: fn(cache, tmp / f"env-{who}"))
        print(f"profile {a.profile}: {len(recipe.pip.requirements)} requirements, python {python_version}, "
              f"{uv_python_platform(tags)}; install runs: {len(entries)} of the lock's packages "
              f"(excluded: {a.exclude!r})")
        for state in ("cold", "warm"):
            print(ratio_line(f"lock ({state} cache)", lock[("ours", state)], lock[("uv", state)]))
        for state in ("cold", "warm"):
            print(ratio_line(f"install ({state} cache) vs uv pip sync", inst[("ours", state)], inst[("uv", state)]))
            print(f"    pip alone ({state}): {inst[('pip', state)]:.2f}s = "
                  f"{inst[('pip', state)] / inst[('uv', state)]:.2f}x uv")
        print(f"cold/warm: lock ours {lock[('ours', 'cold')] / lock[('ours', 'warm')]:.1f}x, "
              f"install ours {inst[('ours', 'cold')] / inst[('ours', 'warm')]:.1f}x")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
