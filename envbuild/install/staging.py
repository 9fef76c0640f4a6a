"""The staging prefix beside the target, its phase state, and the atomic swap into place.

Why: an environment is built for minutes (hours with source builds) and may be killed at any moment. The
target is never written until the very end; everything happens in `<parent>/.<name>.envbuild-staging`, on
the same filesystem so the final step is a rename. A state file in the staging prefix records which
phases are done, keyed by the hash of the locks: a rerun with the same locks resumes, a rerun with other
locks starts clean. The swap uses renameat2(RENAME_EXCHANGE) where the kernel and libc have it, so at no
instant is there no environment at the target; elsewhere two renames with a recoverable intermediate.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import shutil
from pathlib import Path
from typing import List, Optional

from envbuild.errors import EnvbuildError
from envbuild.fsutil import atomic_write_text

STATE_FILE = "envbuild/.create-state.json"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


class Staging:
    """One create's staging prefix for `target`, resumable when `key` (the locks' hash) is unchanged."""

    def __init__(self, target: Path, key: str):
        self.target = Path(target).absolute()
        self.key = key
        self.path = self.target.parent / f".{self.target.name}.envbuild-staging"
        self.old = self.target.parent / f".{self.target.name}.envbuild-old"
        self._lock_fd: Optional[int] = None

    # -- exclusive use -------------------------------------------------------------------------------
    @property
    def lock_path(self) -> Path:
        return self.target.parent / f".{self.target.name}.envbuild-lock"

    def acquire(self) -> None:
        """Refuse a second concurrent create of the same target (it would share the staging prefix).

        The lock file lives only while a create holds it: release() removes it. A create that opened the
        file just before another removed it holds a lock on a file no longer at the path, so after taking
        the lock it checks that the path still names the file it locked, and otherwise tries again."""
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EnvbuildError(f"cannot create {self.target.parent} for the env: {exc.strerror or exc}") from exc
        while True:
            try:
                fd = os.open(self.lock_path, os.O_CREAT | os.O_RDWR, 0o644)
            except OSError as exc:
                raise EnvbuildError(f"cannot write in {self.target.parent} ({exc.strerror or exc}); choose a "
                                    f"--prefix in a folder you can write") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise EnvbuildError(f"another `envbuild create` is building {self.target} right now")
            try:
                same = os.stat(self.lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._lock_fd = fd
                return
            os.close(fd)

    def release(self) -> None:
        if self._lock_fd is not None:
            try:
                self.lock_path.unlink()  # still holding the lock: nobody else is using the file
            except FileNotFoundError:
                pass
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- phase state ---------------------------------------------------------------------------------
    def _state_path(self) -> Path:
        return self.path / STATE_FILE

    def _read_state(self) -> dict:
        try:
            return json.loads(self._state_path().read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def open(self) -> List[str]:
        """Prepare the staging prefix; returns the phases already done (empty on a fresh start)."""
        self.recover()
        state = self._read_state()
        if self.path.exists() and state.get("key") != self.key:
            shutil.rmtree(self.path)  # built for other locks, or never recorded a phase: start clean
            state = {}
        self.path.mkdir(parents=True, exist_ok=True)
        if not state:
            state = {"key": self.key, "done": []}
            self._write_state(state)
        return list(state["done"])

    def done(self) -> List[str]:
        return list(self._read_state().get("done", []))

    def mark_done(self, phase: str, result=None) -> None:
        """Record `phase` as finished, with its JSON-able result (kept for the manifest on a resume)."""
        state = self._read_state() or {"key": self.key, "done": []}
        if phase not in state["done"]:
            state["done"].append(phase)
        if result is not None:
            state.setdefault("results", {})[phase] = result
        self._write_state(state)

    def result(self, phase: str):
        return self._read_state().get("results", {}).get(phase)

    def _write_state(self, state: dict) -> None:
        atomic_write_text(self._state_path(), json.dumps(state, indent=1), durable=True)

    # -- swap ----------------------------------------------------------------------------------------
    def recover(self) -> None:
        """Finish a swap that the two-rename fallback left half done (target moved away, staging not in)."""
        if self.old.exists() and not self.target.exists():
            os.rename(self.old, self.target)
        elif self.old.exists():
            shutil.rmtree(self.old, ignore_errors=True)

    def tidy(self) -> None:
        """The target is already built from these locks: drop what an interrupted swap left behind."""
        self.acquire()
        try:
            self.recover()
            if self.path.exists():
                shutil.rmtree(self.path)
            (self.target / STATE_FILE).unlink(missing_ok=True)
        finally:
            self.release()

    def swap(self, kill_hook=None) -> None:
        """Put the staging prefix at the target atomically; the previous env is removed only afterwards."""
        if self.target.exists() or self.target.is_symlink():
            if _exchange(self.path, self.target):
                if kill_hook:
                    kill_hook()
                shutil.rmtree(self.path, ignore_errors=True)  # now holds the previous env
            else:
                os.rename(self.target, self.old)
                os.rename(self.path, self.target)
                if kill_hook:
                    kill_hook()
                shutil.rmtree(self.old, ignore_errors=True)
        else:
            os.rename(self.path, self.target)
        (self.target / STATE_FILE).unlink(missing_ok=True)  # the finished env carries no staging state


def _exchange(a: Path, b: Path) -> bool:
    """renameat2(a, b, RENAME_EXCHANGE); False when the platform or filesystem cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, f"cannot exchange {a} and {b}: {os.strerror(err)}")
