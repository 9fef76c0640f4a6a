"""Child processes of `envbuild create` (pip, git, compilers) that never outlive it, even after a SIGKILL.

A SIGKILLed create runs no cleanup, and PR_SET_PDEATHSIG reaches only direct children (pip's gcc would
survive pip). So create starts a small watchdog process (`start_watchdog`) that holds the read end of a
pipe whose write end only create has. Create puts a token in its environment, which every child and their
descendants inherit (every envbuild subprocess call derives its env from os.environ). When create exits, for
any reason, the pipe closes and the watchdog stops every process that still carries the token (SIGTERM,
then SIGKILL after 2 s), then exits. After a normal run nothing carries it and the watchdog just exits.
"""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
from typing import Any, Dict

TOKEN_VAR = "ENVBUILD_CREATE_TOKEN"

_WATCHDOG = r"""
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
token = sys.argv[1].encode()
me = os.getpid()
while True:
    try:
        if not os.read(0, 4096):
            break
    except InterruptedError:
        continue

def tagged():
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open("/proc/%s/environ" % name, "rb") as fh:
                if token in fh.read().split(b"\0"):
                    out.append(int(name))
        except OSError:
            pass
    return out

for sig in (signal.SIGTERM, signal.SIGKILL):
    for pid in tagged():
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    deadline = time.monotonic() + 2.0
    while sig == signal.SIGTERM and tagged() and time.monotonic() < deadline:
        time.sleep(0.05)
"""

_state: Dict[str, Any] = {}


def start_watchdog() -> None:
    """Start the watchdog for this process (once); every process started after this is covered."""
    if _state.get("proc") is not None:
        return
    token = f"{os.getpid()}-{secrets.token_hex(8)}"
    read_end, write_end = os.pipe()  # both non-inheritable: only the watchdog gets the read end, as stdin
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHDOG, f"{TOKEN_VAR}={token}"],
                            stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)
    os.close(read_end)
    os.environ[TOKEN_VAR] = token
    _state.update(proc=proc, fd=write_end)


def stop_watchdog() -> None:
    """Create is ending: let the watchdog stop what is left (nothing, after a normal run) and wait for it."""
    proc = _state.pop("proc", None)
    fd = _state.pop("fd", None)
    os.environ.pop(TOKEN_VAR, None)
    if fd is not None:
        os.close(fd)
    if proc is not None:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
