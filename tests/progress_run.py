"""The envbuild CLI run as a user watches it: stderr read line by line while the child writes it (a pipe, as
in a CI or Slurm log), or stderr on a pseudo-terminal (a person at a shell). Used by the progress tests of
lock, create and pack (tests/lock, tests/install, tests/pack)."""
from __future__ import annotations

import os
import pty
import queue
import select
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

OFFLINE = {k: "http://127.0.0.1:9" for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}


def cli_env(env: Dict[str, str], offline: bool = False) -> Dict[str, str]:
    full = dict(os.environ, **env, **(OFFLINE if offline else {}))
    for var in ("ENVBUILD_TEST_KILL_AT", "ENVBUILD_TEST_KILL_SIGNAL"):
        if var not in env:
            full.pop(var, None)
    return full


class Streamed:
    """`python -m envbuild ARGS` with stdout and stderr on pipes; stderr lines are taken as they arrive."""

    def __init__(self, args: List[str], env: Dict[str, str], offline: bool = False):
        self.proc = subprocess.Popen([sys.executable, "-m", "envbuild", *args], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=cli_env(env, offline))
        self.lines: List[str] = []
        self._q: "queue.Queue[Optional[str]]" = queue.Queue()
        self._out: List[str] = []
        threading.Thread(target=self._read_err, daemon=True).start()
        self._out_thread = threading.Thread(target=lambda: self._out.append(self.proc.stdout.read()), daemon=True)
        self._out_thread.start()

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            self._q.put(line.rstrip("\n"))
        self._q.put(None)

    def wait_for(self, needle: str, timeout: float = 60.0) -> str:
        """The next stderr line holding `needle` (lines before it are kept in .lines); fails the test when the
        child ends or `timeout` passes first."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._q.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line with {needle!r} within {timeout}s; so far: {self.lines}") from None
            if line is None:
                self._q.put(None)
                raise AssertionError(f"the command ended before printing {needle!r}; stderr: {self.lines}")
            self.lines.append(line)
            if needle in line:
                return line

    def alive(self) -> bool:
        return self.proc.poll() is None

    def finish(self, timeout: float = 120.0) -> Tuple[int, str, List[str]]:
        """(exit code, stdout, every stderr line) once the child ended."""
        rc = self.proc.wait(timeout=timeout)
        while True:
            line = self._q.get(timeout=10)
            if line is None:
                break
            self.lines.append(line)
        self._out_thread.join(timeout=10)
        return rc, "".join(self._out), self.lines


def in_pty(args: List[str], env: Dict[str, str], timeout: float = 120.0, offline: bool = False,
           watch: Optional[Callable[[str], None]] = None) -> Tuple[int, str, str]:
    """Run with stderr on a pseudo-terminal (stdout on a pipe, as in `envbuild lock > out.txt`):
    (exit code, stdout, what the terminal got). `watch` sees the terminal's text so far, five times a second
    (a test can act on what is shown, e.g. release a held index)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "envbuild", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave, env=cli_env(dict(env, COLUMNS="160"), offline))
    os.close(slave)
    got = bytearray()
    out: List[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            got += chunk
        elif proc.poll() is not None:
            break
        if watch is not None:
            watch(got.decode(errors="replace"))
    os.close(master)
    rc = proc.wait(timeout=30)
    reader.join(timeout=10)
    return rc, b"".join(out).decode(), got.decode(errors="replace")


def phase_lines(lines: List[str], command: str) -> List[str]:
    """The phase lines of `command` (`lock: ...`, `create: ...`, `pack: ...`)."""
    return [ln for ln in lines if ln.startswith(f"{command}: ")]
