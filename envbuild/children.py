"""Child processes that never outlive their deadline or envbuild: `run_bounded` for the short external commands
(journalctl, dmesg, nvidia-smi, scontrol, ...), and the watchdog of `envbuild create` (pip, git, compilers).

`run_bounded` starts the command in a process group (session) of its own and, at its deadline or when envbuild is
interrupted, kills that whole group: a wrapper script's children go with it (subprocess.run's timeout kills only
the direct child, and its pipes then stay open as long as a grandchild holds them). When the command ends on its
own, what it left running in its group is killed too.


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
import signal
import subprocess
import sys
import time
from typing import Any, Dict, Mapping, Optional, Sequence

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
GRACE_S = 2.0  # after the group is killed: how long its pipes may take to close before we stop reading them


class CommandHung(Exception):
    """A command that did not finish by its deadline; it was killed with its whole process group."""

    def __init__(self, argv: Sequence[str], timeout_s: float):
        self.argv = list(argv)
        self.timeout_s = timeout_s
        super().__init__(f"{' '.join(self.argv)} did not finish within {timeout_s:g} s "
                         "(killed with its child processes)")


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:  # ESRCH: nothing left in the group; EPERM: a member changed its uid (setuid), not ours to kill
        pass


def run_bounded(argv: Sequence[str], timeout_s: float, env: Optional[Mapping[str, str]] = None,
                cwd: Optional[str] = None) -> "subprocess.CompletedProcess[str]":
    """Run `argv` (stdin /dev/null, stdout and stderr captured as text) in a process group of its own; at
    `timeout_s` the group is SIGKILLed and CommandHung raised. OSError when it cannot be started."""
    proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace", env=dict(env) if env is not None else None, cwd=cwd,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=max(timeout_s, 0.0))
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        try:  # a member that left the group (setsid) may still hold a pipe: stop reading after a grace
            proc.communicate(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        _close(proc)
        raise CommandHung(argv, timeout_s) from None
    except BaseException:  # Ctrl-C, SIGTERM turned into an exception: the group goes with us
        _kill_group(proc.pid)
        _close(proc)
        raise
    _kill_group(proc.pid)  # what the command left behind in its group (a daemonized helper) ends with it
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def _close(proc: "subprocess.Popen[str]") -> None:
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    deadline = time.monotonic() + GRACE_S
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)



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
