"""Process-to-process plumbing for the IPC probes: framed messages and file descriptors over a UNIX socket.

Why SCM_RIGHTS: a cuMem POSIX-FD handle is a file descriptor, and the one way to hand an fd to an
unrelated process that needs no ptrace rights is to pass it over an AF_UNIX socket (the way NCCL's
cuMem mode and flashinfer do it; envbuild/knowledge/causes.toml M3/O3). PyTorch's expandable-segment IPC instead
pulls the fd with pidfd_getfd(2), which yama ptrace_scope, missing CAP_SYS_PTRACE or a seccomp profile
refuse; block_pidfd_getfd() reproduces that refusal inside one process so the probe can be shown to
catch it.

Stdlib only: the CI tests run these helpers with a memfd instead of a CUDA handle.
"""
from __future__ import annotations

import ctypes
import json
import os
import socket
import struct
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

_LEN = struct.Struct("!I")


def send_msg(sock: socket.socket, msg: Dict[str, Any], fds: Sequence[int] = ()) -> None:
    """Send one JSON message, with `fds` attached as SCM_RIGHTS ancillary data."""
    body = json.dumps(msg).encode()
    frame = _LEN.pack(len(body)) + body
    if fds:
        sent = socket.send_fds(sock, [frame], list(fds))
        if sent < len(frame):
            sock.sendall(frame[sent:])
    else:
        sock.sendall(frame)


def _recv_exact(sock: socket.socket, n: int, fds: List[int]) -> bytes:
    buf = b""
    while len(buf) < n:
        data, got, _flags, _addr = socket.recv_fds(sock, n - len(buf), 16)
        if not data:
            raise ConnectionError("peer closed the socket")
        fds.extend(got)
        buf += data
    return buf


def recv_msg(sock: socket.socket) -> Tuple[Dict[str, Any], List[int]]:
    """Receive one message sent by send_msg; returns (message, received fds)."""
    fds: List[int] = []
    (length,) = _LEN.unpack(_recv_exact(sock, _LEN.size, fds))
    body = _recv_exact(sock, length, fds)
    return json.loads(body.decode()), fds


class Helper:
    """A helper process of a probe (an importer, a torch.multiprocessing producer or consumer, a rollout engine),
    forked from the probe and talking to it over a socketpair; `ask` sends one request and waits, bounded, for
    the answer.

    Why fork and not a fresh interpreter: a fresh python pays `import torch` again (3.5-5.5 s on the lent H200
    node, docs/gpu-runs/s4-summary-call1.txt), which the probe, often a pre-started rank (envbuild/doctor/warm.py),
    has already paid. Callers import torch and fork before their first CUDA call, so each helper still creates
    its own CUDA context and none of the probe's CUDA state: the same two-process situation colocated RL has.
    What torch fixed when its libraries loaded stays the probe's (the allocator backend); `env` replaces the
    helper's os.environ, and a setting torch reads once per process (the allocator's) the helper applies itself.

    The helper stays in the probe's process group (the launcher's kill reaches it) and dies with the probe
    (PR_SET_PDEATHSIG), so it outlives neither.
    """

    def __init__(self, serve: Callable[[socket.socket], None], env: Optional[Dict[str, str]] = None,
                 timeout_s: float = 120.0) -> None:
        import multiprocessing

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for stream in (sys.stdout, sys.stderr):  # nothing buffered before the fork is written twice
            stream.flush()
        self.process = multiprocessing.get_context("fork").Process(
            target=_helper_main, args=(serve, theirs, ours, env, os.getpid()), daemon=True)
        try:
            self.process.start()
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self.sock.settimeout(timeout_s)
        self.exitcode: Optional[int] = None  # set by close

    def ask(self, msg: Dict[str, Any], fds: Sequence[int] = ()) -> Dict[str, Any]:
        send_msg(self.sock, msg, fds)
        reply, _ = recv_msg(self.sock)
        return reply

    def close(self) -> None:
        """Ask the helper to exit and wait for it (20 s); kill it if it does not answer or is still there."""
        try:
            self.ask({"op": "exit"})
            self.process.join(timeout=20)
        except OSError:  # no answer within the timeout, or the helper is gone
            pass
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)
        self.sock.close()
        self.exitcode = self.process.exitcode  # None: still there after the kill
        if self.exitcode is not None:
            self.process.close()  # its sentinel descriptor


def _helper_main(serve: Callable[[socket.socket], None], sock: socket.socket, parent_end: socket.socket,
                 env: Optional[Dict[str, str]], parent_pid: int) -> None:
    """The forked helper: drop what belongs to the probe, then serve requests until asked to exit."""
    import faulthandler
    import signal

    parent_end.close()
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the probe died between the fork and the prctl
        os._exit(1)
    try:  # the stack-dump file belongs to the probe's rank
        faulthandler.unregister(signal.SIGUSR1)
    except (AttributeError, ValueError):
        pass
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    serve(sock)


# --------------------------------------------------------------------------------------------------
# Fault injection: refuse pidfd_getfd(2) in this process, as a container's seccomp profile or a
# ptrace-restricted account does. Used only when ENVBUILD_FAULT_IPC_BLOCK_PTRACE asks for it.
# --------------------------------------------------------------------------------------------------
SYS_PIDFD_OPEN = 434  # same number on x86_64 and aarch64 (unified syscall table since Linux 5.1)
SYS_PIDFD_GETFD = 438
EPERM = 1
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def block_pidfd_getfd() -> None:
    """Install a seccomp filter in this process: pidfd_getfd fails with EPERM, every other call is allowed.

    The same refusal Docker's default seccomp profile gives a process without CAP_SYS_PTRACE. Irreversible
    for this process and its children only; nothing on the node changes.
    """
    machine = os.uname().machine
    if machine not in _AUDIT_ARCH:
        raise OSError(f"no seccomp filter for architecture {machine}")
    ld_w_abs, jeq_k, ret_k = 0x20, 0x15, 0x06
    allow, errno_eperm = 0x7FFF0000, 0x00050000 | EPERM
    prog = [
        _SockFilter(ld_w_abs, 0, 0, 4),  # seccomp_data.arch
        _SockFilter(jeq_k, 1, 0, _AUDIT_ARCH[machine]),
        _SockFilter(ret_k, 0, 0, allow),
        _SockFilter(ld_w_abs, 0, 0, 0),  # seccomp_data.nr
        _SockFilter(jeq_k, 0, 1, SYS_PIDFD_GETFD),
        _SockFilter(ret_k, 0, 0, errno_eperm),
        _SockFilter(ret_k, 0, 0, allow),
    ]
    arr = (_SockFilter * len(prog))(*prog)
    fprog = _SockFprog(len(prog), ctypes.cast(arr, ctypes.POINTER(_SockFilter)))
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


def pidfd_getfd(pid: int, target_fd: int) -> int:
    """Duplicate fd `target_fd` of process `pid` into this process (what torch's expandable IPC does)."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = libc.syscall(SYS_PIDFD_OPEN, pid, 0)
    if pidfd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"pidfd_open: {os.strerror(err)}")
    try:
        fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, target_fd, 0)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"pidfd_getfd: {os.strerror(err)}")
        return fd
    finally:
        os.close(pidfd)


def apply_fault_hooks() -> Optional[str]:
    """Apply ENVBUILD_FAULT_IPC_BLOCK_PTRACE in this (consumer) process; return what was applied."""
    mode = os.environ.get("ENVBUILD_FAULT_IPC_BLOCK_PTRACE", "")
    if mode == "seccomp":
        block_pidfd_getfd()
        return "seccomp: pidfd_getfd -> EPERM"
    if mode:
        raise ValueError(f"ENVBUILD_FAULT_IPC_BLOCK_PTRACE={mode!r}: only 'seccomp' is known")
    return None
