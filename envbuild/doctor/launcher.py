"""The hang-proof multi-rank launcher: one payload process per rank, run by the ENV's python.

Why our own launcher and not torchrun: a doctor probe exists to survive the failures it looks for.
A rank stuck in an NCCL collective, a rank stopped by a signal, a rank that segfaults while its peer
waits forever — each must end in a report, inside a deadline, with every process gone. torchrun
restarts and waits; it does not dump stacks, name the phase a rank hung in, or guarantee no orphan.
The payloads still use torch's own rendezvous (``init_process_group(init_method="env://")``): the
launcher only hands them the env:// variables.

Each rank runs in its own session (hence its own process group), so one ``killpg`` reaches the
rank and anything it spawned; descendants that left the group (setsid) are found through /proc and
killed by PID. A process counts as the run's only if it descends from a rank or carries the run's
directory in its environment (``ENVBUILD_RUN_DIR``, inherited by everything a rank starts): a process the
doctor itself starts while a run goes on is never adopted and killed as a stray. Every rank also gets a
parent-death signal (Linux ``PR_SET_PDEATHSIG``), so a doctor killed with SIGKILL — whose cleanup cannot
run — still takes its ranks with it. The payload side (checks/_harness.py) writes:

- ``rank<k>.phase``   the phase the rank is in (JSON, rewritten at every phase change),
- ``rank<k>.json``    its result (written atomically at the end),
- ``rank<k>.stacks``  faulthandler's dump when we send SIGUSR1,

and its stdout/stderr go to ``rank<k>.stdout.log`` / ``rank<k>.log`` in the run directory.

This module must not import torch: envbuild runs in a small python without it.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from envbuild import leftovers
from envbuild.doctor import warm
from envbuild.data.checks._common import SETTLE_LIMIT_VAR, SETTLE_PIDS_VAR, mark_launcher_set, stat_fields
from envbuild.doctor.interrupt import Stopped
from envbuild.doctor.rankproc import NVLS_OFF, rank_preexec, rendezvous_port
from envbuild.doctor.rankproc import signals_deferred as _signals_deferred
from envbuild.paths import payload_dir

# How long a rank's peers may keep running after it crashed before they count as hung: NCCL has no
# way to notice a dead peer quickly, so the survivors would otherwise wait for the whole deadline.
CRASH_GRACE_S = 3.0
# Between SIGTERM and SIGKILL. SIGTERM first so NCCL's atexit cleanup can unlink /dev/shm/nccl-*
# segments (SIGKILL leaves them behind: envbuild/knowledge/causes.toml O1).
TERM_GRACE_S = 2.0
POLL_S = 0.05
SCAN_S = 0.2  # how often /proc is scanned for the ranks' descendants
TAIL_CHARS = 4000
RUN_DEADLINE = "run deadline"  # how LaunchOutcome.reason starts when the whole-run deadline stopped the run
# The phase_deadlines key for the time from a rank's start (the launch handing it its job, warm or cold) to its
# first phase: a rank stuck before it (an import, a wedged cuInit) has no phase to be late in, so without this
# only the whole-run deadline ended it (a weight-sync rank stopped there ran 117 s of a quick run, issue 26).
START = "<start>"
STUCK_STARTING = "stuck starting"  # how LaunchOutcome.reason names a rank that overran START
# Probe.settle's longest wait (checks/_harness.py): 20 s, and never more than this share of the launch's deadline
# for its "settle" phase, so the wait is never reported as a hang (quick's phase cap is 30 s).
SETTLE_LIMIT_S = 20.0
SETTLE_SHARE = 2 / 3
ANSWERED = "answered"  # _follow's reason when every rank left running has answered: its exit is a Drain's to watch



@dataclass
class RankOutcome:
    """What one rank did, read back from its files after the run: enough to name a hang or crash."""

    rank: int
    returncode: Optional[int]  # negative = killed by that signal (Popen convention)
    result: Optional[dict]  # what the payload emit()ted, None if it never did
    phase: Optional[str]  # the phase the rank was in last (None: never entered one)
    stderr_tail: str
    log_path: str  # the rank's stderr log (tracebacks, NCCL WARN lines when not redirected)
    stack_dump: str  # faulthandler + py-spy output taken before the kill ("" when not needed)
    stdout_path: str = ""
    pid: int = 0
    phase_elapsed_s: Optional[float] = None  # time spent in `phase` when the run ended
    state: Optional[str] = None  # /proc state letter when the run was stopped (T = stopped), for hung ranks
    warm: bool = False  # started ahead of the launch with torch imported (envbuild/doctor/warm.py), not cold
    # Seconds from the rank's start (a warm one: the launch handing it its job) to its first phase, from the time
    # the harness wrote into its result: what a launch costs before the probe's own work (a cold rank's torch
    # import, a warm one still finishing its import). None without a result or a phase.
    start_s: Optional[float] = None
    # Seconds in each outermost phase (the harness's phase_s) and from the result to the rank's exit (teardown:
    # the process group, the CUDA context): with start_s, where a launch's wall time went. None without a result.
    phase_s: Optional[Dict[str, float]] = None
    after_result_s: Optional[float] = None
    # A warm rank: how long its torch import took, and how much of it was still left when the launch handed it its
    # job (the launch waited that long for the import; 0 when the import was done ahead).
    import_s: Optional[float] = None
    import_wait_s: Optional[float] = None
    # Its result was written and the launch returned while it was still exiting (its teardown runs behind the next
    # check: Drain); its returncode and after_result_s are in the drain's outcome (Drain.wait).
    exiting: bool = False


@dataclass
class LaunchOutcome:
    """A whole run: every rank's outcome, why the run was stopped, and what (must be nothing) survived it."""

    ranks: List[RankOutcome]
    timed_out: bool  # the run or a phase deadline was hit
    hung_ranks: List[int]  # ranks still running when the run was stopped (deadline or peer crash)
    crashed_ranks: List[int]  # ranks that exited non-zero on their own
    wall_s: float
    run_dir: str = ""
    reason: str = ""  # why the run was stopped early, "" when every rank exited on its own
    leftover_pids: List[int] = field(default_factory=list)  # must stay empty; kept for the report
    # The ranks' exits when the launch returned before them (launch(drain=True)): its wait() gives the launch's
    # outcome with those exits (a new object; this one stays as the check saw it). None when every rank had exited.
    drain: Optional["Drain"] = field(default=None, repr=False, compare=False)

    @property
    def run_deadline_passed(self) -> bool:
        """The whole-run deadline stopped the run (not a phase deadline, not a crash): the ranks may still have
        been moving, which a check must weigh before it calls them hung (train.moe_step does)."""
        return self.timed_out and self.reason.startswith(RUN_DEADLINE)

    @property
    def ok(self) -> bool:
        """Every rank exited 0 on its own and emitted a result."""
        return (not self.timed_out and not self.hung_ranks and not self.crashed_ranks
                and all((r.returncode == 0 or r.exiting) and r.result is not None for r in self.ranks))


def resolve_payload(payload: str) -> Path:
    """A payload is a file name in payload_dir(); an absolute path is accepted for tests."""
    path = Path(payload)
    if not path.is_absolute():
        path = payload_dir() / payload
    if not path.is_file():
        raise FileNotFoundError(f"payload {payload!r} not found (looked at {path})")
    return path


def rank_env(rank: int, nranks: int, *, port: int, run_dir: str, gpus: Optional[List[int]], backend: str,
             deadline_s: float, base: Dict[str, str], extra: Optional[Dict[str, str]],
             per_rank: Optional[Dict[str, str]], allow_nvls: bool, pythonpath: Optional[str]) -> Dict[str, str]:
    """The environment of one rank: the caller's env, then the rank variables, then NVLS pinned off
    (unless allow_nvls and the caller's own variables ask for it). Every variable set here on top of `base` is
    named in ENVBUILD_LAUNCHER_SET (checks/_common.py), so a payload can tell the user's environment from ours."""
    env = dict(base)
    env.update(extra or {})
    env.update(per_rank or {})
    env.update({
        "RANK": str(rank), "WORLD_SIZE": str(nranks), "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(nranks), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "ENVBUILD_RUN_DIR": run_dir, "ENVBUILD_BACKEND": backend, "ENVBUILD_DEADLINE_S": f"{deadline_s:.1f}",
        "PYTHONUNBUFFERED": "1",
    })
    if gpus is not None:
        # Every rank sees the selected GPUs in --gpus order and uses device LOCAL_RANK % len: a payload
        # that needs several GPUs in one process (P2P) runs with nranks=1 and sees them all.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
        env["ENVBUILD_GPU"] = str(gpus[rank % len(gpus)]) if gpus else ""
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # Pinned off in every case; with allow_nvls only what the caller itself asks for (extra/per_rank)
    # replaces the pin, so neither the caller's shell nor NCCL's own default (NVLS on where the fabric
    # supports it) can turn multicast on.
    asked = {k: v for k, v in {**(extra or {}), **(per_rank or {})}.items() if k in NVLS_OFF}
    if not allow_nvls and asked.get("NCCL_NVLS_ENABLE", "0") not in ("0", ""):
        raise ValueError("NCCL_NVLS_ENABLE=1 needs allow_nvls=True (an explicit user opt-in); "
                         "NVLink multicast is never run by default")
    env.update(NVLS_OFF)
    if allow_nvls:
        env.update(asked)
    return mark_launcher_set(base, env)


def _read_json(path: Path) -> Optional[dict]:
    try:
        with open(path, "r", encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _tail(path: Path, limit: int = TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _proc_state(pid: int) -> Optional[str]:
    """The state letter from /proc/<pid>/stat (R, S, D, T = stopped, Z = zombie), None if gone."""
    fields = stat_fields(pid)
    return fields[0] if fields else None


def _proc_table() -> Dict[int, tuple]:
    """pid -> (ppid, pgid, state) for every process we can see."""
    table = {}
    for name in os.listdir("/proc"):
        fields = stat_fields(name) if name.isdigit() else None
        if fields:
            table[int(name)] = (int(fields[1]), int(fields[2]), fields[0])
    return table


def descendants(pids: List[int], table: Optional[Dict[int, tuple]] = None) -> List[int]:
    """Every live descendant of `pids` (children, grandchildren, ...), found through /proc."""
    table = _proc_table() if table is None else table
    children: Dict[int, List[int]] = {}
    for pid, (ppid, _pgid, _state) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def group_members(pgids: List[int]) -> List[int]:
    """Live (non-zombie) processes whose process group is one of `pgids`."""
    wanted = set(pgids)
    return sorted(pid for pid, (_pp, pgid, state) in _proc_table().items() if pgid in wanted and state != "Z")


def _environ_has(pid: int, entry: bytes) -> bool:
    """Whether /proc/<pid>/environ holds `entry` (``NAME=value``) exactly; False when unreadable or gone."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return entry in fh.read().split(b"\0")
    except OSError:
        return False


class _Rank:
    def __init__(self, rank: int, proc: subprocess.Popen, run_dir: Path, warm: bool = False):
        self.rank = rank
        self.warm = warm  # a pre-started interpreter (envbuild/doctor/warm.py) became this rank
        self.proc = proc
        self.pgid = proc.pid  # start_new_session=True: the rank leads its own group
        self.run_dir = run_dir
        self.exited_on_own: Optional[int] = None
        self.killed = False
        self.stack_dump = ""
        self.state: Optional[str] = None
        self.started = time.time()  # wall clock, as the phase files' "t"
        self.ended: Optional[float] = None  # wall clock when the launcher saw it exit on its own
        self.answer: Optional[bool] = None  # _answered's reading of its result, once there is one

    def path(self, suffix: str) -> Path:
        return self.run_dir / f"rank{self.rank}{suffix}"

    def phase(self) -> Optional[dict]:
        return _read_json(self.path(".phase"))


def _dump_stacks(ranks: List[_Rank]) -> None:
    """faulthandler (SIGUSR1, registered by the harness) then py-spy, for every rank still alive."""
    alive = [r for r in ranks if r.proc.poll() is None]
    for r in alive:
        try:
            os.kill(r.proc.pid, signal.SIGUSR1)
        except ProcessLookupError:
            pass
    if alive:
        time.sleep(0.5)  # faulthandler writes from its C signal handler; give it a moment
    pyspy = shutil.which("py-spy")
    for r in alive:
        parts = []
        state = _proc_state(r.proc.pid)
        if state == "T":
            parts.append(f"[pid {r.proc.pid} is stopped (state T, e.g. SIGSTOP): it cannot run its "
                         "faulthandler; py-spy reads it from outside]")
        fh_text = _tail(r.path(".stacks"), 16000)
        if fh_text.strip():
            parts.append("--- faulthandler ---\n" + fh_text)
        if pyspy:
            # A stopped process cannot be suspended again (py-spy's default); it is already still, so read it
            # without suspending. A rank stuck before its first phase is often inside a C call (cuInit, a
            # library's constructor): its native frames say which, so they are read too (py-spy cannot read
            # native frames without suspending, hence not for a stopped rank).
            views = [("", [] if state != "T" else ["--nonblocking"])]
            if state != "T" and not (r.phase() or {}).get("phase"):
                views.append((" --native", ["--native"]))
            for label, flags in views:
                try:
                    argv = [pyspy, "dump", "--pid", str(r.proc.pid)] + flags
                    out = subprocess.run(argv, capture_output=True, text=True, timeout=15, stdin=subprocess.DEVNULL)
                    parts.append(f"--- py-spy dump{label} ---\n" + (out.stdout or "") + (out.stderr or ""))
                except (subprocess.TimeoutExpired, OSError) as exc:
                    parts.append(f"--- py-spy dump{label} failed: {exc} ---")
        else:
            parts.append("[py-spy is not on PATH: no native/py-spy stack]")
        r.stack_dump = "\n".join(parts)


class _Subreaper:
    """While a run lasts, make this process the child subreaper (Linux prctl), so a payload's
    grandchild whose parent exited is re-parented to us instead of to init: still findable, still
    killable. Restored afterwards. Without prctl (not Linux) the /proc scan alone is used.

    Counted: a launch and the drains of earlier launches (their ranks still exiting, watched from threads of their
    own) overlap, and the setting is the process's, so only the last one out restores what was there before."""

    PR_SET_CHILD_SUBREAPER = 36
    PR_GET_CHILD_SUBREAPER = 37
    _lock = threading.Lock()
    _holders = 0
    _prev: Optional[int] = None
    _libc = None

    def __enter__(self) -> "_Subreaper":
        cls = type(self)
        with cls._lock:
            cls._holders += 1
            if cls._holders == 1:
                cls._prev = None
                try:
                    import ctypes

                    cls._libc = ctypes.CDLL(None, use_errno=True)
                    val = ctypes.c_int(0)
                    if cls._libc.prctl(self.PR_GET_CHILD_SUBREAPER, ctypes.byref(val), 0, 0, 0) == 0:
                        cls._prev = val.value
                        cls._libc.prctl(self.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
                except (OSError, AttributeError):
                    cls._prev = None
        return self

    def __exit__(self, *exc) -> None:
        cls = type(self)
        with cls._lock:
            cls._holders -= 1
            if cls._holders == 0 and cls._prev is not None:
                cls._libc.prctl(self.PR_SET_CHILD_SUBREAPER, cls._prev, 0, 0, 0)


class _Tracker:
    """Every process a run started, directly or not: rank PIDs, their descendants, and orphans that
    were re-parented to us (the subreaper). Scanned while the run goes, so a child that outlives its
    rank is still known when the run ends.

    An orphan re-parented to us belongs to the run only when its environment carries the run's tag
    (ENVBUILD_RUN_DIR=<this run's directory>): the doctor may start processes of its own while a run goes on
    (the next probe's interpreters, a fact reader), and those are not this run's to kill."""

    def __init__(self, run_dir: str) -> None:
        self.me = os.getpid()
        self.tag = f"ENVBUILD_RUN_DIR={run_dir}".encode()
        self.known: set = set()
        self.foreign: set = set()  # children of ours found not to be the run's: never looked at again

    def scan(self, ranks: List["_Rank"]) -> None:
        table = _proc_table()
        roots = [r.proc.pid for r in ranks]
        candidates = [pid for pid, (ppid, _g, _s) in table.items()
                      if ppid == self.me and pid not in roots and pid not in self.known and pid not in self.foreign]
        adopted = [pid for pid in candidates if _environ_has(pid, self.tag)]
        self.foreign |= set(candidates) - set(adopted)
        self.known |= set(descendants(roots, table)) | set(adopted) | set(descendants(adopted, table))
        self.known -= set(roots)

    def reap(self) -> None:
        """Collect the exit status of adopted orphans so they do not stay as zombies."""
        for pid in list(self.known):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def _kill_all(ranks: List[_Rank], tracker: _Tracker) -> List[int]:
    """SIGTERM (+SIGCONT for stopped ranks), then SIGKILL, every rank's group and every descendant.

    Returns PIDs still alive afterwards (must be empty; reported rather than hidden).
    """
    pgids = [r.pgid for r in ranks]
    tracker.scan(ranks)
    strays = sorted(tracker.known)  # includes children that left the group or lost their parent

    def live_strays() -> List[int]:
        tracker.reap()
        return [p for p in strays if _proc_state(p) not in (None, "Z")]

    if not (any(r.proc.poll() is None for r in ranks) or group_members(pgids) or live_strays()):
        return []

    def signal_all(sig: int) -> None:
        for pgid in pgids:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in strays:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    signal_all(signal.SIGTERM)
    signal_all(signal.SIGCONT)  # a stopped process only acts on SIGTERM once continued
    end = time.monotonic() + TERM_GRACE_S
    while time.monotonic() < end:
        for r in ranks:
            r.proc.poll()
        if all(r.proc.returncode is not None for r in ranks) and not group_members(pgids) \
                and not live_strays():
            break
        time.sleep(POLL_S)
    signal_all(signal.SIGKILL)
    for r in ranks:
        try:
            r.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    end = time.monotonic() + 5.0
    left: List[int] = []
    while time.monotonic() < end:
        left = sorted(set(group_members(pgids)) | set(live_strays()))
        if not left:
            break
        time.sleep(POLL_S)
    return left


def launch(payload: str, nranks: int, *, python: str, gpus: Optional[List[int]], args: List[str],
           deadline_s: float, backend: str = "nccl", env: Optional[Dict[str, str]] = None,
           per_rank_env: Optional[List[Dict[str, str]]] = None,
           phase_deadlines: Optional[Dict[str, float]] = None, run_dir: Optional[str] = None,
           allow_nvls: bool = False, cancel: Optional[threading.Event] = None, drain: bool = False,
           dump_on_cancel: bool = True) -> LaunchOutcome:
    """Run `payload` as `nranks` processes under `python` and return what each rank did.

    deadline_s bounds the whole run; phase_deadlines maps a phase name (or "*" for any phase) to the
    most seconds a rank may spend in it, and START to the most seconds from a rank's start to its first
    phase. The run directory (a fresh temp dir unless given) keeps the per-rank logs for the report. `cancel`, when set by another thread, ends the run like a deadline (the
    stack probe's prefetch thread: envbuild/doctor/stack_reader.py); without `dump_on_cancel` its ranks are killed
    without their stacks first (nobody reads a cancelled probe's stacks). Raises FileNotFoundError for a missing
    payload or python.

    `drain`: return once every rank has exited or written a result that is not an error, its exit still to come
    (the harness's teardown: the process group destroyed, the CUDA context released as the process ends; 0.6-1.1 s
    of a quick run's probes on the H100, docs/faults.md). A Drain (outcome.drain) watches those exits under the
    same deadlines while the doctor goes on. Ranks launched while drains run get their pids in SETTLE_PIDS_VAR, so
    a payload can wait for them before it measures (checks/_harness.py Probe.settle).
    """
    script = resolve_payload(payload)
    if not (os.path.isfile(python) or shutil.which(python)):
        raise FileNotFoundError(f"python {python!r} not found")
    if per_rank_env is not None and len(per_rank_env) != nranks:
        raise ValueError(f"per_rank_env has {len(per_rank_env)} entries for {nranks} ranks")
    leftovers.sweep_tmp(("envbuild-run",), min_age_s=leftovers.RUN_DIR_KEEP_S)  # dead doctors' old run dirs
    rd = Path(run_dir) if run_dir else Path(tempfile.mkdtemp(prefix=leftovers.tmp_prefix("envbuild-run")))
    rd.mkdir(parents=True, exist_ok=True)
    port = rendezvous_port()
    in_payload_dir = script.parent.resolve() == payload_dir().resolve()
    pythonpath = None if in_payload_dir else str(payload_dir())
    base = dict(os.environ)
    phase_deadlines = dict(phase_deadlines or {})
    exiting = settle_pids()
    if exiting:
        cap = phase_deadlines.get("settle", phase_deadlines.get("*", deadline_s))
        env = {**(env or {}), SETTLE_PIDS_VAR: ",".join(str(p) for p in exiting),
               SETTLE_LIMIT_VAR: f"{min(SETTLE_LIMIT_S, SETTLE_SHARE * cap):.1f}"}

    envs = [rank_env(k, nranks, port=port, run_dir=str(rd), gpus=gpus, backend=backend, deadline_s=deadline_s,
                     base=base, extra=env, per_rank=(per_rank_env[k] if per_rank_env else None),
                     allow_nvls=allow_nvls, pythonpath=pythonpath) for k in range(nranks)]
    ranks: List[_Rank] = []  # filled as ranks start, so the cleanup sees every one
    start = time.monotonic()
    handed_on = False
    with _Subreaper():
        tracker = _Tracker(str(rd))
        try:
            for k, rank_environ in enumerate(envs):
                with _signals_deferred():
                    ranks.append(_start_rank(k, python, script, list(args), rank_environ, rd))
            timed_out, reason = _follow(ranks, tracker, start, deadline_s, phase_deadlines, cancel,
                                        until_answered=drain, dump_on_cancel=dump_on_cancel)
            handed_on = reason == ANSWERED
        except Stopped as stop:
            stop.where = _where(ranks, payload)
            raise
        finally:
            if not handed_on:
                with _signals_deferred():
                    leftover = _kill_all(ranks, tracker)
        if handed_on:  # the drain takes the subreaper before this launch lets it go: no orphan slips past
            with _signals_deferred():
                outcome = _outcome(ranks, False, "", [], time.monotonic() - start, rd, handed_on=True)
                outcome.drain = Drain(ranks, tracker, start, deadline_s, phase_deadlines, outcome)
            return outcome
    return _outcome(ranks, timed_out, reason, leftover, time.monotonic() - start, rd)


def _start_rank(k: int, python: str, script: Path, args: List[str], env: Dict[str, str], rd: Path) -> _Rank:
    """Rank k as a warm interpreter when the pool has one that fits (envbuild/doctor/warm.py), else cold."""
    out_path, err_path = rd / f"rank{k}.stdout.log", rd / f"rank{k}.log"
    proc = warm.take(python, script, args, env, rd, out_path, err_path)
    if proc is not None:
        return _Rank(k, proc, rd, warm=True)
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen([python, "-u", str(script)] + args, env=env, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, cwd=str(rd), start_new_session=True, close_fds=True,
                                preexec_fn=rank_preexec())
    return _Rank(k, proc, rd)


def _answered(r: _Rank) -> bool:
    """The rank wrote its final result (checks/_harness.py Probe.finish; a first record written early does not
    count) and it is not an error: what is left of it is its exit. A rank whose payload raised exits non-zero right
    after its error result, and that exit is the crash a check reports: not drained."""
    if not r.answer and r.path(".json").exists():
        data = _read_json(r.path(".json")) or {}
        r.answer = bool(data.get("final")) and data.get("status") != "error"
    return bool(r.answer)


def _follow(ranks: List[_Rank], tracker: _Tracker, start: float, deadline_s: float,
            phase_deadlines: Dict[str, float], cancel: Optional[threading.Event] = None,
            until_answered: bool = False, dump_on_cancel: bool = True) -> "tuple[bool, str]":
    """Watch the started ranks until all exit, one crashes (plus a grace), a deadline passes, `cancel` is set, or
    (`until_answered`) every rank still running has answered (_answered): then (False, ANSWERED).

    Returns (timed_out, reason). Ranks still alive at the end (not ANSWERED) get their stacks dumped (unless
    cancelled without `dump_on_cancel`) and are marked killed; the caller's cleanup kills them.
    """
    reason = ""
    timed_out = False
    first_crash_at: Optional[float] = None
    last_scan = 0.0
    while True:
        now = time.monotonic()
        if now - last_scan > SCAN_S:
            tracker.scan(ranks)
            last_scan = now
        for r in ranks:
            if r.exited_on_own is None and r.proc.poll() is not None:
                r.exited_on_own = r.proc.returncode
                r.ended = time.time()
                if r.proc.returncode != 0 and first_crash_at is None:
                    first_crash_at = now
                    reason = f"rank {r.rank} exited with code {r.proc.returncode}"
        if all(r.exited_on_own is not None for r in ranks):
            break
        if until_answered and first_crash_at is None and \
                all(r.exited_on_own is not None or _answered(r) for r in ranks):
            tracker.scan(ranks)  # what they started so far, for the drain's cleanup
            return False, ANSWERED
        if first_crash_at is not None and now - first_crash_at > CRASH_GRACE_S:
            break
        if now - start > deadline_s:
            timed_out = True
            reason = f"{RUN_DEADLINE} of {deadline_s:.0f} s passed"
            break
        if cancel is not None and cancel.is_set():
            reason = "cancelled"
            break
        over = _phase_overrun(ranks, phase_deadlines)
        if over:
            timed_out = True
            reason = over
            break
        _wait_a_little(ranks)
    if any(r.proc.poll() is None for r in ranks):
        for r in ranks:
            if r.proc.poll() is None:
                r.state = _proc_state(r.proc.pid)
        if dump_on_cancel or reason != "cancelled":
            _dump_stacks(ranks)
        for r in ranks:
            if r.proc.poll() is None:
                r.killed = True
    return timed_out, reason


class Drain:
    """The exits of a launch's ranks that answered (launch(drain=True)), watched from a thread of its own under the
    launch's deadlines: its whole-run deadline and its phase deadlines (the harness's "teardown" phase falls under
    "*"), with the same stack dumps and kills as a rank that hangs inside the launch. A rank stuck in its teardown
    or crashing there is as much a failure as before: the runner takes the outcome `wait()` returns and judges the
    check again on it (envbuild/doctor/runner.py judge_exits).

    Meanwhile the next check runs: a quick doctor on the H100 spent 1.7 s of its 15 s waiting for exits
    (docs/faults.md, session 11)."""

    def __init__(self, ranks: List[_Rank], tracker: _Tracker, start: float, deadline_s: float,
                 phase_deadlines: Dict[str, float], outcome: LaunchOutcome):
        """Registered and started with stop signals held back (the launch calls it inside _signals_deferred): a stop
        between the two would leave ranks that no drain and no cleanup knows."""
        self.ranks, self.tracker, self.outcome = ranks, tracker, outcome
        self.start, self.deadline_s, self.phase_deadlines = start, deadline_s, dict(phase_deadlines)
        self.final: Optional[LaunchOutcome] = None  # the launch's outcome with the exits, once done
        self.done = threading.Event()
        self._cancel = threading.Event()
        self._reaper = _Subreaper().__enter__()
        with _DRAINS_LOCK:
            _DRAINS.append(self)
        try:
            threading.Thread(target=self._run, name="envbuild-drain", daemon=True).start()
        except RuntimeError:  # no thread to be had: watch the exits here, as an ordinary launch would have
            self._run()

    def pids(self) -> List[int]:
        """The ranks still running and every process the run started that the tracker knows."""
        return sorted({r.proc.pid for r in self.ranks if r.proc.poll() is None} | set(self.tracker.known))

    def _run(self) -> None:
        try:
            if threading.current_thread() is not threading.main_thread():  # stop signals are the main thread's
                try:
                    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
                except (AttributeError, OSError, ValueError):  # pragma: no cover
                    pass
            timed_out, reason, leftover = False, "", []
            try:
                timed_out, reason = _follow(self.ranks, self.tracker, self.start, self.deadline_s,
                                            self.phase_deadlines, self._cancel, dump_on_cancel=False)
            finally:
                leftover = _kill_all(self.ranks, self.tracker)
                # a new outcome, never the launch's rewritten: the check may still be reading that one
                final = _outcome(self.ranks, timed_out, reason, leftover, self.outcome.wall_s,
                                 Path(self.outcome.run_dir))
                final.drain = self
                self.final = final
        finally:
            self._reaper.__exit__(None, None, None)
            with _DRAINS_LOCK:
                if self in _DRAINS:
                    _DRAINS.remove(self)
            self.done.set()

    def wait(self) -> LaunchOutcome:
        """The launch's outcome with the ranks' exits (an Event wait: a stop signal can interrupt it); the launch's
        own outcome when the drain could not build it."""
        self.done.wait()
        return self.final or self.outcome

    def abort(self) -> None:
        """Kill what is left now (the doctor was stopped) and wait for the cleanup."""
        self._cancel.set()
        self.done.wait()


_DRAINS: List[Drain] = []
_DRAINS_LOCK = threading.Lock()


def _live_drains() -> List[Drain]:
    """The drains not yet done (a copy: each removes itself when it ends)."""
    with _DRAINS_LOCK:
        return list(_DRAINS)


def settle_pids() -> List[int]:
    """The pids of every rank (and its descendants) still exiting behind an earlier launch."""
    return sorted({pid for d in _live_drains() for pid in d.pids()})


def wait_drains() -> None:
    """Wait until every drain has ended (each has its deadlines: this never waits longer than they allow)."""
    for d in _live_drains():
        d.wait()


def abort_drains() -> None:
    """End every drain now, killing what is left of its ranks (a stopped doctor leaves no process behind)."""
    for d in _live_drains():
        d.abort()


def _wait_a_little(ranks: List[_Rank]) -> None:
    """Up to POLL_S, but no longer than a running rank takes to exit: a short payload (the stack probe, a 1-rank
    probe) is reported as soon as it ends instead of at the next poll."""
    running = [r for r in ranks if r.exited_on_own is None]
    if not running:
        return
    try:
        running[0].proc.wait(timeout=POLL_S)
    except subprocess.TimeoutExpired:
        pass


def _where(ranks: List[_Rank], payload: str) -> str:
    """What the ranks were doing when the run was stopped from outside: 'p2p.py: rank 0 in phase ...'."""
    parts = []
    for r in ranks:
        phase = (r.phase() or {}).get("phase")
        parts.append(f"rank {r.rank} in phase {phase!r}" if phase else f"rank {r.rank} starting")
    return f"{payload}: " + ", ".join(parts) if parts else f"{payload}: no rank started yet"


def _outcome(ranks: List[_Rank], timed_out: bool, reason: str, leftover: List[int], wall: float,
             rd: Path, handed_on: bool = False) -> LaunchOutcome:
    """What every rank did, from its files and its process. `handed_on`: the launch returns before its ranks' exits
    (Drain): a rank the launch has not seen exit is `exiting`, with no return code yet, even if it has exited since
    (the drain reads that exit; polling here could see it half, with no crash recorded for a non-zero code)."""
    outcomes = []
    for r in ranks:
        exiting = handed_on and r.exited_on_own is None
        ph = r.phase()
        result = _read_json(r.path(".json"))
        first = (result or {}).get("first_phase_t")
        result_t = (result or {}).get("result_t")
        phase_s = (result or {}).get("phase_s")
        imported = (result or {}).get("warm_import_t")
        if not (isinstance(imported, list) and len(imported) == 2 and all(isinstance(t, (int, float)) for t in imported)):
            imported = None
        elapsed = None
        if ph and ph.get("t") is not None and r.killed:
            elapsed = round(time.time() - float(ph["t"]), 2)
        elif r.killed and not (ph or {}).get("phase"):  # stuck starting: the time since its start
            elapsed = round(time.time() - r.started, 2)
        outcomes.append(RankOutcome(
            rank=r.rank, returncode=None if exiting else r.proc.returncode, result=result,
            phase=(ph or {}).get("phase") or None, stderr_tail=_tail(r.path(".log")),
            log_path=str(r.path(".log")), stack_dump=r.stack_dump, stdout_path=str(r.path(".stdout.log")),
            pid=r.proc.pid, phase_elapsed_s=elapsed, state=r.state, warm=r.warm,
            # at least 0: a warm rank may enter its first phase before the launcher has noted that it handed it
            start_s=round(max(0.0, float(first) - r.started), 3) if isinstance(first, (int, float)) else None,
            phase_s=phase_s if isinstance(phase_s, dict) else None,
            after_result_s=round(max(0.0, r.ended - float(result_t)), 3)
            if r.ended is not None and isinstance(result_t, (int, float)) else None,
            import_s=round(imported[1] - imported[0], 3) if imported else None,
            import_wait_s=round(max(0.0, imported[1] - r.started), 3) if imported else None,
            exiting=exiting,
        ))
    hung = [r.rank for r in ranks if r.killed]
    crashed = [r.rank for r in ranks if r.exited_on_own not in (None, 0)]
    return LaunchOutcome(ranks=outcomes, timed_out=timed_out, hung_ranks=hung, crashed_ranks=crashed,
                         wall_s=round(wall, 3), run_dir=str(rd), reason=reason, leftover_pids=leftover)


def _phase_overrun(ranks: List[_Rank], deadlines: Dict[str, float]) -> str:
    """A message when a live rank has been in a phase longer than its deadline, or has written no phase START
    seconds after it started, else ""."""
    if not deadlines:
        return ""
    now = time.time()
    for r in ranks:
        if r.proc.poll() is not None:
            continue
        ph = r.phase()
        if not ph or not ph.get("phase"):
            limit = deadlines.get(START)
            if limit is not None and now - r.started > limit:
                return f"rank {r.rank} {STUCK_STARTING}: no phase within {limit:.0f} s of its start"
            continue
        name = ph["phase"]
        limit = deadlines.get(name, deadlines.get("*"))
        if limit is not None and now - float(ph.get("t", now)) > limit:
            return f"rank {r.rank} spent more than {limit:.0f} s in phase {name!r}"
    return ""
