"""The inputs of `envbuild explain`: files, gzip'd files, directories (a Ray session's logs, a Slurm job's
output files) and stdin, read as newline-ended byte blocks in constant memory.

Reading is separate from scanning so every way a log can be bad is handled in one place: a missing path is
bad usage (exit 2); an unreadable file inside a directory, binary junk, a truncated gzip are problems noted
beside the result (what could be read is still read), because a Ray log folder often holds a few of them.
"""
from __future__ import annotations

import gzip
import io
import os
import stat
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, List, Optional, Sequence, Tuple

from envbuild.errors import EnvbuildError

BLOCK = 4 * 1024 * 1024  # bytes read at a time; memory stays near a few blocks whatever the log's size
MAX_CARRY = 1024 * 1024  # a line longer than this is passed on in pieces (a 100 MB line never sits in memory whole)
_BINARY_SNIFF = 8192
_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_PIECE = 64 * 1024


@dataclass(frozen=True)
class Source:
    """One log to read: `name` is what the output calls it (a path, or '-' for stdin)."""

    name: str
    path: Optional[Path]  # None for stdin


@dataclass
class Problem:
    """Something about an input that a person should know (skipped, partly read)."""

    source: str
    message: str

    def to_dict(self) -> dict:
        return {"source": self.source, "message": self.message}


def expand(paths: Sequence[str]) -> Tuple[List[Source], List[Problem]]:
    """The files behind `paths` in a stable order; directories are walked (sorted, symlinked dirs not followed).
    A path that does not exist is bad usage: EnvbuildError (exit 2)."""
    sources: List[Source] = []
    problems: List[Problem] = []
    if not paths:
        raise EnvbuildError("explain: give one or more log files or directories, or - for stdin")
    for raw in paths:
        if raw == "-":
            sources.append(Source("-", None))
            continue
        p = Path(raw)
        try:
            st = p.stat()
        except FileNotFoundError:
            raise EnvbuildError(f"{raw}: no such file or directory")
        except OSError as exc:
            raise EnvbuildError(f"{raw}: cannot read ({exc.strerror or exc})")
        if stat.S_ISDIR(st.st_mode):
            found, errs = _walk(p)
            sources.extend(found)
            problems.extend(errs)
            if not found and not errs:
                problems.append(Problem(raw, "directory holds no files"))
        else:
            sources.append(Source(raw, p))
    return sources, problems


def _walk(root: Path) -> Tuple[List[Source], List[Problem]]:
    found: List[Source] = []
    problems: List[Problem] = []

    def onerror(exc: OSError) -> None:
        problems.append(Problem(str(exc.filename or root), f"skipped: cannot list ({exc.strerror or exc})"))

    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_file():  # sockets, fifos and dangling links in a session folder are not logs
                found.append(Source(str(path), path))
    return found, problems


def _open(source: Source) -> BinaryIO:
    raw: BinaryIO
    if source.path is None:
        raw = sys.stdin.buffer if hasattr(sys.stdin.buffer, "peek") else io.BufferedReader(sys.stdin.buffer)  # type: ignore[arg-type]
    else:
        raw = open(source.path, "rb")
    head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    if head == _GZIP_MAGIC:
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


def _read_block(stream: BinaryIO) -> bytes:
    """Up to BLOCK bytes. A gzip stream is read in small pieces so that a truncated one still yields what it
    held before the cut (GzipFile.read(n) raises EOFError without returning the part it had)."""
    if not isinstance(stream, gzip.GzipFile):
        return stream.read(BLOCK)
    parts: List[bytes] = []
    size = 0
    while size < BLOCK:
        try:
            piece = stream.read1(_GZIP_PIECE)
        except EOFError:
            if parts:
                stream._envbuild_truncated = True  # type: ignore[attr-defined]
                break
            raise
        if not piece:
            break
        parts.append(piece)
        size += len(piece)
    return b"".join(parts)


def blocks(source: Source, problems: List[Problem]) -> Iterator[bytes]:
    """Byte blocks of `source`, each ending at a newline except where a line is longer than MAX_CARRY (then
    the line comes in pieces and the scanner sees its first MAX_CARRY bytes per piece). Errors become
    `problems`; what was read before them is kept."""
    try:
        stream = _open(source)
    except OSError as exc:
        problems.append(Problem(source.name, f"skipped: cannot read ({exc.strerror or exc})"))
        return
    carry = b""
    first = True
    read = 0
    try:
        with stream:
            while True:
                try:
                    data = _read_block(stream)
                except EOFError:
                    problems.append(Problem(source.name, f"truncated gzip stream after {read} bytes; read what was there"))
                    break
                except (gzip.BadGzipFile, zlib.error) as exc:
                    problems.append(Problem(source.name, f"damaged gzip after {read} bytes ({exc}); read what was there"))
                    break
                if not data:
                    if getattr(stream, "_envbuild_truncated", False):
                        problems.append(Problem(source.name, f"truncated gzip stream after {read} bytes; read what was there"))
                    break
                if first:
                    first = False
                    sniff = data[:_BINARY_SNIFF]
                    if sniff.count(b"\x00") > len(sniff) // 100:
                        problems.append(Problem(source.name, "skipped: binary data, not a text log"))
                        return
                read += len(data)
                buf = carry + data if carry else data
                cut = buf.rfind(b"\n")
                if cut < 0:
                    if len(buf) >= MAX_CARRY:
                        yield buf
                        carry = b""
                    else:
                        carry = buf
                    continue
                yield buf[: cut + 1]
                carry = buf[cut + 1:]
                if len(carry) >= MAX_CARRY:
                    yield carry
                    carry = b""
    except OSError as exc:
        problems.append(Problem(source.name, f"read error after {read} bytes ({exc.strerror or exc}); read what was there"))
    if carry:
        yield carry
