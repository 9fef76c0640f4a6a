"""Warm ranks: payload interpreters started ahead of time, so a probe's ranks skip python + torch start-up.

A quick doctor on one H200 spent about 27 of its 46 s importing torch in six payload launches one after
another (docs/gpu-runs/README.md, session 4). From the start of the session the pool keeps two interpreters per
GPU rank that have imported torch (checks/_warm.py); the launcher hands each launch's ranks to them.

What keeps a probe as isolated as a cold start:
- a warm interpreter becomes exactly one rank of one launch and exits with it; a new one replaces it;
- it is used only when the launch's start-time variables (START_PREFIXES: what the dynamic loader, Python,
  torch and CUDA read before or while torch is imported) equal its own; otherwise that rank starts cold (a
  `--set weight.sync.rollout_env=LD_PRELOAD=...` does). A check whose ranks need such variables declares them
  (ProbeSpec.start_env: comm.offload_cycle's TMS preload hook), and the runner has interpreters started with
  them while earlier checks run (prepare);
- it never carries a run's ENVBUILD_RUN_DIR until it is handed a launch, so the launcher's stray tracking
  (which adopts orphans carrying the run's directory) cannot take a waiting interpreter for a stray. That
  adoption is what broke the first warm pool (docs/gpu-runs: "exited with code -15 before its first phase");
- it starts like a rank (own session, empty signal mask, SIGKILL on the doctor's death), and the pool ends
  every interpreter it holds when the doctor session ends, is stopped, or its process exits.

`ENVBUILD_WARM_POOL=0` turns warm ranks off (every rank cold, as before); `1` starts the pool even where no
GPU is visible (the CPU tests); unset = on for a live quick or full run with GPUs and probe checks selected.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

START_PREFIXES = ("LD_", "PYTHON", "MALLOC_", "GLIBC_", "TORCH", "PYTORCH_", "CUDA_", "OMP_", "MKL_", "KMP_")
MAX_SIZE = 16  # ~0.4 GB of host memory each while they wait (torch imported, no CUDA context)
_ACTIVE: Optional["WarmPool"] = None


def start_vars(env: Dict[str, str]) -> Dict[str, str]:
    """The variables of `env` that act before or during `import torch`."""
    return {k: v for k, v in env.items() if k.startswith(START_PREFIXES)}


def _key(env: Dict[str, str]) -> Tuple[Tuple[str, str], ...]:
    return tuple(sorted(start_vars(env).items()))


class WarmPool:
    """Up to `size` interpreters of `python` that imported torch under `env` and wait for a launch."""

    def __init__(self, python: str, size: int, env: Dict[str, str], payloads: Path):
        self.python = python
        self.size = max(1, min(size, MAX_SIZE))
        self.env = dict(env)
        self.payloads = payloads.resolve()
        self.script = str(self.payloads / "_warm.py")
        self.waiting: List[subprocess.Popen] = []
        self.flavours: Dict[Tuple[Tuple[str, str], ...], List[subprocess.Popen]] = {}  # prepare()d, by start vars
        self.prepared: Set[Tuple[Tuple[str, str], ...]] = set()
        self.handed = 0
        self._lock = threading.Lock()
        self._closed = False

    def _spawn(self, env: Dict[str, str]) -> subprocess.Popen:
        from envbuild.doctor.rankproc import rank_preexec, signals_deferred

        with signals_deferred():
            return subprocess.Popen([self.python, "-u", self.script], env=env, stdin=subprocess.PIPE,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(self.payloads),
                                    start_new_session=True, close_fds=True, preexec_fn=rank_preexec())

    def fill(self) -> None:
        """Start interpreters until `size` wait (each one costs a torch import, in the background)."""
        with self._lock:
            self.waiting = [p for p in self.waiting if p.poll() is None]
            while not self._closed and len(self.waiting) < self.size:
                self.waiting.append(self._spawn(self.env))

    def prepare(self, extra: Dict[str, str], count: int) -> None:
        """Start `count` interpreters with `extra` added to their environment, for one launch still to come whose
        ranks need those start-time variables (ProbeSpec.start_env: comm.offload_cycle's LD_PRELOAD hook).
        Once per set of variables; without start-time variables in `extra` the default interpreters serve."""
        env = {**self.env, **extra}
        key = _key(env)
        with self._lock:
            if self._closed or key == _key(self.env) or key in self.prepared:
                return
            self.prepared.add(key)
            self.flavours[key] = [self._spawn(env) for _ in range(max(1, min(count, MAX_SIZE)))]

    def take(self, python: str, script: Path, argv: List[str], env: Dict[str, str], cwd: Path, stdout: Path,
             stderr: Path) -> Optional[subprocess.Popen]:
        """A waiting interpreter made into this rank (it runs `script argv` under `env`), or None when none fits
        (another python, a payload outside the pool's folder, other start-time variables, none left)."""
        if self._closed or python != self.python or script.resolve().parent != self.payloads:
            return None
        key = _key(env)
        with self._lock:
            queue = self.waiting if key == _key(self.env) else self.flavours.get(key, [])
            while queue:
                proc = queue.pop(0)
                if proc.poll() is not None:
                    continue
                job = {"script": str(script.resolve()), "argv": argv, "env": env, "cwd": str(cwd),
                       "stdout": str(stdout), "stderr": str(stderr)}
                try:
                    proc.stdin.write((json.dumps(job) + "\n").encode())
                    proc.stdin.close()
                except OSError:  # it died between poll() and the write: try the next one
                    continue
                self.handed += 1
                return proc
        return None

    def close(self) -> None:
        """End every waiting interpreter: EOF first (it exits on its own), SIGKILL for one still importing."""
        with self._lock:
            self._closed = True
            waiting, self.waiting = self.waiting + [p for q in self.flavours.values() for p in q], []
            self.flavours = {}
        for proc in waiting:
            try:
                proc.stdin.close()
            except OSError:
                pass
        for proc in waiting:
            try:
                proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, 9)
                except OSError:
                    pass
                proc.wait()


def active() -> Optional[WarmPool]:
    """The pool of the doctor session running in this process, if any."""
    return _ACTIVE


def take(python: str, script: Path, argv: List[str], env: Dict[str, str], cwd: Path, stdout: Path,
         stderr: Path) -> Optional[subprocess.Popen]:
    """The launcher's one call: a warm rank for this launch, or None (start it cold); refills the pool."""
    pool = _ACTIVE
    if pool is None:
        return None
    proc = pool.take(python, script, argv, env, cwd, stdout, stderr)
    if proc is not None:
        pool.fill()
    return proc


def prepare(extra: Dict[str, str], count: int) -> None:
    """Warm ranks with `extra` for a launch to come (WarmPool.prepare), when a pool is active."""
    if _ACTIVE is not None:
        _ACTIVE.prepare(extra, count)


def wanted(mode: str, live: bool, gpu_count: int, probes_selected: bool) -> bool:
    """Whether a doctor session should keep warm ranks (see the module docstring for ENVBUILD_WARM_POOL)."""
    setting = os.environ.get("ENVBUILD_WARM_POOL", "").strip()
    if setting == "0":
        return False
    if setting == "1":
        return probes_selected
    return mode in ("quick", "full") and live and gpu_count > 0 and probes_selected


@contextlib.contextmanager
def pool(python: str, size: int, gpus: Optional[List[int]]) -> Iterator[WarmPool]:
    """Keep a pool for the block: started at once, so its torch imports overlap the checks before the first
    probe; closed on the way out, however the block ends."""
    from envbuild.doctor.rankproc import NVLS_OFF
    from envbuild.paths import payload_dir

    global _ACTIVE
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(NVLS_OFF)
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    env.pop("ENVBUILD_RUN_DIR", None)
    warm = WarmPool(python, size, env, payload_dir())
    previous, _ACTIVE = _ACTIVE, warm
    atexit.register(warm.close)
    try:
        warm.fill()
        yield warm
    finally:
        _ACTIVE = previous
        warm.close()
        atexit.unregister(warm.close)
