"""Rewrite the staging path to the target path in files that pip, git and source builds wrote.

Why: the conda layer is linked with the final prefix already (py-rattler's alternative_target_prefix),
but pip writes the interpreter path it ran with into console-script shebangs, editable installs record
the checkout path in .pth files and finders, and compiled extensions may carry an rpath into the prefix.
All of those name the staging prefix, which stops existing at the swap. Text files get a plain
replacement; ELF files get conda's null-padded in-place rewrite (the staging path is always longer than
the target path); other binaries (.pyc: length-prefixed strings) are left alone — a .pyc's recorded
source path only shows in tracebacks and is refreshed on the next compile.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Set

_TEXT_PROBE = 8192
_SKIP_SUFFIXES = (".pyc", ".pyo", ".whl", ".zip", ".tar", ".gz", ".bz2", ".zst", ".conda")


def replace_padded(blob: bytes, old: bytes, new: bytes) -> bytes:
    """Replace `old` by `new` inside each NUL-terminated string, padding with NULs to keep every offset."""
    out = bytearray()
    i = 0
    while True:
        j = blob.find(old, i)
        if j < 0:
            out += blob[i:]
            return bytes(out)
        end = blob.find(b"\0", j)
        end = len(blob) if end < 0 else end
        segment = blob[j:end]
        replaced = segment.replace(old, new)
        out += blob[i:j] + replaced + b"\0" * (len(segment) - len(replaced))
        i = end


def rewrite_unlinked(path: Path, blob: bytes) -> None:
    """Give `path` the content `blob` and its old mode, as a new file: the old one may be a hardlink into
    the package cache or another shared cache, which must never be written through."""
    mode = path.stat().st_mode
    path.unlink()
    path.write_bytes(blob)
    os.chmod(path, mode)


def conda_owned(prefix: Path) -> Set[str]:
    """Paths the conda packages installed: relocated (if at all) by the conda layer, never here."""
    from envbuild.install.manifest import conda_records

    return {e["_path"] for rec in conda_records(prefix) for e in (rec.get("paths_data") or {}).get("paths", [])}


def relocate_tree(prefix: Path, old: Path, new: Path) -> int:
    """Rewrite `old` -> `new` in every non-conda file under `prefix`; returns how many files changed."""
    old_b, new_b = os.fsencode(str(old)), os.fsencode(str(new))
    if len(new_b) > len(old_b):
        raise ValueError(f"cannot relocate {old} to the longer path {new}")
    owned = conda_owned(prefix)
    changed = 0
    for dirpath, _dirs, files in os.walk(prefix):
        for fn in files:
            path = Path(dirpath) / fn
            rel = path.relative_to(prefix).as_posix()
            if rel in owned or path.is_symlink() or fn.endswith(_SKIP_SUFFIXES) or rel.startswith("conda-meta/"):
                continue
            try:
                blob = path.read_bytes()
            except OSError:
                continue
            if old_b not in blob:
                continue
            if b"\0" not in blob[:_TEXT_PROBE]:
                new_blob = blob.replace(old_b, new_b)
            elif blob.startswith(b"\x7fELF"):
                new_blob = replace_padded(blob, old_b, new_b)
            else:
                continue
            rewrite_unlinked(path, new_blob)
            changed += 1
    return changed
