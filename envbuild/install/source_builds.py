"""Source builds (apex, flash-attn, TE, torch_memory_saver, ...) turned into wheels, cached by what they depend on.

Compiling the CUDA extensions of the slime stack takes tens of minutes per node; the result depends only on
the source (commit and applied patches), the Python, torch and CUDA versions, the GPU architectures and the
build's own flags. So a build is done once into a wheelhouse cache keyed by exactly those, and every other
node with the same key installs the wheel in seconds (research/envbuilders.md §0.4c, §6.3).

A cache entry is a folder `<cache>/<name>/<commit12>-<key16>/` holding the wheel and `entry.json` (the key,
the wheel's sha256, the build time). A reuse re-hashes the wheel: a truncated or altered wheel is rebuilt,
never installed. Entries are written in a temporary folder and renamed into place, so a build killed
halfway leaves no entry, and two nodes sharing the cache never see half an entry.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import string
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Mapping, Optional, Union

from envbuild.errors import EnvbuildError
from envbuild.lock.pip_lock import isolated_pip_env

log = logging.getLogger("envbuild.source_builds")

KEY_FACTS = ("python", "torch", "cuda", "gpu_arch")  # what a CUDA extension's binary depends on


@dataclass(frozen=True)
class CacheEntry:
    folder: Path
    wheel: Path
    sha256: str
    key: Dict[str, object]
    build_seconds: float


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _git_out(args: list, cwd: Path) -> Optional[str]:
    proc = subprocess.run(["git", *args], cwd=str(cwd), capture_output=True)
    return proc.stdout.decode("utf-8", "replace") if proc.returncode == 0 else None


def build_key(build: object, src_dir: Union[str, Path], key_facts: Mapping[str, object]) -> Dict[str, object]:
    """The facts a build's wheel depends on: name, commit, local patches, python/torch/CUDA/arch, flags."""
    src_dir = Path(src_dir)
    commit = key_facts.get("commit") or (_git_out(["rev-parse", "HEAD"], src_dir) or "").strip()
    if not commit:
        raise EnvbuildError(f"source build {getattr(build, 'name')!r}: {src_dir} is not a git checkout and no "
                            "commit was given; the wheel cache needs one")
    diff = _git_out(["diff", "HEAD", "--binary"], src_dir) or ""
    key: Dict[str, object] = {"name": getattr(build, "name"), "commit": str(commit),
                              "patches_sha256": hashlib.sha256(diff.encode()).hexdigest()}
    for fact in KEY_FACTS:
        key[fact] = str(key_facts.get(fact, "none"))
    key["env"] = dict(sorted((getattr(build, "env", {}) or {}).items()))
    key["pip_args"] = list(getattr(build, "pip_args", []) or [])
    return key


def _entry_folder(cache_dir: Path, key: Dict[str, object]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir / str(key["name"]) / f"{str(key['commit'])[:12]}-{digest}"


def read_entry(folder: Path) -> Optional[CacheEntry]:
    """The cache entry in `folder` if it is complete and its wheel still has the recorded sha256."""
    try:
        meta = json.loads((folder / "entry.json").read_text(encoding="utf-8"))
        wheel = folder / meta["wheel"]
        if _sha256(wheel) != meta["sha256"]:
            log.warning("cached wheel %s does not match its sha256; rebuilding", wheel)
            return None
        return CacheEntry(folder=folder, wheel=wheel, sha256=meta["sha256"], key=meta["key"],
                          build_seconds=float(meta.get("build_seconds", 0.0)))
    except (OSError, ValueError, KeyError):
        return None


def cached_entry(build: object, src_dir: Union[str, Path], cache_dir: Union[str, Path],
                 key_facts: Mapping[str, object]) -> Optional[CacheEntry]:
    """The valid cache entry for this build and these facts, or None (what a create would reuse)."""
    return read_entry(_entry_folder(Path(cache_dir), build_key(build, src_dir, key_facts)))


def _build_env(build: object, extra_env: Optional[Mapping[str, str]]) -> Dict[str, str]:
    """pip's isolated env plus the build's variables; `${VAR}` in a value expands against that env."""
    env = isolated_pip_env()
    env.update(extra_env or {})
    for name, value in (getattr(build, "env", {}) or {}).items():
        env[name] = string.Template(value).safe_substitute(env)
    return env


def build_or_reuse(build: object, python: Union[str, Path], src_dir: Union[str, Path], cache_dir: Union[str, Path],
                   key_facts: Mapping[str, object], extra_env: Optional[Mapping[str, str]] = None) -> Path:
    """Return a wheel of `build` (a recipe SourceBuild) for these facts: from the cache, or built now.

    `src_dir` is the folder to build (the checkout, or its subdir), `python` the environment's interpreter
    (its torch and build tools are used: --no-build-isolation). `key_facts` holds python, torch, cuda,
    gpu_arch (and optionally commit). `extra_env` (e.g. CONDA_PREFIX, CUDA_HOME) is set for the build and
    can be referenced as ${VAR} in the build's env values.
    """
    src_dir, cache_dir = Path(src_dir).absolute(), Path(cache_dir).absolute()
    name = getattr(build, "name")
    key = build_key(build, src_dir, key_facts)
    folder = _entry_folder(cache_dir, key)
    entry = read_entry(folder)
    if entry is not None:
        return entry.wheel

    tmp = folder.parent / f".tmp-{folder.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "wheels").mkdir(parents=True)
    cmd = [str(python), "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-input",
           "--disable-pip-version-check", "--progress-bar", "off", "--wheel-dir", str(tmp / "wheels"),
           *list(getattr(build, "pip_args", []) or []), str(src_dir)]
    started = time.monotonic()
    with open(tmp / "build.log", "w", encoding="utf-8") as logfile:
        proc = subprocess.run(cmd, stdout=logfile, stderr=subprocess.STDOUT, env=_build_env(build, extra_env),
                              cwd=str(src_dir))
    seconds = round(time.monotonic() - started, 3)
    wheels = sorted((tmp / "wheels").glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        failed_log = folder.parent / f"build-failed-{folder.name}.log"
        shutil.copyfile(tmp / "build.log", failed_log)
        tail = (tmp / "build.log").read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
        shutil.rmtree(tmp, ignore_errors=True)
        why = f"pip wheel exited {proc.returncode}" if proc.returncode else f"{len(wheels)} wheels instead of 1"
        raise EnvbuildError(f"source build {name!r} failed ({why}); log: {failed_log}; last lines: " + " | ".join(tail))
    wheel = tmp / wheels[0].name
    wheels[0].replace(wheel)
    (tmp / "wheels").rmdir()
    meta = {"key": key, "wheel": wheel.name, "sha256": _sha256(wheel), "build_seconds": seconds}
    (tmp / "entry.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if folder.exists():  # a corrupt entry: replace it
        shutil.rmtree(folder)
    try:
        tmp.replace(folder)
    except OSError:  # another node finished the same entry first: use theirs if it is sound
        shutil.rmtree(tmp, ignore_errors=True)
        entry = read_entry(folder)
        if entry is None:
            raise
        return entry.wheel
    return folder / wheel.name
