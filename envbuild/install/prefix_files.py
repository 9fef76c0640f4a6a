"""The files of a staged prefix, walked once per phase, and which of them came verbatim from a wheel
whose bytes the lock pinned, with the sha256 and size its RECORD gives them.

Why: relocation and the manifest used to read every file whole (a torch env holds 28,000 files and one
of 1.76 GB: 11 s and 1.8 GB of memory for relocation alone, again for hashing). A file unpacked unchanged
from a published wheel that matched its locked sha256 cannot contain the staging prefix, whose name did
not exist when that wheel was built, so it needs no rewrite; and its RECORD line, part of those verified
bytes, already says its sha256. What is left to read: what the installer wrote (console scripts and other
`.data/scripts`, the dist-info's RECORD, INSTALLER, REQUESTED, direct_url.json), the venv's own files,
activation, files written after the install (a .pyc, a git checkout, a source-built wheel's files), and
everything of a wheel that was not a published one (envbuild.install.pip_layer.InstalledWheel.prebuilt).
"""
from __future__ import annotations

import binascii
import csv
import operator
import os
from pathlib import Path
from typing import Dict, Iterable, Iterator, Mapping, NamedTuple, Set, Tuple

from packaging.utils import canonicalize_name, canonicalize_version

_NAME = operator.attrgetter("name")
_CACHE_KIND = "prebuilt-files"
RELOCATING = ".envbuild-relocating"  # suffix of a file relocation is rewriting (a Ctrl-C removes it; a SIGKILL may leave it)


class Recorded(NamedTuple):
    sha256: str  # hex
    size: int


def walk_files(prefix: Path) -> Iterator[Tuple[str, os.DirEntry]]:
    """(path relative to `prefix` in posix form, its DirEntry) of every non-directory under `prefix`,
    directories and names sorted, top-down (the manifest's order, os.walk's); a symlink to a directory is
    neither listed nor followed (os.walk's too)."""
    root = os.fspath(prefix)
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            with os.scandir(os.path.join(root, rel_dir) if rel_dir else root) as it:
                entries = sorted(it, key=_NAME)
        except OSError:
            continue
        base = rel_dir + "/" if rel_dir else ""
        subdirs = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(base + entry.name)
            elif not (entry.is_symlink() and entry.is_dir()):
                yield base + entry.name, entry
        stack.extend(reversed(subdirs))


def _hex(record_hash: str) -> str:
    """`sha256=<urlsafe base64, unpadded>` of a RECORD line -> hex; "" for another algorithm or none."""
    algo, _, value = record_hash.partition("=")
    if algo != "sha256" or len(value) != 43:
        return ""
    try:
        return binascii.a2b_base64(value.replace("-", "+").replace("_", "/") + "=").hex()
    except binascii.Error:
        return ""


def _dist_infos(prefix: Path) -> Iterator[Tuple[Path, Path]]:
    """(site-packages folder, dist-info folder) of every distribution installed under `prefix`."""
    for site in sorted(prefix.glob("lib/python*/site-packages")):
        if site.is_symlink():
            continue
        for info in sorted(site.glob("*.dist-info")):
            yield site, info


def _key(name: str, version: str) -> Tuple[str, str]:
    return str(canonicalize_name(name)), canonicalize_version(version)


def _record_rows(info: Path) -> Iterator[Tuple[str, str, str]]:
    """(path inside site-packages, normalised, or "" when outside it; hash; size) of each RECORD line."""
    try:
        text = (info / "RECORD").read_text(encoding="utf-8")
    except OSError:
        return
    for line in text.splitlines():
        row = next(csv.reader([line])) if line.startswith('"') else line.rsplit(",", 2)  # quoted: a comma in it
        if len(row) < 3:
            continue
        inside = row[0]
        if "./" in inside or inside.startswith(".") or "//" in inside:
            inside = os.path.normpath(inside)  # the rare unclean path (normpath is slow on 28,000 rows)
        yield ("" if inside.startswith(("..", "/")) else inside), row[1], row[2]


def _installer(info: Path) -> str:
    try:
        return (info / "INSTALLER").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def prebuilt_files(prefix: Path, installed: Iterable[Mapping]) -> Dict[str, Recorded]:
    """`_prebuilt_files`, kept in envbuild.install.rerun_cache by what decides it (`_record_inputs`): parsing
    the RECORDs of a torch stack (87,000 rows) is a noticeable part of a warm create, and a rerun with the
    same locked wheels reads the same rows."""
    from envbuild.install import rerun_cache

    installed = list(installed)
    inputs = _record_inputs(prefix, installed)
    if inputs is None:
        return {}
    key = rerun_cache.key_of(_CACHE_KIND, inputs)
    kept = rerun_cache.get(_CACHE_KIND, key)
    if kept is not None:
        try:  # three columns, one line per file each: split and zipped in C (a JSON list of rows is slower)
            rels, shas, sizes = (col.split("\n") for col in kept.split("\0"))
            if len(rels) == len(shas) == len(sizes):
                return dict(zip(rels, map(Recorded._make, zip(shas, map(int, sizes)))))
        except ValueError:
            pass  # an unreadable entry: parse afresh
    out = _prebuilt_files(prefix, installed)
    if out:
        rerun_cache.put(_CACHE_KIND, key, "\0".join(["\n".join(out), "\n".join(r.sha256 for r in out.values()),
                                                     "\n".join(str(r.size) for r in out.values())]))
    return out


def _record_inputs(prefix: Path, installed: Iterable[Mapping]) -> "list | None":
    """What `_prebuilt_files` reads, named without reading the RECORDs: each distribution folder with its
    INSTALLER; for a prebuilt wheel installed by uv, the wheel's locked sha256 (its RECORD rows inside
    site-packages are that wheel's own files); for any other distribution, the sha256 of its RECORD. None
    when no wheel is prebuilt (nothing to parse)."""
    import hashlib

    wanted = {_key(w["name"], w["version"]): w.get("sha256", "") for w in installed if w.get("prebuilt")}
    if not wanted:
        return None
    rows = []
    for site, info in _dist_infos(prefix):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        installer, sha = _installer(info), wanted.get(_key(name, version))
        if not (sha and installer == "uv"):
            try:
                sha = "record:" + hashlib.sha256((info / "RECORD").read_bytes()).hexdigest()
            except OSError:
                sha = "record:none"
        rows.append([site.relative_to(prefix).as_posix(), info.name, installer, sha])
    return rows


def _prebuilt_files(prefix: Path, installed: Iterable[Mapping]) -> Dict[str, Recorded]:
    """Path (relative to `prefix`) -> its RECORD sha256 and size, for every file that the pip layer's
    prebuilt wheels (`installed`: the pip phase's InstalledWheel dicts) unpacked into site-packages as it
    was in the wheel.

    Left out: the dist-info folder and anything placed outside site-packages (the installer writes or
    rewrites those), a distribution some later step reinstalled (its INSTALLER is no longer uv, which runs
    the pip layer; git sources and builds install with pip), and every path that another distribution's
    RECORD also lists with other bytes or at all (the later install may have replaced the file)."""
    wanted: Set[Tuple[str, str]] = {_key(w["name"], w["version"]) for w in installed if w.get("prebuilt")}
    out: Dict[str, Recorded] = {}
    untrusted: Set[str] = set()
    if not wanted:
        return out
    for site, info in _dist_infos(prefix):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        site_rel = site.relative_to(prefix).as_posix()
        trusted = _key(name, version) in wanted and _installer(info) == "uv"
        for inside, record_hash, size in _record_rows(info):
            if not inside:
                continue
            rel, sha = f"{site_rel}/{inside}", _hex(record_hash)
            if not (trusted and sha and size.isdigit()) or inside.split("/", 1)[0].endswith(".dist-info"):
                untrusted.add(rel)
            else:
                rec = Recorded(sha, int(size))
                if out.setdefault(rel, rec) != rec:
                    untrusted.add(rel)  # two prebuilt wheels with other bytes at one path: the later one won
    for rel in untrusted:
        out.pop(rel, None)
    return out
