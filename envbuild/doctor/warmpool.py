"""Probe interpreters started ahead of time: the next probe's `python + import torch` overlaps the current probe.

Measured on the lent 2xH200 machine (docs/gpu-runs, s2 run of doctor --quick): a helper process of
cumem.ipc needed 4.8 s from its start to its first answer, of which 0.28 s was its work; every probe
launch pays that start-up before it touches a GPU. A WarmPool keeps `size` interpreters
(checks/_warm.py) that have imported torch and wait on stdin; launcher.launch() hands one to each rank
and the pool starts a replacement at once, so the replacement imports while the probe runs.

What keeps measurements and verdicts the same as a cold start:
- a waiting interpreter makes no CUDA call: no context, no GPU memory, no NCCL; a running probe's
  bandwidth, memory and FD readings cannot see it (only CPU and page cache are shared);
- an interpreter is handed out only when the rank's python and every variable that acts before or
  during `import torch` (IMPORT_TIME_PREFIXES: LD_PRELOAD, LD_LIBRARY_PATH, PYTHON*, TORCH_*, PYTORCH_*,
  CUDA_* ...) equal the pool's; otherwise (offload.cycle's preload hook, the C3 fault's LD_PRELOAD) the rank
  starts cold exactly as before;
- the rank gets the same env, argv, working directory and log files (checks/_warm.py `become`).
Only the doctor's quick/full runs on a live node open a pool (session.run_doctor); launch() outside a
pool is unchanged. Closing the pool ends every waiting interpreter (EOF, then SIGKILL of its group).
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from typing import Dict, Iterator, List, Optional

from envbuild.paths import payload_dir

# Variables read by the loader, the interpreter's start-up or torch's import: a difference here means the
# warm interpreter is not what a cold start would have been.
# CUDA_* (CUDA_VISIBLE_DEVICES above all) is included although only cuInit reads it: should anything in
# `import torch` ever initialise the driver, the device list would be fixed before the rank's was applied.
IMPORT_TIME_PREFIXES = ("LD_", "PYTHON", "TORCH_", "PYTORCH_", "CUDA_", "NVIDIA_", "MALLOC_", "GLIBC_", "OMP_",
                        "MKL_", "KMP_", "ENVBUILD_WARM_")
CLOSE_GRACE_S = 2.0

_ACTIVE: Optional["WarmPool"] = None


def fingerprint(env: Dict[str, str]) -> Dict[str, str]:
    """The variables that must match for a warm interpreter to stand in for a cold start. PYTHONPATH is
    left out: only sys.path reads it, and `become` applies the rank's entries (the launcher prepends the
    payload folder for payloads outside it)."""
    return {k: v for k, v in env.items()
            if k.startswith(IMPORT_TIME_PREFIXES) and k not in ("PYTHONPATH", "PYTHONUNBUFFERED")}


class WarmPool:
    """`size` interpreters of `python` that have imported torch and wait to become a probe rank of a launch
    on `gpus` (its CUDA_VISIBLE_DEVICES, as launcher.rank_env sets it; None leaves the variable alone)."""

    def __init__(self, python: str, size: int, env: Optional[Dict[str, str]] = None,
                 gpus: Optional[List[int]] = None):
        self.python = python
        self.size = max(1, size)
        from envbuild.doctor.launcher import NVLS_OFF

        self.env = dict(os.environ if env is None else env)
        self.env.update(NVLS_OFF, PYTHONUNBUFFERED="1")  # what launcher.rank_env gives every rank
        if gpus is not None:
            self.env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
        self._idle: List[subprocess.Popen] = []
        self._closed = False
        self.handed_out = 0  # ranks started warm (the doctor's report does not need it; tests do)
        try:
            for _ in range(self.size):
                self._spawn()
        except OSError:
            self.close()
            raise

    def _spawn(self) -> None:
        proc = subprocess.Popen([self.python, "-u", str(payload_dir() / "_warm.py")], env=self.env,
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                cwd="/", start_new_session=True, close_fds=True)
        self._idle.append(proc)

    def eligible(self, argv: List[str], env: Dict[str, str]) -> bool:
        """True when a warm interpreter is what `argv` with `env` would have started cold."""
        return (not self._closed and argv[:2] == [self.python, "-u"]
                and fingerprint(env) == fingerprint(self.env))

    def start(self, argv: List[str], env: Dict[str, str], cwd: str, stdout: str,
              stderr: str) -> Optional[subprocess.Popen]:
        """A waiting interpreter turned into the rank `argv` (python, -u, script, args...), or None when
        none can stand in (the caller then starts the rank cold). A replacement starts at once."""
        if not self.eligible(argv, env):
            return None
        while self._idle:
            proc = self._idle.pop(0)
            try:
                self._spawn()
            except OSError:  # no replacement: later ranks start cold
                pass
            if proc.poll() is not None:  # died while waiting (killed from outside): try the next one
                continue
            spec = {"argv": argv[2:], "env": env, "cwd": cwd, "stdout": stdout, "stderr": stderr}
            try:
                assert proc.stdin is not None
                proc.stdin.write((json.dumps(spec) + "\n").encode())
                proc.stdin.close()
            except OSError:
                _kill_group(proc)
                continue
            self.handed_out += 1
            return proc
        return None

    def close(self) -> None:
        """End every waiting interpreter: EOF first (it exits 0), SIGKILL of its group after a grace."""
        self._closed = True
        idle, self._idle = self._idle, []
        for proc in idle:
            try:
                assert proc.stdin is not None
                proc.stdin.close()
            except OSError:
                pass
        end = time.monotonic() + CLOSE_GRACE_S
        for proc in idle:
            try:
                proc.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def active() -> Optional[WarmPool]:
    """The pool launch() draws from, or None (every rank starts cold)."""
    return _ACTIVE


@contextlib.contextmanager
def warm_pool(python: str, size: int, env: Optional[Dict[str, str]] = None,
              gpus: Optional[List[int]] = None) -> Iterator[Optional[WarmPool]]:
    """Make a WarmPool the one launch() uses while the block runs (None when `python` cannot start); closed on
    the way out, whatever happens."""
    global _ACTIVE
    if _ACTIVE is not None:
        raise RuntimeError("a warm pool is already open")
    try:
        pool = WarmPool(python, size, env, gpus)
    except OSError:  # the python cannot be started: every rank starts cold and reports that itself
        yield None
        return
    _ACTIVE = pool
    try:
        yield pool
    finally:
        _ACTIVE = None
        pool.close()
