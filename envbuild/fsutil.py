"""Writing files so that a reader, or a rerun after a kill, never sees half of one."""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterable, Iterator, Union

INPUT_MAX_BYTES = 256 * 1024 * 1024  # a 1000-node fleet report is 60 MB; anything past this is not an input of ours


class InputRefused(Exception):
    """An input path that is not a regular file, or is larger than its cap; str(exc) says which."""


@contextlib.contextmanager
def naming(path: Union[str, Path]) -> Iterator[None]:
    """An OSError raised inside names `path` when it names no file itself: a write() that fails on a full disk
    says only "No space left on device", and the one line the user gets must say where."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        raise type(exc)(exc.errno, exc.strerror, str(path)) from exc


def is_file(path: Union[str, Path]) -> bool:
    """Path.is_file() that is False, not an exception, for a name the OS refuses (ENAMETOOLONG, EACCES, ...)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):  # ValueError: a NUL in the name
        return False


def read_bounded(path: Union[str, Path], max_bytes: int = INPUT_MAX_BYTES) -> bytes:
    """The bytes of a regular file of at most `max_bytes`. Why: `profile.toml` linked to /dev/zero grew to 7.6 GB,
    a FIFO in its place hung every command that read it. The file is opened without blocking (a FIFO with no
    writer would wait forever) and checked on the open descriptor (no race with a swapped path); at most
    max_bytes + 1 bytes are read, so a file that grows while it is read cannot take more memory either."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else "a character device"
                    if stat.S_ISCHR(st.st_mode) else "a block device" if stat.S_ISBLK(st.st_mode)
                    else "a directory" if stat.S_ISDIR(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                    else "not a regular file")
            raise InputRefused(f"{kind}, not a regular file")
        if st.st_size > max_bytes:
            raise InputRefused(f"{st.st_size} bytes, over the {max_bytes}-byte limit for this input")
        chunks = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise InputRefused(f"over the {max_bytes}-byte limit for this input (it grew while being read)")
        return b"".join(chunks)
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process umask, read without changing it where Linux shows it (/proc/self/status, 4.7+).

    Why: os.umask() can only be read by setting it, which races with other threads creating files."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write(fh, text: Union[str, Iterable[str]]) -> None:
    if isinstance(text, str):
        fh.write(text)
    else:
        fh.writelines(text)


def _write_in_place(path: Path, text: Union[str, Iterable[str]]) -> bool:
    """A character device or FIFO (/dev/null, /dev/stdout's target, a named pipe) is written into, never renamed
    over: as root a rename would replace /dev/null with a regular file for every process on the node. True when
    the text went there; IsADirectoryError for a directory (a rename would fail later with a worse message)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    # /dev/stdout redirected to a file is a link to /proc/self/fd/1 whose target is a regular file: renaming over
    # it would replace the node's /dev/stdout with that file, for every process (it happened on a shared machine)
    under_dev = str(Path(path).absolute()).startswith(("/dev/", "/proc/"))
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or (under_dev and stat.S_ISREG(mode)):
        with open(path, "w", encoding="utf-8") as fh:
            _write(fh, text)
        return True
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(f"{path} is a directory")
    return False


def atomic_write_text(path: Union[str, Path], text: Union[str, Iterable[str]], durable: bool = False, make_parents: bool = True) -> None:
    """Write via a unique temp file in the same folder, then rename over `path`.

    Why: reports are collected by other programs while nodes write them, and create's phase state must
    survive a SIGKILL at any instant (a rerun resumes from it). `durable` also fsyncs the data before
    the rename, for state that a power cut or kill must not leave empty. The file gets the mode a plain
    open() would give it (0666 & ~umask), not mkstemp's 0600: a non-root node_exporter must be able to read
    a root cron's textfile. `make_parents=False` (user-named report paths) never creates folders. `text` may be
    a list of strings, written one after the other (a 1000-node fleet report is not joined into one string first).
    """
    path = Path(path)
    if _write_in_place(path, text):
        return
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            _write(fh, text)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
