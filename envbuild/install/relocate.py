"""Rewrite the staging path to the target path in files that pip, git and source builds wrote.

Why: the conda layer is linked with the final prefix already (py-rattler's alternative_target_prefix),
but pip writes the interpreter path it ran with into console-script shebangs, editable installs record
the checkout path in .pth files and finders, and compiled extensions may carry an rpath into the prefix.
All of those name the staging prefix, which stops existing at the swap. Text files get a plain
replacement; ELF files get conda's null-padded in-place rewrite (the staging path is always longer than
the target path); other binaries (.pyc: length-prefixed strings) are left alone — a .pyc's recorded
source path only shows in tracebacks and is refreshed on the next compile.

Files unpacked verbatim from a prebuilt, hash-locked wheel are not read at all (envbuild.install.prefix_files
says why they cannot hold the staging path); every other file is read in 1 MiB chunks, and only one that
holds the path is rewritten, streamed into a new file that replaces it: memory stays flat whatever the
size of the file (a 1.76 GB CUDA library used to be read whole).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import BinaryIO, Container, Dict, Iterable, List, Optional, Set, Tuple

from envbuild.install.prefix_files import RELOCATING

CHUNK = 1 << 20
_TEXT_PROBE = 8192
_SKIP_SUFFIXES = (".pyc", ".pyo", ".whl", ".zip", ".tar", ".gz", ".bz2", ".zst", ".conda")


def _holds(path: Path, needle: bytes, digest: "Optional[hashlib._Hash]" = None) -> bool:
    """Whether the file at `path` contains `needle`, read a chunk at a time (a match across two chunks counts).
    `digest` is fed every chunk read: when the answer is False, it has seen the whole file."""
    keep = len(needle) - 1
    window = b""
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            if digest is not None:
                digest.update(chunk)
            window = (window[-keep:] if keep else b"") + chunk
            if needle in window:
                return True
    return False


def rewrite_stream(src: BinaryIO, dst: BinaryIO, old: bytes, new: bytes, padded: bool) -> None:
    """Copy `src` to `dst` with `old` replaced by `new`. `padded` (ELF): each NUL-terminated string that holds
    `old` keeps its length, padded with NULs, so every offset stays; else a plain replacement."""
    buf = b""
    eof = False
    while not eof:
        chunk = src.read(CHUNK)
        eof = not chunk
        buf += chunk
        out = bytearray()
        i = 0
        while True:
            j = buf.find(old, i)
            if j < 0:  # keep a tail that may be the start of a match the next chunk completes
                keep = len(buf) if eof else max(i, len(buf) - (len(old) - 1))
                out += buf[i:keep]
                buf = buf[keep:]
                break
            if not padded:
                out += buf[i:j] + new
                i = j + len(old)
                continue
            end = buf.find(b"\0", j)
            if end < 0 and not eof:  # the string goes on in the next chunk: take it whole then
                out += buf[i:j]
                buf = buf[j:]
                break
            end = len(buf) if end < 0 else end
            segment = buf[j:end]
            replaced = segment.replace(old, new)
            out += buf[i:j] + replaced + b"\0" * (len(segment) - len(replaced))
            i = end
        dst.write(out)
    dst.write(buf)


def relocate_file(path: Path, old: bytes, new: bytes, padded: bool,
                  digest: "Optional[hashlib._Hash]" = None) -> bool:
    """Rewrite `old` -> `new` in `path` (see rewrite_stream) when it holds `old`; False when it does not (then
    `digest`, when given, has been fed the whole file).

    The result is a new file with the old mode that replaces `path`: the old one may be a hardlink into
    the package cache or another shared cache, which must never be written through."""
    if not _holds(path, old, digest):
        return False
    partial = path.with_name(path.name + RELOCATING)
    try:
        with open(path, "rb") as src, open(partial, "wb") as dst:
            rewrite_stream(src, dst, old, new, padded)
        os.chmod(partial, path.stat().st_mode & 0o7777)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return True


def conda_owned(prefix: Path) -> Set[str]:
    """Paths the conda packages installed: relocated (if at all) by the conda layer, never here."""
    from envbuild.install.manifest import conda_records

    return {e["_path"] for rec in conda_records(prefix) for e in (rec.get("paths_data") or {}).get("paths", [])}


def _kind(path: Path) -> Tuple[str, Optional[bytes]]:
    """"text", "elf" or "" (another binary: left alone), from the file's first bytes; and those bytes when
    they are the whole file (most files relocation reads are small scripts and dist-info files: one read)."""
    with open(path, "rb") as fh:
        probe = fh.read(_TEXT_PROBE)
    whole = probe if len(probe) < _TEXT_PROBE else None
    if b"\0" not in probe:
        return "text", whole
    return ("elf" if probe.startswith(b"\x7fELF") else ""), whole


def _paths_as_bytes(old: Path, new: Path) -> Tuple[bytes, bytes]:
    """`old` and `new` as the bytes files hold; a longer `new` cannot replace `old` in place (ELF padding)."""
    old_b, new_b = os.fsencode(str(old)), os.fsencode(str(new))
    if len(new_b) > len(old_b):
        raise ValueError(f"cannot relocate {old} to the longer path {new}")
    return old_b, new_b


def relocate_tree(prefix: Path, old: Path, new: Path, verbatim: Container[str] = frozenset(),
                  files: Optional[Iterable[Tuple[str, "os.DirEntry[str]"]]] = None,
                  digests: Optional[Dict[str, Tuple[str, int]]] = None,
                  rewritten: Optional[List[str]] = None) -> int:
    """Rewrite `old` -> `new` in every non-conda file under `prefix` but those in `verbatim` (paths relative
    to `prefix` that came unchanged from a prebuilt wheel); returns how many files changed. `files`: the
    prefix as prefix_files.walk_files lists it, when the caller walked it already (create walks a torch
    env's 90,000 files once for relocation and the manifest). `digests`: filled with path -> (sha256, size)
    of every file read whole and left as it was, so the manifest need not read it again (a torch stack's
    bin/ and dist-info folders hold 55 MB that relocation must read). `rewritten`: each changed file's relative
    path is appended to it (envbuild.install.tree_cache keeps the list for a rerun with the same inputs)."""
    from envbuild.install.prefix_files import walk_files

    old_b, new_b = _paths_as_bytes(old, new)
    owned = conda_owned(prefix)
    changed = 0
    for rel, entry in (walk_files(prefix) if files is None else files):
        if entry.name.endswith(RELOCATING):  # left by a killed run, which this one redoes
            os.unlink(entry.path)
            continue
        if (rel in verbatim or rel in owned or entry.is_symlink() or entry.name.endswith(_SKIP_SUFFIXES)
                or rel.startswith("conda-meta/")):
            continue
        path = Path(entry.path)
        try:
            kind, whole = _kind(path)
            if whole is not None and (not kind or old_b not in whole):
                if digests is not None:
                    digests[rel] = (hashlib.sha256(whole).hexdigest(), len(whole))
                continue
            digest = hashlib.sha256() if digests is not None and kind else None
            if kind and relocate_file(path, old_b, new_b, padded=kind == "elf", digest=digest):
                changed += 1
                if rewritten is not None:
                    rewritten.append(rel)
            elif digest is not None:
                digests[rel] = (digest.hexdigest(), entry.stat().st_size)
        except OSError:
            continue
    return changed


def relocate_listed(prefix: Path, old: Path, new: Path, rels: Iterable[str]) -> int:
    """Rewrite `old` -> `new` in the files `rels` (relative to `prefix`) only: the ones relocate_tree changed
    in an earlier create of the same inputs (envbuild.install.tree_cache). Returns how many changed."""
    old_b, new_b = _paths_as_bytes(old, new)
    changed = 0
    for rel in rels:
        path = prefix / rel
        try:
            kind, _ = _kind(path)
            changed += bool(kind) and relocate_file(path, old_b, new_b, padded=kind == "elf")
        except OSError:
            continue
    return changed
