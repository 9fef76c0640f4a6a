"""Paths the user names for what envbuild writes (reports, bundles, capture folders): checked, then written.

One rule for every such flag, so `doctor --json`, `--junit`, `--prometheus`, `capture --node` and `pack -o`
behave alike:

- ``-`` is standard output (for report flags; at most one of them per run);
- a character device or FIFO (``/dev/stdout``, a named pipe) is written to directly, never renamed over —
  an atomic rename onto ``/dev/stdout`` as root would replace the device node;
- anything else is a regular file written atomically (temp file in the same folder + rename), with the
  umask's mode, and no folder is created on the user's behalf (a typo in the path is an error, not a tree);
- a folder, a missing parent, a parent we cannot write, an empty string: one line naming the flag and the
  path, exit 2, checked before the work starts so a long doctor run is not wasted.
"""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Optional

from envbuild.errors import EnvbuildError

STDOUT = "-"
_stdout_claimed: Optional[str] = None


def stdout_claimed() -> bool:
    """True when a report goes to stdout (the terminal table then goes to stderr)."""
    return _stdout_claimed is not None


def claim_stdout(flag: str) -> None:
    """Reserve stdout for the report of `flag`; a second report on stdout is bad usage."""
    global _stdout_claimed
    if _stdout_claimed is not None and _stdout_claimed != flag:
        raise EnvbuildError(f"{_stdout_claimed} - and {flag} - cannot both write to stdout")
    _stdout_claimed = flag


def release_stdout() -> None:
    """Forget the claim (one CLI invocation per process in real use; in-process test runs call this)."""
    global _stdout_claimed
    _stdout_claimed = None


def _is_stream(path: Path) -> bool:
    """A device, FIFO or anything under /dev or /proc (/dev/stdout redirected to a file is a link to
    /proc/self/fd/1): written to in place, never replaced by a rename."""
    if any(str(p).startswith(("/dev/", "/proc/")) for p in (path.absolute(), Path(os.path.realpath(path)))):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def _same_file(path: Path, stream) -> bool:
    try:
        a, b = os.stat(path), os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def check_output_file(path: Optional[str], flag: str, allow_stdout: bool = True, new_folder_ok: bool = False) -> None:
    """Refuse, before any work, an output path that cannot be written (see the module doc).

    `allow_stdout=False` (a bundle, a manifest: files renamed into place) also refuses devices and FIFOs;
    `new_folder_ok` (capture --env writes a new profile folder) lets the writer create the parent."""
    if path is None:
        return
    if path == "":
        raise EnvbuildError(f"{flag}: empty path; name a file" + (" (or - for stdout)" if allow_stdout else ""))
    if path == STDOUT:
        if not allow_stdout:
            raise EnvbuildError(f"{flag} -: this output is written to a file, not to stdout; name a file")
        claim_stdout(flag)
        return
    p = Path(path)
    if allow_stdout and _same_file(p, sys.stdout):
        claim_stdout(flag)
        return
    if _is_stream(p):
        if not allow_stdout:
            raise EnvbuildError(f"{flag} {path}: is a device or pipe; this output is written to a regular file")
        return
    if p.is_dir():
        raise EnvbuildError(f"{flag} {path}: is a directory; name a file inside it")
    if not new_folder_ok:
        _check_parent(p, flag, path)


def check_output_dir(path: Optional[str], flag: str) -> None:
    """Refuse a folder path that cannot be created: empty, not a folder, not empty, bad parent."""
    if path is None:
        return
    if path == "":
        raise EnvbuildError(f"{flag}: empty path; name a new folder")
    p = Path(path)
    if p.exists() or p.is_symlink():
        if not p.is_dir() or any(p.iterdir()):
            raise EnvbuildError(f"{flag} {path}: exists and is not an empty directory; choose a new path")
        if not os.access(p, os.W_OK | os.X_OK):
            raise EnvbuildError(f"{flag} {path}: permission denied (cannot write into it)")
        return
    _check_parent(p, flag, path)


def _check_parent(p: Path, flag: str, shown: str) -> None:
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise EnvbuildError(f"{flag} {shown}: folder {parent} does not exist (envbuild does not create it)")
    if not parent.is_dir():
        raise EnvbuildError(f"{flag} {shown}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise EnvbuildError(f"{flag} {shown}: permission denied (cannot write in {parent})")


def write_output(path: str, text: str, flag: str) -> None:
    """Write `text` to the user-named `path` by the rules of the module doc; an OSError is one line, exit 2."""
    from envbuild.fsutil import atomic_write_text

    p = Path(path)
    if path == STDOUT or _same_file(p, sys.stdout):  # also /dev/stdout redirected to a file: keep its offset
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        if _is_stream(p):
            with open(p, "w", encoding="utf-8") as fh:
                fh.write(text)
            return
        check_output_file(path, flag, allow_stdout=False)
        atomic_write_text(os.path.realpath(p), text, make_parents=False)  # a link to the report stays a link
    except OSError as exc:
        raise EnvbuildError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from exc


def check_report_paths(**paths: Optional[str]) -> None:
    """check_output_file for each report flag, e.g. check_report_paths(json=..., junit=..., prometheus=...)."""
    for name, path in paths.items():
        check_output_file(path, f"--{name}")
