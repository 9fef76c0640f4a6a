"""Source builds (apex, flash-attn, TE, torch_memory_saver, ...) turned into wheels, cached by what they depend on.

Compiling the CUDA extensions of the slime stack takes tens of minutes per node; the result depends only on
the source (commit and applied patches), the Python, torch and CUDA versions, the GPU architectures and the
build's own flags. So a build is done once into a wheelhouse cache keyed by exactly those, and every other
node with the same key installs the wheel in seconds.

A cache entry is a folder `<cache>/<name>/<commit12>-<key16>/` holding the wheel and `entry.json` (the key,
the wheel's sha256, the build time). A reuse re-hashes the wheel: a truncated or altered wheel is rebuilt,
never installed. Entries are written in a temporary folder and renamed into place, so a build killed
halfway leaves no entry, and two nodes sharing the cache never see half an entry.
"""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import re
import shutil
import string
import subprocess
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Union

from envbuild import cachelock
from envbuild.errors import EnvbuildError
from envbuild.hashing import sha256_file
from envbuild.leftovers import tmp_prefix
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
        if sha256_file(wheel) != meta["sha256"]:
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
    key = build_key(build, src_dir, key_facts)
    folder = _entry_folder(cache_dir, key)
    entry = read_entry(folder) or _build(build, python, src_dir, folder, key, extra_env)
    return entry.wheel


def _build(build: object, python: Union[str, Path], src_dir: Path, folder: Path, key: Dict[str, object],
           extra_env: Optional[Mapping[str, str]]) -> CacheEntry:
    """Compile `build` into the cache entry `folder` (absolute paths; its key already computed by the caller).

    Under the entry's lock (envbuild.cachelock): a create that waited for another one building the same entry
    reuses that entry instead of building it again and replacing it under the other's feet."""
    with cachelock.entry_lock(folder):
        entry = read_entry(folder)
        if entry is not None:
            return entry
        return _build_locked(build, python, src_dir, folder, key, extra_env)


def _build_locked(build: object, python: Union[str, Path], src_dir: Path, folder: Path, key: Dict[str, object],
                  extra_env: Optional[Mapping[str, str]]) -> CacheEntry:
    name = getattr(build, "name")
    tmp = folder.parent / f".tmp-{folder.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "wheels").mkdir(parents=True)
    cmd = [str(python), "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "--no-input",
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
        from envbuild.install.buildlog import cause

        why = cause((tmp / "build.log").read_text(encoding="utf-8", errors="replace"))
        shutil.rmtree(tmp, ignore_errors=True)
        exit_ = f"pip wheel exited {proc.returncode}" if proc.returncode else f"{len(wheels)} wheels instead of 1"
        raise EnvbuildError(f"source build {name!r} failed ({exit_}); log: {failed_log}; cause: {why}")
    wheel = tmp / wheels[0].name
    wheels[0].replace(wheel)
    (tmp / "wheels").rmdir()
    meta = {"key": key, "wheel": wheel.name, "sha256": sha256_file(wheel), "build_seconds": seconds}
    (tmp / "entry.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    # a corrupt entry in the way is renamed aside (a reader holding it open keeps its bytes), then ours goes in
    if not cachelock.publish_dir(tmp, folder, trash_name=f".tmp-{folder.name}-trash-{os.getpid()}"):
        entry = read_entry(folder)  # another node (not sharing our lock: other filesystem semantics) won
        if entry is None:
            raise EnvbuildError(f"source build {name!r}: cannot publish the cache entry {folder}")
        return entry
    return CacheEntry(folder=folder, wheel=folder / wheel.name, sha256=meta["sha256"], key=key, build_seconds=seconds)


_ENV_FACTS_PROBE = (
    "import json, sys\n"
    "from importlib import metadata\n"
    "def v(n):\n"
    "    try:\n"
    "        return metadata.version(n)\n"
    "    except Exception:\n"
    "        return 'none'\n"
    "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'torch': v('torch')}))\n"
)


def wheel_cache_dir() -> Path:
    """The source-build wheel cache: $ENVBUILD_WHEEL_CACHE, else <envbuild cache>/source-wheels.

    Point ENVBUILD_WHEEL_CACHE at a shared filesystem and the first node's builds serve every other node.
    """
    from envbuild.paths import cache_dir

    explicit = os.environ.get("ENVBUILD_WHEEL_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    return cache_dir() / "source-wheels"


def env_key_facts(python: Union[str, Path], prefix: Union[str, Path], build: object,
                  activation_env: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """python/torch/CUDA/arch of the environment a build is for, read from the env itself.

    torch's version comes from its installed metadata (no import: no GPU needed), CUDA from the env's nvcc,
    the arch from TORCH_CUDA_ARCH_LIST (the build's env, the recipe's activation, the caller's environment).
    """
    proc = subprocess.run([str(python), "-c", _ENV_FACTS_PROBE], capture_output=True, text=True)
    if proc.returncode != 0:
        raise EnvbuildError(f"cannot read the python/torch versions of {python}: {proc.stderr.strip()[-300:]}")
    facts = json.loads(proc.stdout)
    from envbuild.install.toolchain import cuda_home

    try:
        nvcc = cuda_home(Path(prefix)) / "bin" / "nvcc"
    except EnvbuildError:
        nvcc = Path(prefix) / "bin" / "nvcc"
    cuda = "none"
    if nvcc.is_file():
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True).stdout
        found = re.search(r"release (\d+\.\d+)", out)  # "Cuda compilation tools, release 12.9, V12.9.86"
        cuda = found.group(1) if found else "unknown"
    arch = ((getattr(build, "env", {}) or {}).get("TORCH_CUDA_ARCH_LIST")
            or (activation_env or {}).get("TORCH_CUDA_ARCH_LIST") or os.environ.get("TORCH_CUDA_ARCH_LIST") or "none")
    return {"python": facts["python"], "torch": facts["torch"], "cuda": cuda, "gpu_arch": arch}


def _install_wheel(python: Union[str, Path], wheel: Path, sha256: str) -> None:
    """pip-install exactly the verified bytes (a one-line hashed requirement), no deps, no index."""
    project = wheel.name.split("-", 1)[0]
    with tempfile.TemporaryDirectory(prefix=tmp_prefix("envbuild-build")) as tmp:
        req = Path(tmp) / "wheel.txt"
        req.write_text(f"{project} @ {wheel.absolute().as_uri()} --hash=sha256:{sha256}\n", encoding="utf-8")
        proc = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--require-hashes",
                               "--force-reinstall", "--no-input", "--disable-pip-version-check", "-r", str(req)],
                              capture_output=True, text=True, env=isolated_pip_env())
    if proc.returncode != 0:
        raise EnvbuildError(f"installing {wheel.name} failed: {proc.stderr.strip()[-400:]}")


def record_git_origin(prefix: Path, wheel: Path, url: str, commit: str) -> None:
    """Write the installed distribution's PEP 610 direct_url.json as `pip install git+URL@COMMIT` would have:
    pip records a local wheel as `archive_info` of a file path, which loses the one fact the doctor compares for a
    commit-pinned piece (stack.profile_match read apex and torch_memory_saver as "unknown commit"). The RECORD line
    of the file gets its new hash and size, so pip's uninstall and the manifest stay consistent."""
    from envbuild.install.toolchain import site_packages

    site = site_packages(Path(prefix))
    dist_info = _dist_info_name(wheel)
    if site is None or dist_info is None or not (site / dist_info).is_dir():
        raise EnvbuildError(f"installed {wheel.name}, but its {dist_info or '*.dist-info'} is not in {prefix}")
    body = (json.dumps({"url": url, "vcs_info": {"vcs": "git", "commit_id": commit}}, sort_keys=True) + "\n").encode()
    (site / dist_info / "direct_url.json").write_bytes(body)
    record = site / dist_info / "RECORD"
    if record.is_file():
        digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
        name = f"{dist_info}/direct_url.json"
        lines = [ln for ln in record.read_text(encoding="utf-8").splitlines() if ln.split(",", 1)[0] != name]
        record.write_text("\n".join(lines + [f"{name},sha256={digest},{len(body)}"]) + "\n", encoding="utf-8")


def _dist_info_name(wheel: Path) -> Optional[str]:
    """The `<name>-<version>.dist-info` folder a wheel installs (read from the wheel: its file name may be
    normalised differently)."""
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            top = name.split("/", 1)[0]
            if top.endswith(".dist-info"):
                return top
    return None


def _toolchain_env(prefix: Path, recipe: object, facts: Mapping[str, str], cache: Path, phase) -> Dict[str, str]:
    """The toolchain's variables for the builds, after one test compile (envbuild.install.toolchain). An env
    with no nvcc anywhere builds without CUDA variables unless the recipe declares a toolchain."""
    from envbuild.install.toolchain import build_env, preflight

    try:
        env = build_env(prefix, recipe)
    except EnvbuildError:
        if getattr(getattr(recipe, "toolchain", None), "pip", None):
            raise
        return {}
    arch = facts.get("gpu_arch", "none")
    summary = preflight(prefix, env, "" if arch == "none" else arch, cache)
    if phase is not None:
        phase.log(f"toolchain: CUDA_HOME {env['CUDA_HOME']}; {summary}")
    return env


def install_source_builds(prefix: Union[str, Path], recipe: object, bundle: Optional[object] = None,
                          cache_dir: Optional[Union[str, Path]] = None, phase=None,
                          without: Sequence[str] = ()) -> List[Dict[str, object]]:
    """The `builds` phase of create: every recipe build from the bundle, the cache, or compiled now; installed.
    `phase` (an envbuild.progress.Phase) shows which build runs (and where its log is) and logs each one.

    Sources are the git checkouts create made under <prefix>/src/<git name>/<subdir>. A bundle's
    prebuilt entries (`bundle.builds_dir`, same layout as the cache) are used when their key matches this
    env. Builds of the git sources in `without` are left out. Before the first compile, the toolchain
    (envbuild.install.toolchain: CUDA_HOME, host compiler) compiles one kernel, so a broken toolchain is named
    in seconds. Returns one record per build for the manifest (wheel, sha256, key, where it came from).
    """
    prefix = Path(prefix)
    python = prefix / "bin" / "python"
    cache = (Path(cache_dir) if cache_dir else wheel_cache_dir()).absolute()
    activation_env = getattr(getattr(recipe, "activation", None), "env", {}) or {}
    extra_env = {"CONDA_PREFIX": str(prefix), "PREFIX": str(prefix), "VIRTUAL_ENV": str(prefix),
                 "PATH": os.pathsep.join([str(prefix / "bin"), os.environ.get("PATH", "")])}
    records: List[Dict[str, object]] = []
    toolchain_ready = False
    for build in getattr(recipe, "builds", []):
        if build.git in without:
            continue
        src = recipe.git_source(build.git)
        src_dir = prefix / "src" / src.name / (src.subdir or "")
        facts = env_key_facts(python, prefix, build, activation_env)
        key = build_key(build, src_dir, facts)
        entry, origin = None, "cache"
        bundled = getattr(bundle, "builds_dir", None)
        if bundled is not None:
            entry = read_entry(_entry_folder(Path(bundled), key))
            origin = "bundle" if entry else origin
        if entry is None:
            entry = read_entry(_entry_folder(cache, key))
        if entry is None:
            origin = "built"  # the key is already known: no second git diff, no re-hash (pip checks the hash)
            folder = _entry_folder(cache, key)
            if not toolchain_ready:
                extra_env.update(_toolchain_env(prefix, recipe, facts, cache, phase))
                toolchain_ready = True
            if phase is not None:
                phase.detail(f"compiling {build.name} (log: {folder.parent / f'.tmp-{folder.name}-{os.getpid()}'}"
                             f"/build.log)")
            entry = _build(build, python, src_dir.absolute(), folder, key, extra_env)
        _install_wheel(python, entry.wheel, entry.sha256)
        record_git_origin(prefix, entry.wheel, src.url, src.commit)
        if phase is not None:
            where = {"built": f"compiled here in {entry.build_seconds:.1f} s", "cache": "from the wheel cache",
                     "bundle": "from the bundle"}[origin]
            phase.advance()
            phase.log(f"{build.name}: {entry.wheel.name} {where}")
        records.append({"name": build.name, "wheel": entry.wheel.name, "sha256": entry.sha256, "key": key,
                        "from": origin, "build_seconds": entry.build_seconds})
    return records
