"""The payload side of envbuild's GPU probes: rank context, phases, results, timing, busbw, exact fills.

Runs INSIDE the environment under test (its python, torch, libcuda, NCCL), started by
envbuild/doctor/launcher.py. Stdlib at import time; torch is imported lazily, so the rank, phase and
emit parts also work in a python without torch (the launcher's CI tests use exactly that).

How to write a probe
--------------------
1. Create checks/<probe>.py (a script; no package imports besides _harness, torch and the stdlib)::

       from _harness import Probe

       def main(p: Probe) -> None:
           with p.phase("init"):
               p.init_dist()                      # env:// rendezvous; nccl binds device_id
           with p.phase("all_reduce"):            # a hang here is reported as "hung in all_reduce"
               ...
           p.metric("busbw_64MiB", 301.2, "GB/s")
           p.evidence["nccl_version"] = "2.28.9"
           p.finish("pass", "all_reduce exact, 301 GB/s")  # or p.finish("fail", "<what a person can act on>")

       if __name__ == "__main__":
           Probe.run(main)

   ``Probe.run`` sets up faulthandler, the test hooks, and turns an exception into an "error" result
   (exit code 1) with the traceback tail, so a crash still leaves rank<k>.json behind.
2. Name phases after what the rank waits on (``init``, ``all_reduce 64MiB``, ``destroy``): a hang is
   reported with each rank's phase, and ``phase_deadlines`` in launch() are keyed by these names.
3. Register the check in envbuild/doctor/checks/<id with _ for .>.py (the payload has the same name) with
   ``@probe_check(..., probe=ProbeSpec("<payload>.py", ...))``: the runner launches the payload under
   envbuild/doctor/launcher.py with the spec's ranks and deadlines and turns a hang or crash into the check's
   fail; the check only judges what the ranks emitted (docs/adding-a-check.md).
4. Test hooks (used only by tests and the fault-injection runs): ENVBUILD_TEST_SIGSTOP_AT=<phase>
   makes rank ENVBUILD_TEST_SIGSTOP_RANK (default: the last rank) SIGSTOP itself on entering that phase
   (`<start>`: before its first phase, as the probe starts); ENVBUILD_TEST_SIGSTOP_AFTER_S=<s> makes it SIGSTOP
   itself <s> seconds after it started, wherever it is then (benchmarks/stop_rank.py), appending the moment and
   phase to ENVBUILD_TEST_SIGSTOP_LOG when set; ENVBUILD_TEST_CRASH_AT=<phase> makes it exit with code 3 there.

Files written in ENVBUILD_RUN_DIR: rank<k>.phase (current phase, flushed at every change), rank<k>.json
(the result, atomically), rank<k>.stacks (faulthandler output on SIGUSR1).
"""
from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from _common import SETTLE_LIMIT_VAR, SETTLE_PIDS_VAR, WARM_IMPORT_T_VAR, running

# ---------------------------------------------------------------------------------------------------
# nccl-tests' bandwidth definitions (nccl-tests doc/PERFORMANCE.md, from nccl-tests doc/PERFORMANCE.md):
# algbw = S / t, with S the bytes of the operation; for all_gather, reduce_scatter and all_to_all S is the
# total array (count * typesize * nranks), for all_reduce and broadcast the per-rank buffer. busbw = algbw
# x factor(n).
# ---------------------------------------------------------------------------------------------------
BUSBW_FACTOR: Dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}


def op_bytes(op: str, per_rank_bytes: int, nranks: int) -> int:
    """S in algbw = S / t, as nccl-tests counts it, given the per-rank input buffer size.

    For all_gather the per-rank input is one shard, so the total array is shard x n; for reduce_scatter
    and all_to_all the per-rank input already is the total array.
    """
    if op == "all_gather":
        return per_rank_bytes * nranks
    return per_rank_bytes


def algbw_busbw(op: str, nbytes: int, seconds: float, nranks: int) -> "tuple[float, float]":
    """(algbw, busbw) in GB/s (1e9 bytes/s, as nccl-tests prints) for S = nbytes moved in `seconds`."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * BUSBW_FACTOR[op](nranks)


# ---------------------------------------------------------------------------------------------------
# Rank context, phases, results
# ---------------------------------------------------------------------------------------------------


def parse_mode(argv: Optional[List[str]] = None, **choices: Sequence[str]) -> argparse.Namespace:
    """--mode quick|full plus any further `name=(choice, ...)` options (the first choice is the default).

    A typo is argparse's one-line usage error and exit code 2, which the launcher reports as the rank's
    crash with that line, instead of a KeyError traceback from deep in the probe."""
    ap = argparse.ArgumentParser(prog=os.path.basename(sys.argv[0]))
    ap.add_argument("--mode", choices=("quick", "full"), default="quick")
    for name, allowed in choices.items():
        ap.add_argument(f"--{name}", choices=tuple(allowed), default=allowed[0])
    return ap.parse_args(argv)


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


START_HOOK = "<start>"  # ENVBUILD_TEST_SIGSTOP_AT value for "before the first phase" (launcher.START's twin)


def _warm_import_times() -> Optional[List[float]]:
    """[began, finished] (wall clock) of the torch import a warm interpreter made before it became this rank, taken
    out of the environment so the probe's own child processes do not inherit it."""
    raw = os.environ.pop(WARM_IMPORT_T_VAR, "")
    try:
        began, finished = (float(x) for x in raw.split(","))
    except ValueError:
        return None
    return [began, finished]


class Probe:
    """One rank of a probe: its identity, its phase file, its result."""

    def __init__(self) -> None:
        self.rank = _env_int("RANK", 0)
        self.world_size = _env_int("WORLD_SIZE", 1)
        self.local_rank = _env_int("LOCAL_RANK", 0)
        self.backend = os.environ.get("ENVBUILD_BACKEND", "nccl")
        self.deadline_s = float(os.environ.get("ENVBUILD_DEADLINE_S", "300") or 300)
        self.run_dir = os.environ.get("ENVBUILD_RUN_DIR") or tempfile.mkdtemp(prefix="envbuild-rank-")
        self.metrics: List[Dict[str, Any]] = []
        self.evidence: Dict[str, Any] = {}
        self._phases: List[str] = []
        self._entered = False  # a phase was entered (the test hooks tell "before the first" from "between")
        self._first_phase_t: Optional[float] = None  # wall clock of entering the first phase (in the result)
        # seconds in each outermost phase (in the result as phase_s): where a probe's time went, beside the
        # launcher's start_s (spawn to first phase) and after_result_s (result to exit: teardown)
        self._phase_s: Dict[str, float] = {}
        self._warm_import_t = _warm_import_times()  # a warm rank's torch import (checks/_warm.py), else None
        self._error_phase: Optional[str] = None
        self._finished = False
        self._stacks_fh = None
        self.device = None  # torch.device once init_dist/cuda_device ran

    # --- files ---------------------------------------------------------------------------------------
    def path(self, suffix: str) -> str:
        return os.path.join(self.run_dir, f"rank{self.rank}{suffix}")

    def _write_atomic(self, suffix: str, data: Dict[str, Any], durable: bool = True) -> None:
        """Write-then-rename, so the launcher never reads half a file. `durable` adds an fsync, which only
        matters if the machine dies: the launcher reads through the same page cache either way."""
        final = self.path(suffix)
        tmp = final + f".tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, default=str)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, final)

    def setup(self) -> None:
        """faulthandler on SIGUSR1 (the launcher's stack-dump signal) and on fatal signals."""
        self._stacks_fh = open(self.path(".stacks"), "a", encoding="utf-8")
        faulthandler.register(signal.SIGUSR1, file=self._stacks_fh, all_threads=True, chain=False)
        faulthandler.enable(file=sys.stderr, all_threads=True)
        self._timed_stop_hook()
        self._test_hooks(START_HOOK)

    def _is_hook_rank(self) -> bool:
        return self.rank == _env_int("ENVBUILD_TEST_SIGSTOP_RANK", self.world_size - 1)

    def _timed_stop_hook(self) -> None:
        """ENVBUILD_TEST_SIGSTOP_AFTER_S: a timer thread stops this rank wherever it is then."""
        try:
            after = float(os.environ.get("ENVBUILD_TEST_SIGSTOP_AFTER_S", ""))
        except ValueError:
            return
        if not self._is_hook_rank():
            return
        import threading

        timer = threading.Timer(max(0.0, after), self._stop_self, args=("timer",))
        timer.daemon = True
        timer.start()

    def _stop_self(self, how: str) -> None:
        """SIGSTOP this rank, first noting when and where in ENVBUILD_TEST_SIGSTOP_LOG (JSON lines) when set."""
        log = os.environ.get("ENVBUILD_TEST_SIGSTOP_LOG")
        if log:
            where = self._phases[-1] if self._phases else ("outside any phase, after one" if self._entered
                                                           else "before its first phase")
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"t": time.time(), "where": where, "how": how, "rank": self.rank,
                                     "pid": os.getpid()}) + "\n")
        os.kill(os.getpid(), signal.SIGSTOP)

    # --- phases --------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Record that this rank is in `name` (nested phases restore the outer one on exit)."""
        self._phases.append(name)
        if not self._entered:
            self._first_phase_t = time.time()
        self._entered = True
        outermost = len(self._phases) == 1
        began = time.perf_counter()
        self._write_phase(name)
        self._test_hooks(name)
        try:
            yield
        except BaseException:
            if self._error_phase is None:  # the innermost phase an exception left
                self._error_phase = name
            raise
        finally:
            if outermost:
                self._phase_s[name] = self._phase_s.get(name, 0.0) + time.perf_counter() - began
            self._phases.pop()
            if self._phases:
                self._write_phase(self._phases[-1])
            # Leaving the outermost phase keeps its name on file: a rank that then hangs in teardown
            # is reported as "after <last phase>", which is where it was.

    def _write_phase(self, name: str) -> None:
        # Not durable: phases change inside measured loops (nccl_collectives enters one per size), and an
        # fsync there costs milliseconds on an overlay or network disk for no reader's benefit.
        self._write_atomic(".phase", {"phase": name, "t": time.time(), "pid": os.getpid()}, durable=False)

    def _test_hooks(self, name: str) -> None:
        if not self._is_hook_rank():
            return
        if os.environ.get("ENVBUILD_TEST_SIGSTOP_AT") == name:
            sys.stderr.write(f"[envbuild test hook] rank {self.rank} stops itself (SIGSTOP) in phase {name!r}\n")
            sys.stderr.flush()
            self._stop_self(f"at {name}")
        if os.environ.get("ENVBUILD_TEST_CRASH_AT") == name:
            sys.stderr.write(f"[envbuild test hook] rank {self.rank} crashes in phase {name!r}\n")
            sys.stderr.flush()
            os._exit(3)

    def settle(self) -> None:
        """Wait, in phase "settle", until the earlier probe's ranks that were still exiting when this launch started
        (SETTLE_PIDS_VAR) are gone, so their CUDA contexts going away never moves this probe's free memory or
        speed. A payload calls it just before it measures; the wait hides behind its own start-up (NCCL init)
        otherwise. At most SETTLE_LIMIT_VAR seconds (the launcher keeps it under this phase's deadline): a
        predecessor stuck in its teardown is its own check's failure (the launcher's drain kills it under that
        check's deadlines); this probe then measures beside it and says so in its evidence ("settle")."""
        pids = [int(p) for p in os.environ.get(SETTLE_PIDS_VAR, "").split(",") if p.strip().isdigit()]
        if not pids:
            return
        try:
            limit = float(os.environ.get(SETTLE_LIMIT_VAR, "20"))
        except ValueError:
            limit = 20.0
        began = time.monotonic()
        with self.phase("settle"):
            alive = [p for p in pids if running(p)]
            while alive and time.monotonic() - began < limit:
                time.sleep(0.01)
                alive = [p for p in alive if running(p)]
        self.evidence["settle"] = {"waited_s": round(time.monotonic() - began, 3), "pids": pids,
                                   "still_running": alive}

    # --- results -------------------------------------------------------------------------------------
    def metric(self, name: str, value: float, unit: str, expect: Optional[str] = None,
               source: Optional[str] = None) -> None:
        m: Dict[str, Any] = {"name": name, "value": value, "unit": unit}
        if expect is not None:
            m["expect"] = expect
        if source is not None:
            m["source"] = source
        self.metrics.append(m)

    def emit(self, result: Dict[str, Any]) -> None:
        """Write rank<k>.json atomically: {rank, status, summary, metrics, evidence, ...}."""
        data = {"rank": self.rank, "world_size": self.world_size, "metrics": self.metrics,
                "evidence": self.evidence, "first_phase_t": self._first_phase_t, "result_t": time.time(),
                "phase_s": {k: round(v, 3) for k, v in self._phase_s.items()}, "warm_import_t": self._warm_import_t}
        data.update(result)
        self._write_atomic(".json", data)
        self._finished = True

    def finish(self, status: str, summary: str, **extra: Any) -> None:
        """The rank's last result ("final": what is left of it is its exit; emit() alone writes a first record
        that a later one replaces)."""
        self.emit(dict(status=status, summary=summary, final=True, **extra))

    @classmethod
    def run(cls, main: Callable[["Probe"], None]) -> None:
        """Entry point of a payload: set up, run main(probe), report an exception as an error result."""
        p = cls()
        p.setup()
        code = 0
        try:
            main(p)
            if not p._finished:
                p.finish("error", "the probe ended without a result")
                code = 1
        except SystemExit:
            raise
        except BaseException as exc:  # the result file must exist whatever happened
            tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-8:])
            sys.stderr.write(tail)
            where = p._error_phase
            p.finish("error", f"{type(exc).__name__} in phase {where!r}: {str(exc)[:300]}",
                     exception=type(exc).__name__, traceback=tail, phase=where)
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        p.teardown()
        # Leave without the interpreter's own shutdown: with torch loaded it takes 0.35-0.5 s (module teardown,
        # atexit handlers) on every rank of every launch, and it judges nothing: the result is written, the
        # process group destroyed above, and the driver releases the CUDA context as the process ends either way.
        # train_moe_step.py leaves the same way for the reason it gives there.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def teardown(self) -> None:
        """Destroy the default process group if one is left, so NCCL shuts down cleanly."""
        if "torch" in sys.modules:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                with self.phase("teardown"):
                    dist.destroy_process_group()

    # --- torch helpers (lazy) ------------------------------------------------------------------------
    def cuda_device(self):
        """Bind this rank to its GPU: device LOCAL_RANK among the visible ones (the launcher's mapping)."""
        import torch

        n = torch.cuda.device_count()
        if n == 0:
            raise RuntimeError("no CUDA device visible (CUDA_VISIBLE_DEVICES=%r)"
                               % os.environ.get("CUDA_VISIBLE_DEVICES"))
        self.device = torch.device("cuda", self.local_rank % n)
        torch.cuda.set_device(self.device)
        return self.device

    def init_dist(self, backend: Optional[str] = None, timeout_s: Optional[float] = None):
        """init_process_group over env:// (MASTER_ADDR/PORT from the launcher).

        nccl: binds device_id so the communicator is created eagerly on this rank's GPU. gloo: CPU.
        The collective timeout defaults to the run deadline, so the launcher (not torch) ends a hang.
        """
        import datetime

        import torch
        import torch.distributed as dist

        backend = backend or self.backend
        timeout = datetime.timedelta(seconds=timeout_s or max(self.deadline_s, 10.0))
        kwargs: Dict[str, Any] = dict(backend=backend, init_method="env://", rank=self.rank,
                                      world_size=self.world_size, timeout=timeout)
        if backend == "nccl":
            kwargs["device_id"] = self.cuda_device()
        else:
            self.device = torch.device("cpu")
        dist.init_process_group(**kwargs)
        return dist

    def synchronize(self) -> None:
        import torch

        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


class Timer:
    """Elapsed seconds of a region: CUDA events on a GPU (device time), perf_counter on CPU."""

    def __init__(self, device) -> None:
        self.device = device
        self.cuda = device is not None and getattr(device, "type", "cpu") == "cuda"

    def __enter__(self) -> "Timer":
        if self.cuda:
            import torch

            self._start = torch.cuda.Event(enable_timing=True)
            self._stop = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.cuda:
            self._stop.record()
            self._stop.synchronize()
            self.seconds = self._start.elapsed_time(self._stop) / 1e3
        else:
            self.seconds = time.perf_counter() - self._t0


# ---------------------------------------------------------------------------------------------------
# Exact-correctness fills: small integers survive every reduction exactly. A bf16 holds integers up to
# 256 exactly and fp32 up to 2**24; the helpers keep every sum inside that range so "equal" means equal.
# ---------------------------------------------------------------------------------------------------
EXACT_LIMIT = {"bfloat16": 256, "float16": 2048, "float32": 2 ** 24, "int32": 2 ** 31 - 1}


def fill_value_bound(dtype_name: str, nranks: int) -> int:
    """Largest per-rank value v such that a sum over nranks of values in [0, v] stays exact."""
    return max(1, EXACT_LIMIT[dtype_name] // max(1, nranks))


def _pattern(numel: int, rank: int, bound: int, salt: int, device):
    """(i*7 + rank*3 + salt) mod (bound+1), built in place in one integer buffer (int32 when it cannot
    overflow): at GiB sizes temporaries would cost more allocator time than the collective itself."""
    import torch

    itype = torch.int32 if numel * 7 + rank * 3 + salt < 2 ** 31 else torch.int64
    t = torch.arange(numel, device=device, dtype=itype)
    return t.mul_(7).add_(rank * 3 + salt).remainder_(bound + 1)


def exact_fill(numel: int, rank: int, nranks: int, dtype, device, salt: int = 0):
    """A tensor with integer values (i*7 + rank*3 + salt) mod (bound+1): distinct per rank and index,
    cheap to regenerate on any rank, and exactly summable in `dtype` across nranks."""
    bound = fill_value_bound(str(dtype).replace("torch.", ""), nranks)
    return _pattern(numel, rank, bound, salt, device).to(dtype)


def exact_sum(numel: int, nranks: int, dtype, device, salt: int = 0):
    """The exact elementwise sum over ranks of exact_fill(numel, r, nranks, dtype, ...)."""
    bound = fill_value_bound(str(dtype).replace("torch.", ""), nranks)
    total = _pattern(numel, 0, bound, salt, device)
    for r in range(1, nranks):
        total.add_(_pattern(numel, r, bound, salt, device))
    return total.to(dtype)


def word_pattern(numel: int, seed: int, device):
    """int32 words idx ^ seed: every word distinct, cheap for any process or GPU to regenerate and compare
    (the copy/IPC/offload probes move raw memory, where no reduction has to stay exact)."""
    import torch

    return torch.arange(numel, dtype=torch.int32, device=device) ^ seed


def mismatches(got, want) -> int:
    """Number of elements that differ (bitwise equality of values; NaN counts as a mismatch)."""
    return int((got != want).sum().item())
