"""How a rank process starts and how the doctor holds stop signals back around it: shared by the launcher
(envbuild/doctor/launcher.py, cold ranks) and the warm pool (envbuild/doctor/warm.py, ranks started ahead),
so a rank is the same process whichever of the two started it.
"""
from __future__ import annotations

import contextlib
import os
import signal
from typing import Callable, Iterator

# Variables that could turn on NVLink multicast (NVLS). On lent machines NVLS must never run
# (the lent 2xH200's image sets them so: multicast must not be used on a shared NVSwitch machine), so the launcher always pins them off; only
# with allow_nvls=True, which only a user-facing flag may set, do values the caller passes replace the pin.
NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}

PR_SET_PDEATHSIG = 1


def _libc():
    """libc through ctypes, loaded once in the parent (never inside a forked child), None off Linux."""
    global _LIBC
    if _LIBC is None:
        try:
            import ctypes

            _LIBC = ctypes.CDLL(None, use_errno=True)
        except OSError:
            _LIBC = False
    return _LIBC or None


_LIBC = None


def rank_preexec() -> Callable[[], None]:
    """The Popen preexec_fn of a rank: an empty signal mask, and SIGKILL when this process dies.

    The mask: ranks are started while the launcher holds stop signals back (signals_deferred), and a child
    inherits the mask across exec; a rank with SIGTERM blocked would run on after the launcher's SIGTERM (and
    SIGCONT) instead of dying. The parent-death signal is SIGKILL, not SIGTERM: a payload stuck in a CUDA call
    may ignore SIGTERM, and nothing is left to send the second signal once the doctor is gone. The child exits
    at once when the parent already died between fork and prctl (its parent pid is no longer ours). Without
    prctl (not Linux) only the mask is reset."""
    libc = _libc()
    prctl = getattr(libc, "prctl", None) if libc is not None else None
    parent = os.getpid()

    def hook() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            if os.getppid() != parent:
                os._exit(137)

    return hook


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP back (pending, not lost) while the block runs: a rank being started or the
    cleanup that kills the ranks must not be cut in half by a stop signal, or a rank would escape both the
    cleanup and the report. The held signal is delivered when the block ends."""
    mask = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, mask)
    except (AttributeError, OSError, ValueError):  # pragma: no cover - no pthread_sigmask on this platform
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# Ray's default worker ports are 10002-19999 (`ray start --min-worker-port/--max-worker-port`).
_RENDEZVOUS_LOW = 20000


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (the ports bind(0) and outgoing connections get)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def rendezvous_port(host: str = "127.0.0.1") -> int:
    """A free TCP port for rank 0's env:// rendezvous (MASTER_PORT), chosen below the ephemeral range.

    Why not bind(0): that port comes from the ephemeral range, which the kernel hands to any outgoing
    connection in the seconds before rank 0 listens on it (its torch import alone takes 3-5 s on an H200 node).
    Inside a Ray worker, whose gRPC clients open connections all the time, that happened: comm.offload_cycle's
    rank 0 failed with EADDRINUSE in 'init' (docs/gpu-runs, session 4). A port below the range is never handed
    out that way; bind(0) remains the fallback when none there is free."""
    import random
    import socket

    low = _ephemeral_low()
    rng = random.SystemRandom()
    if low > _RENDEZVOUS_LOW + 100:
        for _ in range(64):
            port = rng.randrange(_RENDEZVOUS_LOW, low)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
