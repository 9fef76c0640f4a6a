"""<prefix>/envbuild/manifest.json: what `envbuild create` installed, with hashes.

Why: doctor and a later create need to know, without re-reading locks, what this env is made of and
whether a file changed since. Conda files reuse the sha256 that the linker recorded in conda-meta
(`sha256_in_prefix`, computed after prefix rewriting); files unpacked verbatim from a prebuilt, hash-locked
wheel take the sha256 and size of its RECORD (envbuild.install.prefix_files: part of the wheel's verified
bytes, so neither read nor stat'ed); every other file (scripts, builds, activation, .pyc) is hashed here,
streamed. The `lock_key` ties the env to the locks it was built from, so a rerun of create with the same
locks knows there is nothing to do.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
import operator
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

from envbuild.fsutil import atomic_write_text
from envbuild.hashing import sha256_file

MANIFEST = "envbuild/manifest.json"
SCHEMA = 1
_SKIP = ("envbuild/manifest.json", "envbuild/.create-state.json")
_PATH = operator.itemgetter(0)


def conda_records(prefix: Path) -> List[Dict[str, Any]]:
    """The conda-meta/*.json records of `prefix`, by file name: the one reader of what conda installed
    (the manifest, relocation and the foreign-backend prefix rewrite all walk it)."""
    out = []
    for meta in sorted((prefix / "conda-meta").glob("*.json")):
        out.append(json.loads(meta.read_text(encoding="utf-8")))
    return out


def render(prefix: Path, target: Path, profile: str, lock_key: str, locked: List[Any],
           layers: Optional[Dict[str, Any]] = None, progress=None,
           recorded: Optional[Mapping[str, Any]] = None,
           files: Optional[Iterable[Tuple[str, "os.DirEntry[str]"]]] = None,
           read: Optional[Mapping[str, Tuple[str, int]]] = None) -> Iterator[str]:
    """The manifest's JSON text, in pieces, for the staged `prefix` (paths relative, `target` recorded as the prefix),
    its files sorted by path. `recorded`: path -> (sha256, size) of the files that came verbatim from
    prebuilt wheels (envbuild.install.prefix_files.prebuilt_files). `progress(n)`: n more files listed.
    `files`: the prefix as prefix_files.walk_files lists it, when the caller has that listing already
    (create's relocation walked it; a relocation leftover in it, which relocation removed, is skipped).
    `read`: path -> (sha256, size) of files relocation read whole and left as they were (hashed as it read).

    The other keys come first, indented, then one line per file. Each file's line is written as text,
    never built as a dict first, and streamed to the file: a torch stack lists about 90,000 files, and a
    dict per file (then json's encoder over them, then the whole text) cost more time and memory than the
    rest of the manifest."""
    from envbuild.install.prefix_files import RELOCATING, walk_files

    owner: Dict[str, str] = {}
    known: Dict[str, str] = {}
    packages = []
    for rec in conda_records(prefix):
        pkg_id = f"{rec['name']}-{rec['version']}-{rec['build']}"
        lock = next((p for p in locked if p.filename == rec.get("fn") or
                     (p.name, p.version, p.build) == (rec["name"], rec["version"], rec["build"])), None)
        packages.append({"name": rec["name"], "version": rec["version"], "build": rec["build"],
                         "url": lock.url if lock else rec.get("url"), "sha256": lock.sha256 if lock else rec.get("sha256"),
                         "category": lock.category if lock else None})
        for entry in (rec.get("paths_data") or {}).get("paths", []):
            owner[entry["_path"]] = pkg_id
            if entry.get("sha256_in_prefix") or entry.get("sha256"):
                known[entry["_path"]] = entry.get("sha256_in_prefix") or entry["sha256"]
    head = {
        "schema": SCHEMA,
        "prefix": str(target),
        "profile": profile,
        "lock_key": lock_key,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "conda": sorted(packages, key=lambda p: p["name"]),
        "layers": layers or {},
    }
    text = json.dumps(head, indent=1)
    yield text[:-2] + ',\n "files": ['
    recorded, read = recorded or {}, read or {}
    q = _quote
    quoted: Dict[str, str] = {}  # owner -> its JSON string (a few owners, 90,000 rows)
    n = 0
    for rel, found in sorted(walk_files(prefix) if files is None else files, key=_PATH):
        if rel in _SKIP or rel.endswith(RELOCATING):
            continue
        who = owner.get(rel) or _owner_of(rel)
        qwho = quoted.get(who) or quoted.setdefault(who, q(who))
        wheel = recorded.get(rel) or read.get(rel)
        if found.is_symlink():
            row = f'{{"path": {q(rel)}, "owner": {qwho}, "link": {q(os.readlink(found.path))}}}'
        else:  # a wheel's file as its verified RECORD says (no read, no stat of 87,000 files), else hashed
            sha, size = wheel or (known.get(rel) or sha256_file(found.path), found.stat().st_size)
            row = f'{{"path": {q(rel)}, "owner": {qwho}, "sha256": "{sha}", "size": {size:d}}}'
        yield ("\n  " if n == 0 else ",\n  ") + row  # each row exactly what json.dumps writes of its dict
        n += 1
        if progress and n % 1024 == 0:
            progress(1024)
    if progress:
        progress(n % 1024)
    yield "\n ]\n}\n" if n else "]\n}\n"


_quote = json.encoder.encode_basestring_ascii  # json.dumps's own string writer (ensure_ascii)


def _owner_of(rel: str) -> str:
    if rel.startswith(("etc/conda/activate.d/envbuild", "etc/conda/deactivate.d/envbuild", "envbuild/")):
        return "envbuild"
    if rel.startswith("conda-meta/"):
        return "conda-meta"
    return "unowned"


def write(prefix: Path, text: Iterable[str]) -> Path:
    """Write the manifest text (`render`'s pieces) into the staged prefix, atomically."""
    path = prefix / MANIFEST
    atomic_write_text(path, text)
    return path


def read(prefix: Path) -> Optional[Dict[str, Any]]:
    try:
        return json.loads((Path(prefix) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
