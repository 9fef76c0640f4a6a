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
# how json.dumps(indent=1) lays out the "files" list: the rows are written as text (render), and kept joined
# the same way (envbuild.install.tree_cache)
_FIRST_ROW, ROW_SEP, _END_ROWS, _END_EMPTY = "\n  ", ",\n  ", "\n ]\n}\n", "]\n}\n"
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
           read: Optional[Mapping[str, Tuple[str, int]]] = None,
           rows: Optional[Iterable[str]] = None, rows_text: Optional[str] = None) -> Iterator[str]:
    """The manifest's JSON text, in pieces, for the staged `prefix` (paths relative, `target` recorded as the prefix),
    its files sorted by path: `rows` when given (file_rows' rows), or `rows_text` (all of them joined as
    written here, kept from an earlier create: envbuild.install.tree_cache), else file_rows of `prefix` with
    `recorded`, `files`, `read` and `progress`.

    The other keys come first, indented, then one line per file. Each file's line is written as text,
    never built as a dict first, and streamed to the file: a torch stack lists about 90,000 files, and a
    dict per file (then json's encoder over them, then the whole text) cost more time and memory than the
    rest of the manifest."""
    head = {
        "schema": SCHEMA,
        "prefix": str(target),
        "profile": profile,
        "lock_key": lock_key,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "conda": _conda_packages(prefix, locked),
        "layers": layers or {},
    }
    text = json.dumps(head, indent=1)
    yield text[:-2] + ',\n "files": ['
    if rows_text is not None:
        yield (_FIRST_ROW + rows_text + _END_ROWS) if rows_text else _END_EMPTY
        return
    if rows is None:
        rows = (row for _, _, row in file_rows(prefix, progress, recorded, files, read))
    n = 0
    for row in rows:
        yield (_FIRST_ROW if n == 0 else ROW_SEP) + row  # each row exactly what json.dumps writes of its dict
        n += 1
    yield _END_ROWS if n else _END_EMPTY


def _conda_packages(prefix: Path, locked: List[Any]) -> List[Dict[str, Any]]:
    """The manifest's "conda" key: each conda package installed, with the url and sha256 its lock gave."""
    packages = []
    for rec in conda_records(prefix):
        lock = next((p for p in locked if p.filename == rec.get("fn") or
                     (p.name, p.version, p.build) == (rec["name"], rec["version"], rec["build"])), None)
        packages.append({"name": rec["name"], "version": rec["version"], "build": rec["build"],
                         "url": lock.url if lock else rec.get("url"), "sha256": lock.sha256 if lock else rec.get("sha256"),
                         "category": lock.category if lock else None})
    return sorted(packages, key=lambda p: p["name"])


def file_rows(prefix: Path, progress=None, recorded: Optional[Mapping[str, Any]] = None,
              files: Optional[Iterable[Tuple[str, "os.DirEntry[str]"]]] = None,
              read: Optional[Mapping[str, Tuple[str, int]]] = None) -> Iterator[Tuple[str, str, str]]:
    """(path, owner, JSON row) of each file of the staged `prefix` the manifest lists, sorted by path.
    `recorded`: path -> (sha256, size) of the files that came verbatim from prebuilt wheels
    (envbuild.install.prefix_files.prebuilt_files). `progress(n)`: n more files listed. `files`: the files to
    list as prefix_files.walk_files gives them (default: all of `prefix`; create passes the listing its
    relocation walked, and a leftover of a relocation in it, which relocation removed, is skipped).
    `read`: path -> (sha256, size) of files relocation read whole and left as they were (hashed as it read)."""
    from envbuild.install.prefix_files import RELOCATING, walk_files

    owner: Dict[str, str] = {}
    known: Dict[str, str] = {}
    for rec in conda_records(prefix):
        pkg_id = f"{rec['name']}-{rec['version']}-{rec['build']}"
        for entry in (rec.get("paths_data") or {}).get("paths", []):
            owner[entry["_path"]] = pkg_id
            if entry.get("sha256_in_prefix") or entry.get("sha256"):
                known[entry["_path"]] = entry.get("sha256_in_prefix") or entry["sha256"]
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
        yield rel, who, row
        n += 1
        if progress and n % 1024 == 0:
            progress(1024)
    if progress:
        progress(n % 1024)


def own_files(prefix: Path) -> List[Tuple[str, "os.DirEntry[str]"]]:
    """The files envbuild itself wrote into `prefix` (owner "envbuild"), as walk_files lists them."""
    from envbuild.install.prefix_files import walk_files

    out = []
    for start in _OWN:  # a folder ("envbuild/"), or a name's start in a folder ("etc/conda/activate.d/envbuild")
        folder, _, name = start.rpartition("/")
        if not name:
            out += [(f"{folder}/{rel}", e) for rel, e in walk_files(prefix / folder)]
            continue
        try:
            with os.scandir(prefix / folder) as it:
                out += [(f"{folder}/{e.name}", e) for e in it
                        if e.name.startswith(name) and not e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
    return out


_quote = json.encoder.encode_basestring_ascii  # json.dumps's own string writer (ensure_ascii)


_OWN = ("etc/conda/activate.d/envbuild", "etc/conda/deactivate.d/envbuild", "envbuild/")  # envbuild's own files


def _owner_of(rel: str) -> str:
    if rel.startswith(_OWN):
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
