"""Results of create's own work that a rerun with the same inputs would compute again, kept by a hash of
those inputs under $ENVBUILD_CACHE_DIR/create-rerun/.

Why: a warm `envbuild create` (uv's cache already holds every wheel) spends most of its time beyond uv's
install on work whose answer depends only on what it was given: the doctor gate's verdict on a staged env
(envbuild.install.doctor_gate says which inputs decide it) and the map of files the locked wheels unpacked
as they were (envbuild.install.prefix_files). Each caller names every input its answer depends on; the
entry's file name is the sha256 of those inputs (as canonical JSON), so a change of any input is simply
another entry, never a stale hit. An entry is written atomically and only for an answer the caller
accepts (a failing gate is never kept); an entry that cannot be read or parsed is a miss.

What the cache trusts is what uv trusts of its own cache: that nobody edits cached files in place.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Optional

from envbuild.fsutil import atomic_write_text

VERSION = 1  # bump when an entry's content changes meaning


def _root() -> Path:
    from envbuild.paths import cache_dir

    return cache_dir() / "create-rerun"


def key_of(kind: str, inputs: Any) -> str:
    """The entry name for `inputs` (anything JSON can write, paths as strings) of the kind `kind`."""
    text = json.dumps({"kind": kind, "version": VERSION, "inputs": inputs}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def get(kind: str, key: str) -> Optional[str]:
    """The text stored for `key`, or None (absent, unreadable)."""
    try:
        return (_root() / kind / f"{key}.json").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def put(kind: str, key: str, text: str) -> None:
    """Store `text` for `key`; a cache that cannot be written only costs the next rerun its time."""
    try:
        atomic_write_text(_root() / kind / f"{key}.json", text)
    except OSError:
        pass


def prune(kind: str, keep: int) -> None:
    """Remove all but the `keep` most recently written entries of `kind` (for kinds whose entries are large)."""
    try:
        entries = sorted((e for e in os.scandir(_root() / kind) if e.name.endswith(".json")),
                         key=lambda e: e.stat().st_mtime_ns, reverse=True)
        for entry in entries[keep:]:
            os.unlink(entry.path)
    except OSError:
        pass


def file_identity(path: "os.PathLike[str] | str") -> Optional[list]:
    """What tells one file from another without reading it: its real path, size, mtime and inode (None:
    no such file). Used for inputs too large or too many to hash (an interpreter, the loader cache)."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    return [real, st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev]


def tree_digest(*folders: Path, pattern: str = "*.py") -> str:
    """sha256 over the names and bytes of the files matching `pattern` directly in `folders` (code whose
    change must invalidate a cached answer: the stack probe's payload, the stack checks)."""
    h = hashlib.sha256()
    for folder in folders:
        for path in sorted(Path(folder).glob(pattern)):
            try:
                h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
            except OSError:
                h.update(path.name.encode() + b"\0unreadable\0")
    return h.hexdigest()
