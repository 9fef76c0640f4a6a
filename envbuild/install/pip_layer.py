"""Install the locked pip layer into an environment with uv, every file checked against the lock's sha256.

The lock's entries become a pylock.toml (PEP 751) that names, for each package, exactly the file the lock
chose with its one sha256 and the index it came from, installed by `uv pip install -r pylock.envbuild.toml
--python <env>/bin/python --no-deps --require-hashes`: no resolution and no index query happen (nothing
outside the lock can come in), uv downloads in parallel, and a file whose bytes differ from the lock is
refused before anything is installed; uv's refusal becomes one line naming the wheel and both hashes.

Why a pylock and not `name @ <url>` lines: uv caches a wheel it installs from an index under that index,
and one installed by URL under the URL, so direct references shared no cache with the user's own
`uv pip install`/`uv pip sync` (a warm create re-downloaded the multi-GB CUDA wheels). A pylock entry with
`index` is the index's file to uv: the same cache entry, hardlinked into the env like uv does. The
wheelhouse files of a bundle are given by path.

pip is not needed in the environment (a `--backend venv` env may have none).
"""
from __future__ import annotations

import functools
import json
import re
import tempfile
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Union

from envbuild.errors import EnvbuildError
from envbuild.hashing import sha256_file
from envbuild.lock.pip_lockfile import LockedWheel, read_pip_lock
from envbuild.lock.uv_cli import one_line, progress_lines, run_uv

_MISMATCH = re.compile(r"Hash mismatch for `([^`]+)`", re.I)
_EXPECTED = re.compile(r"sha256:([0-9a-f]{64})")
_COMPUTED = re.compile(r"Computed:\s*sha256:([0-9a-f]{64})", re.I)


class WheelHashMismatch(EnvbuildError):
    """A wheel's bytes are not the ones the lock pinned (tampered, truncated or swapped)."""

    def __init__(self, filename: str, requirement: str, expected: Sequence[str], got: str):
        self.filename, self.requirement, self.expected, self.got = filename, requirement, list(expected), got
        super().__init__(f"{filename}: sha256 {got} is not the locked hash of {requirement} "
                         f"(expected {' or '.join(expected)}); the wheel was refused and nothing was installed")


@dataclass(frozen=True)
class InstalledWheel:
    name: str
    version: str
    sha256: str
    file: str  # the wheel's file name
    # a published file pinned by its hash (from an index or a URL), not a wheel built on a machine like this
    # one: the files it unpacks are its own bytes and cannot name the staging prefix (envbuild.install.prefix_files)
    prebuilt: bool = False


def _local_path(url: str) -> Optional[Path]:
    if not url.startswith("file:"):
        return None
    return Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path))


def _source(entry: LockedWheel, find_links: Sequence[Path], offline: bool) -> str:
    """Where the chosen file of `entry` is read from: a wheelhouse file, else (online) the locked URL."""
    for folder in find_links:
        candidate = Path(folder) / entry.filename
        if candidate.is_file():
            return candidate.resolve().as_uri()
    local = _local_path(entry.url)
    if not offline and local is not None and local.is_file():
        return local.resolve().as_uri()
    if offline or local is not None:
        where = ", ".join(str(f) for f in find_links) or "(no wheelhouse)"
        raise EnvbuildError(f"{entry.name}=={entry.version}: {entry.filename} is not in {where}; "
                            f"nothing was installed")
    return entry.url


def parse_hash_mismatch(output: str, entries: Sequence[LockedWheel]) -> Optional[WheelHashMismatch]:
    """The wheel uv refused for a hash mismatch, from uv's output; None if uv said no such thing."""
    m = _MISMATCH.search(output)
    if not m:
        return None
    tail = output[m.end():]
    got = _COMPUTED.search(tail)
    name = re.split(r"[ @=]", m.group(1).strip(), 1)[0]
    by_name = {e.canonical_name: e for e in entries}
    from packaging.utils import canonicalize_name

    entry = by_name.get(str(canonicalize_name(name)))
    if entry is None or got is None:
        return None
    return WheelHashMismatch(entry.filename, f"{entry.name}=={entry.version}", list(entry.hashes), got.group(1))


def _chosen_sha(entry: LockedWheel, source: str) -> str:
    if len(entry.hashes) == 1:
        return entry.hashes[0]
    named = [f.sha256 for f in entry.files if f.filename == entry.filename and f.sha256]
    if named:
        return named[0]
    local = _local_path(source)
    if local is None or not local.is_file():
        return ""
    got = sha256_file(local)  # which of the locked hashes is this file's: it must be one of them
    if got not in entry.hashes:
        raise WheelHashMismatch(entry.filename, f"{entry.name}=={entry.version}", list(entry.hashes), got)
    return got


def _pylock_text(entries: Sequence[LockedWheel], sources: Mapping[str, str], chosen_of: Mapping[str, str],
                 indexes: Mapping[str, str]) -> str:
    """The pylock.toml uv installs: each entry's chosen file, its one hash, and (a file of a recipe index)
    that index's URL, so uv files it in its cache under the index (module docstring)."""
    q = json.dumps  # a JSON string is a TOML basic string
    out = ['lock-version = "1.0"', 'created-by = "envbuild"', ""]
    for e in entries:
        source = sources[e.canonical_name]
        local = _local_path(source)
        where = f"path = {q(str(local))}" if local is not None else f"url = {q(source)}"
        out += ["[[packages]]", f"name = {q(e.canonical_name)}", f"version = {q(e.version)}"]
        if local is None and e.index in indexes:
            out.append(f"index = {q(indexes[e.index])}")
        out += [f"wheels = [{{ name = {q(e.filename)}, {where}, "
                f"hashes = {{ sha256 = {q(chosen_of[e.canonical_name])} }} }}]", ""]
    return "\n".join(out)


def install_entries(
    python: Union[str, Path],
    entries: Sequence[LockedWheel],
    find_links: Sequence[Union[str, Path]] = (),
    index_urls: Sequence[str] = (),
    offline: bool = False,
    cache_dir: Optional[Path] = None,
    phase=None,
    indexes: Optional[Mapping[str, str]] = None,
) -> List[InstalledWheel]:
    """Install exactly `entries` into `python`'s environment (see the module docstring); `phase` (an
    envbuild.progress.Phase) shows uv's progress lines as uv writes them. `indexes` maps the recipe's
    index names to their URLs (an entry's file is then that index's to uv's cache); `index_urls` (default:
    those URLs) are given to uv as --index so their credentials apply."""
    indexes = dict(indexes or {})
    links = [Path(f) for f in find_links]
    sources: Dict[str, str] = {e.canonical_name: _source(e, links, offline) for e in entries}
    chosen_of = {e.canonical_name: _chosen_sha(e, sources[e.canonical_name]) for e in entries}
    with tempfile.TemporaryDirectory(prefix="envbuild-uvinstall-") as tmp:
        if all(chosen_of.values()):
            req = Path(tmp) / "pylock.envbuild.toml"  # uv takes pylock.toml or pylock.<name>.toml only
            req.write_text(_pylock_text(entries, sources, chosen_of, indexes), encoding="utf-8")
            cmd = ["pip", "install", "--preview-features", "pylock"]
        else:  # an old lock without per-file hashes: the pinned version from the index, any locked hash
            req = Path(tmp) / "requirements.txt"
            req.write_text("".join(_requirement_line(e, sources[e.canonical_name], chosen_of[e.canonical_name])
                                   for e in entries), encoding="utf-8")
            cmd = ["pip", "install", "--only-binary", ":all:"]
        cmd += ["--python", str(python), "--no-deps", "--require-hashes", "-r", str(req)]
        if offline:
            cmd += ["--offline", "--no-index"]
        else:  # given so their credentials apply (and for `name==v` lines)
            for url in list(index_urls) or list(indexes.values()):
                cmd += ["--index", url]
        proc = run_uv(cmd, cache_dir=cache_dir, on_line=progress_lines(phase))
    if proc.returncode != 0:
        output = proc.stdout + "\n" + proc.stderr
        mismatch = parse_hash_mismatch(output, entries)
        if mismatch is not None:
            raise mismatch
        raise EnvbuildError(f"uv could not install the pip layer into {python}: {one_line(proc.stderr)}")
    return sorted((InstalledWheel(name=e.name, version=e.version, sha256=chosen_of[e.canonical_name],
                                  file=e.filename, prebuilt=_local_path(e.url) is None and e.index != "find-links")
                   for e in entries), key=lambda w: w.name.lower())


def _requirement_line(entry: LockedWheel, source: str, chosen: str) -> str:
    """A requirements line for an entry: a direct reference with its one hash, or (the chosen file's hash
    unknown) the pinned version with every locked hash."""
    if chosen:
        return f"{entry.canonical_name} @ {source} --hash=sha256:{chosen}\n"
    return f"{entry.canonical_name}=={entry.version} " + " ".join(f"--hash=sha256:{h}" for h in entry.hashes) + "\n"


def install_locked(
    python: Union[str, Path],
    lock_file: Union[str, Path],
    find_links: Sequence[Union[str, Path]] = (),
    index_urls: Sequence[str] = (),
    offline: bool = False,
    cache_dir: Optional[Path] = None,
    phase=None,
    indexes: Optional[Mapping[str, str]] = None,
) -> List[InstalledWheel]:
    """Install every entry of `lock_file` (requirements.lock.txt or pylock.toml) into `python`'s env.

    Offline (a bundle), files come only from `find_links`; online, from a wheelhouse file of the same
    name if one is given, else the locked URL. A lock that pins nothing is an error (a profile with a
    pip layer never gives an env without it). Raises WheelHashMismatch naming the wheel when a file
    differs from its locked hash, EnvbuildError otherwise.
    """
    entries = read_locked_entries(lock_file)
    return install_entries(python, entries, find_links, index_urls, offline, cache_dir, phase, indexes)


def read_locked_entries(lock_file: Union[str, Path]) -> List[LockedWheel]:
    """Entries of a pip-layer lock, with every accepted file's hash when a pylock.toml is given or lies
    beside the requirements lock (the chosen file's own hash is then known)."""
    from envbuild.lock.pylock import PYLOCK_FILE

    path = Path(lock_file)
    stamps = tuple((p.stat().st_mtime_ns, p.stat().st_size) if p.is_file() else None
                   for p in (path, path.with_name(PYLOCK_FILE)))
    return list(_read_locked_entries(str(path), stamps))


@functools.lru_cache(maxsize=4)
def _read_locked_entries(path_str: str, stamps: tuple) -> tuple:
    """read_locked_entries, parsed once per version of the files (`stamps`: their mtimes and sizes): create
    reads the lock to check the interpreter and again to install, and a 100 KB pylock.toml takes tomllib
    a noticeable part of a warm create."""
    from envbuild.lock.pylock import PYLOCK_FILE, read_pylock

    path = Path(path_str)
    if path.name.startswith("pylock.") and path.suffix == ".toml":
        return tuple(read_pylock(path, require_entries=True))
    entries = read_pip_lock(path, require_entries=True)
    beside = path.with_name(PYLOCK_FILE)
    if beside.is_file():
        files = {e.canonical_name: e for e in read_pylock(beside)}
        entries = [files.get(e.canonical_name, e) if files.get(e.canonical_name, e).version == e.version else e
                   for e in entries]
    return tuple(entries)


def fetch_locked_wheel(entry: LockedWheel, dest: Union[str, Path], phase=None) -> Path:
    """Copy or download the file a lock entry names into `dest`, verified against the entry's hashes while
    it streams (envbuild.downloads: retried, resumed). A file already there with a good hash is kept.
    `phase` (an envbuild.progress.Phase) counts the file and its bytes."""
    from envbuild.downloads import Download, fetch_all

    target = Path(dest) / entry.filename
    try:
        fetch_all([Download(url=entry.url, dest=target, sha256=tuple(entry.hashes))], phase=phase)
    except EnvbuildError as exc:
        got = getattr(exc, "got", None)
        if got:
            raise WheelHashMismatch(entry.filename, f"{entry.name}=={entry.version}", entry.hashes, got) from exc
        raise
    return target


__all__ = ["WheelHashMismatch", "InstalledWheel", "install_locked", "install_entries", "fetch_locked_wheel",
           "read_locked_entries"]
