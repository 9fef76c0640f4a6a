"""Safe sharing of envbuild's caches (ENVBUILD_CACHE_DIR, ENVBUILD_WHEEL_CACHE) between concurrent creates.

Two creates on two nodes (or two shells) may fill the same cache entry at once. The rules:

- a writer builds in a temp name of its own in the entry's folder (`temp_path`: the owner's pid in the
  name, so leftovers.sweep_cache removes it after a SIGKILL), fsyncs it, and publishes it with one
  atomic step (`publish_file`: os.link, which fails if another writer got there first; `publish_dir`:
  rename); an entry once published is never rewritten in place;
- builders of one entry take an flock on `<entry>.lock` (`entry_lock`), and look again once they hold it:
  the second finds the first one's entry and reuses it instead of building (and replacing) it;
- readers always verify an entry's hash before use (the callers do), so a corrupt entry is rebuilt under
  the lock and swapped in by rename: a reader that already opened the old file keeps its bytes.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
from pathlib import Path
from typing import Iterator, Union

PathLike = Union[str, Path]


def temp_path(dest: PathLike) -> Path:
    """A unique temp name beside `dest` that names this process (swept when the process is dead)."""
    dest = Path(dest)
    return dest.parent / f".{dest.name}.part-{os.getpid()}-{secrets.token_hex(4)}"


@contextlib.contextmanager
def entry_lock(dest: PathLike) -> Iterator[None]:
    """Hold an exclusive flock on `<dest>.lock` (created beside it) for the block; blocks until free.

    flock locks are released by the kernel when the holder dies, so a SIGKILLed builder never wedges others."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(str(dest.parent / f".{dest.name}.lock"), os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _fsync(path: Path) -> None:
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish_file(tmp: PathLike, dest: PathLike, replace: bool = False) -> bool:
    """Put the complete file `tmp` at `dest` atomically; True if ours is the one published.

    Without `replace`, an entry another writer published first is kept (ours is dropped: both have the hash
    the caller checked). With `replace` (the existing entry failed its hash), ours goes in by rename."""
    tmp, dest = Path(tmp), Path(dest)
    _fsync(tmp)
    try:
        if replace:
            os.replace(tmp, dest)
            return True
        try:
            os.link(tmp, dest)
            return True
        except FileExistsError:
            return False
    finally:
        if tmp.exists():
            tmp.unlink()


def publish_dir(tmp: PathLike, dest: PathLike, trash_name: str) -> bool:
    """Rename the complete folder `tmp` to `dest`; an existing (corrupt) `dest` is first renamed to
    `trash_name` beside it and removed after. True if ours is the one published."""
    tmp, dest = Path(tmp), Path(dest)
    if dest.exists():
        trash = dest.parent / trash_name
        try:
            os.rename(dest, trash)
        except FileNotFoundError:
            pass
        else:
            shutil.rmtree(trash, ignore_errors=True)
    try:
        os.rename(tmp, dest)
        return True
    except OSError:  # another writer published first (a non-empty folder is in the way)
        shutil.rmtree(tmp, ignore_errors=True)
        return False
