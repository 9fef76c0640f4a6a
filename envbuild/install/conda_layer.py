"""The conda layer of `envbuild create`: fetch every locked archive and verify it before a backend links it.

Why we hash ourselves: py-rattler checks sha256 only for http(s) downloads, not for `file://` channels
(py-rattler's solve and install) — and bundles and mirrors are exactly file:// channels. So every
archive is copied or downloaded into envbuild's archive cache, hashed, compared with the lock, and only the
verified copy is handed to the installer. A mismatch names the file and leaves the target untouched.

Linking the verified archives is a backend's job (envbuild.install.backends: rattler, micromamba, conda);
`relocate()` is here for the backends whose installer wrote the staging path into the files.
"""
from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from envbuild import cachelock
from envbuild.errors import EnvbuildError
from envbuild.hashing import file_digest
from envbuild.install.relocate import relocate_file
from envbuild.lock.condalock import LockedConda
from envbuild.paths import cache_dir


class ArchiveHashMismatch(EnvbuildError):
    """A fetched archive differs from its lock entry: refused before anything is linked."""


@dataclass(frozen=True)
class PlannedArchive:
    locked: LockedConda
    source: str  # URL or local path the archive is read from
    size: Optional[int]  # bytes, when known before fetching


def _local_path(url: str) -> Optional[Path]:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        return Path(urllib.parse.unquote(parsed.path))
    if parsed.scheme == "":
        return Path(url)
    return None


def plan(locked: Sequence[LockedConda], mirrors: Sequence[Path] = (), offline: bool = False) -> List[PlannedArchive]:
    """Where each archive comes from: a mirror channel folder (bundle) holding <subdir>/<file>, else its URL.

    `offline` (a bundle): an archive missing from every mirror is an error here, before any work, rather
    than a network attempt on an air-gapped node.
    """
    out = []
    for pkg in locked:
        source, size = pkg.url, None
        for mirror in mirrors:
            candidate = Path(mirror) / pkg.subdir / pkg.filename
            if candidate.is_file():
                source = str(candidate)
                break
        else:
            if offline and _local_path(pkg.url) is None:
                raise EnvbuildError(f"{pkg.filename} (locked {pkg.name} {pkg.version} {pkg.build}) is not in the "
                                    f"bundle's channel {', '.join(str(m) for m in mirrors)}; re-pack the bundle")
        local = _local_path(source)
        if local is not None and local.is_file():
            size = local.stat().st_size
        out.append(PlannedArchive(pkg, source, size))
    return out


def planned_bytes(planned: Sequence[PlannedArchive]) -> Optional[int]:
    """The bytes `planned` will move, when every size is known before fetching (local sources); else None."""
    if not planned or any(item.size is None for item in planned):
        return None
    return sum(item.size for item in planned)


def _verified_path(pkg: LockedConda, root: Path) -> Path:
    return root / "archives" / pkg.sha256[:2] / pkg.sha256 / pkg.filename


def fetch_and_verify(planned: Sequence[PlannedArchive], root: Optional[Path] = None, phase: Any = None,
                     jobs: int = 8) -> Dict[str, Path]:
    """Copy/download each archive into the cache and check it against the lock; filename -> verified path.

    `jobs` archives at a time (envbuild.downloads.in_parallel), each hashed while it streams; `phase` (an
    envbuild.progress.Phase) counts archives and bytes. Raises ArchiveHashMismatch for an archive whose
    sha256 (or md5, when the lock has no sha256) differs, after the running ones finish; a verified copy
    already in the cache is re-hashed, never trusted blindly.
    """
    from envbuild.downloads import in_parallel

    root = root or cache_dir()
    for item in planned:  # every archive must be checkable before any is fetched
        if not item.locked.sha256 and not item.locked.md5:
            raise EnvbuildError(f"{item.locked.filename}: the lock has no hash for it; refusing to install unverified")

    def one(item: PlannedArchive, stop) -> Path:
        pkg = item.locked
        algo, expected = ("sha256", pkg.sha256) if pkg.sha256 else ("md5", pkg.md5)
        dest = _verified_path(pkg, root) if pkg.sha256 else root / "archives" / "md5" / pkg.md5 / pkg.filename
        if dest.is_file() and file_digest(dest, algo) == expected:
            if phase is not None:  # verified from the cache: its bytes were hashed all the same
                phase.add_bytes(dest.stat().st_size)
            return dest
        with cachelock.entry_lock(dest):  # another create sharing the cache may be fetching the same archive
            if not (dest.is_file() and file_digest(dest, algo) == expected):
                _fetch_into_cache(item, dest, stop, phase)
        return dest

    paths = in_parallel(one, list(planned), jobs, done=(lambda _i: phase.advance()) if phase is not None else None)
    return {item.locked.filename: path for item, path in zip(planned, paths)}


def _fetch_into_cache(item: PlannedArchive, dest: Path, stop, phase: Any) -> None:
    """Stream the archive into a temp of our own, hashed on the way (envbuild.downloads.download_to), and
    publish it at `dest` (cachelock's rules)."""
    from envbuild.downloads import Download, DownloadFailed, DownloadHashMismatch, download_to, stoppable

    pkg = item.locked
    tmp = cachelock.temp_path(dest)
    local = _local_path(item.source)
    url = local.resolve().as_uri() if local is not None else item.source
    want = Download(url=url, dest=dest, sha256=(pkg.sha256,) if pkg.sha256 else (), md5=pkg.md5 or "")
    try:
        try:
            download_to(want, tmp, stoppable(stop, phase.add_bytes if phase is not None else None))
        except DownloadHashMismatch as exc:
            algo, expected = ("sha256", pkg.sha256) if pkg.sha256 else ("md5", pkg.md5)
            got = exc.got if pkg.sha256 else exc.got_md5
            raise ArchiveHashMismatch(
                f"{pkg.filename}: {algo} mismatch, refusing to install it (from {item.source}; "
                f"lock says {expected}, archive is {got}). Nothing was installed at the target.") from None
        except DownloadFailed as exc:
            raise EnvbuildError(f"{pkg.filename} (locked {pkg.name} {pkg.version} {pkg.build}): cannot fetch "
                                f"{item.source}: {exc.reason}; nothing was installed at the target") from exc
        cachelock.publish_file(tmp, dest, replace=dest.exists())
    finally:
        tmp.unlink(missing_ok=True)


# -- relocation (for the backends whose installer wrote the staging path) -------------------------------

def relocate(prefix: Path, old: Path, new: Path) -> int:
    """Rewrite prefix strings `old` -> `new` in the files conda-meta marks as prefix-dependent.

    Text files: plain replacement. Binary files: each C string holding `old` is rewritten in place and
    padded with NULs to its original length, which needs len(new) <= len(old). Returns files rewritten.
    """
    old_b, new_b = os.fsencode(str(old)), os.fsencode(str(new))
    if len(new_b) > len(old_b):
        raise EnvbuildError(f"cannot relocate binaries from {old} to the longer path {new}")
    count = 0
    from envbuild.install.manifest import conda_records

    for data in conda_records(prefix):
        for entry in (data.get("paths_data") or {}).get("paths", []):
            if not entry.get("prefix_placeholder"):
                continue
            path = prefix / entry["_path"]
            if not path.is_file() or path.is_symlink():
                continue
            if relocate_file(path, old_b, new_b, padded=entry.get("file_mode") == "binary"):
                count += 1
    return count
