"""Paths the user names for what envbuild writes (reports, bundles, capture folders): checked, then written.

One rule for every such flag, so every report flag of every command (`doctor --json/--junit/--prometheus/--html`,
`report merge -o/--junit/--prometheus`, `report html -o`, `explain --json`), `capture --node` and `pack -o` behave
alike:

- ``-`` is standard output (for report flags; at most one of them per run);
- a character device or FIFO (``/dev/stdout``, a named pipe) is written to directly, never renamed over —
  an atomic rename onto ``/dev/stdout`` as root would replace the device node; a device that refuses the
  write (``/dev/full``) is one line naming the flag, exit 2;
- a symlink is written through (the link stays a link), unless the kernel would refuse to follow it: a link in a
  sticky world-writable folder (/tmp) owned by neither us nor the folder's owner (fs.protected_symlinks, see
  https://docs.kernel.org/admin-guide/sysctl/fs.html) may have been planted to make us overwrite its target;
- anything else is a regular file written atomically (temp file in the same folder + rename), with the
  umask's mode, and no folder is created on the user's behalf (a typo in the path is an error, not a tree);
- a folder, a missing parent, a parent we cannot create a file in (read-only, permissions: tried with a real
  temporary file, so root on a read-only mount is caught too), an empty string: one line naming the flag and
  the path, exit 2, checked before the work starts so a long doctor run is not wasted.

A report format a command writes is a ReportWriter: it declares its flag, its check before the run and its
write after it; commands loop over their list of writers (envbuild/report/writers.py, envbuild/fleet/writers.py)
so no flag is left outside these rules.
"""
from __future__ import annotations

import errno
import os
import stat
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence, Tuple, Union

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
    """A device, FIFO or anything that exists under /dev or /proc (/dev/stdout redirected to a file is a link to
    /proc/self/fd/1): written to in place, never replaced by a rename. A path there that does not exist is not a
    stream: the check of its folder refuses it before the run."""
    if not os.path.exists(path):
        return False
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
    _refuse_unsafe_link(p, flag, path)
    if allow_stdout and _same_file(p, sys.stdout):
        claim_stdout(flag)
        return
    if _is_stream(p):
        if not allow_stdout:
            raise EnvbuildError(f"{flag} {path}: is a device or pipe; this output is written to a regular file")
        return
    if p.is_dir():
        raise EnvbuildError(f"{flag} {path}: is a directory; name a file inside it")
    if p.is_symlink():  # written through: its target's folder is the one that must take the file
        p = Path(os.path.realpath(p))
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
    _try_create_in(parent, flag, shown)


def _try_create_in(parent: Path, flag: str, shown: str) -> None:
    """Create and remove a temporary file in `parent`: access() says yes to root on a read-only mount, /proc or
    /sys, where the real write after a long run would fail."""
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(dir=str(parent), prefix=".envbuild-probe-")
    except OSError as exc:
        why = {errno.EACCES: "permission denied", errno.EPERM: "permission denied",
               errno.EROFS: "read-only file system"}.get(exc.errno, exc.strerror or str(exc))
        raise EnvbuildError(f"{flag} {shown}: {why} (cannot create a file in {parent})") from None
    os.close(fd)
    os.unlink(tmp)


def _refuse_unsafe_link(p: Path, flag: str, shown: str) -> None:
    """A symlink (the path itself or a folder on the way) that fs.protected_symlinks would not let us follow: in
    a sticky world-writable folder, owned neither by us nor by the folder's owner. realpath() and rename do not
    ask the kernel's rule, so it is asked here, whatever the sysctl is set to on this node."""
    current = Path(p.anchor) if p.is_absolute() else Path(".")
    for part in p.parts[1:] if p.is_absolute() else p.parts:
        folder, current = current, current / part
        try:
            link = os.lstat(current)
        except OSError:
            return
        if not stat.S_ISLNK(link.st_mode):
            continue
        try:
            where = os.stat(folder)
        except OSError:
            return
        sticky_shared = where.st_mode & stat.S_ISVTX and where.st_mode & stat.S_IWOTH
        if sticky_shared and link.st_uid not in (os.geteuid(), where.st_uid):
            raise EnvbuildError(f"{flag} {shown}: {current} is a symlink in the shared sticky folder {folder} owned "
                                f"by another user (uid {link.st_uid}); it may point anywhere, and the kernel refuses "
                                "to follow such links (fs.protected_symlinks): name a path of your own")
        current = Path(os.path.realpath(current))


def write_output(path: str, text: Union[str, Iterable[str]], flag: str) -> None:
    """Write `text` to the user-named `path` by the rules of the module doc; an OSError is one line, exit 2."""
    from envbuild.fsutil import atomic_write_text

    p = Path(path)
    chunks = [text] if isinstance(text, str) else text
    try:
        if path == STDOUT or _same_file(p, sys.stdout):  # also /dev/stdout redirected to a file: keep its offset
            sys.stdout.writelines(chunks)
            sys.stdout.flush()
            return
        if _is_stream(p):
            with open(p, "w", encoding="utf-8") as fh:
                fh.writelines(chunks)
            return
        check_output_file(path, flag, allow_stdout=False)
        atomic_write_text(os.path.realpath(p), text, make_parents=False)  # a link to the report stays a link
    except OSError as exc:
        raise EnvbuildError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from exc


@dataclass(frozen=True)
class ReportWriter:
    """One report format a command can write: the flag that names its path (`dest` is the settings field that holds
    it), the check of that path before any work (check_output_file) and the write after it (`render(payload,
    targets)` turns what the command produced into text, written by write_output; `targets` are the run's other
    paths, so the HTML page can be read back from the JSON file just written). Commands loop over a list of these,
    in its order."""

    flag: str
    dest: str
    help: str
    render: Callable[[Any, Any], Union[str, Iterable[str]]]
    aliases: Tuple[str, ...] = ()

    def named(self, flag: str, dest: str, *aliases: str) -> "ReportWriter":
        """The same format under another flag (`report merge -o` is the fleet JSON writer)."""
        return replace(self, flag=flag, dest=dest, aliases=tuple(aliases))

    def check(self, path: Optional[str]) -> None:
        check_output_file(path, self.flag)

    def write(self, payload: Any, path: str, targets: Any = None) -> None:
        write_output(path, self.render(payload, targets), self.flag)


def target(targets: Any, dest: str) -> Optional[str]:
    """The path of `dest` in `targets`: a settings object's attribute or a dict's key."""
    return targets.get(dest) if isinstance(targets, dict) else getattr(targets, dest, None)


def check_outputs(writers: Sequence[ReportWriter], targets: Any) -> None:
    """Every writer's pre-run check of its path in `targets` (a settings object or a dict keyed by `dest`)."""
    for writer in writers:
        writer.check(target(targets, writer.dest))


def write_outputs(writers: Sequence[ReportWriter], targets: Any, payload: Any) -> None:
    """Write `payload` with every writer whose flag was given."""
    for writer in writers:
        path = target(targets, writer.dest)
        if path:
            writer.write(payload, path, targets)
