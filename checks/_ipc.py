"""Process-to-process plumbing for the IPC probes: framed messages and file descriptors over a UNIX socket.

Why SCM_RIGHTS: a cuMem POSIX-FD handle is a file descriptor, and the one way to hand an fd to an
unrelated process that needs no ptrace rights is to pass it over an AF_UNIX socket (the way NCCL's
cuMem mode and flashinfer do it; research/error999.md M3/O3). PyTorch's expandable-segment IPC instead
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
import subprocess
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

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


def spawn_child(script: str, role: str, env: Optional[Dict[str, str]] = None,
                extra_args: Sequence[str] = ()) -> Tuple[subprocess.Popen, socket.socket]:
    """Start `python script --child ROLE --fd N` with one end of a socketpair; return (process, our end).

    The child stays in our process group, so the launcher's kill reaches it.
    """
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-u", script, "--child", role, "--fd", str(theirs.fileno())] + list(extra_args),
            pass_fds=[theirs.fileno()], env=env if env is not None else dict(os.environ),
            stdin=subprocess.DEVNULL)
    finally:
        theirs.close()
    return proc, ours


def child_socket(argv: Sequence[str]) -> Tuple[str, socket.socket]:
    """In a child started by spawn_child: (role, the socket to the parent)."""
    role = argv[argv.index("--child") + 1]
    fd = int(argv[argv.index("--fd") + 1])
    return role, socket.socket(fileno=fd)


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
