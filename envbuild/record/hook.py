"""The recorder inside each process of a job: Ray's worker_process_setup_hook (`envbuild.record.hook.setup`), also
called by bootstrap/sitecustomize.py in the processes Ray workers start, and again in a forked child.

Why this shape:
- a worker's start may cost at most ~30 ms more, so the start path imports only the standard library and does
  only what must happen before the process does anything else: the environment defaults NCCL and torch read at
  init (NCCL_DEBUG_FILE, the flight recorder), faulthandler, the `start` event, and one daemon thread. The thread
  does the rest (start.json with redacted argv/env, node.json, the library audit) and then beats: a small
  alive.json rewritten every ENVBUILD_RECORD_HEARTBEAT_S seconds, a new libs.jsonl line when the mapped
  CUDA/NCCL libraries change, the Ray actor once it is known, and the hang watchdog;
- a process killed by SIGKILL or lost with its node cannot write: a reader tells it by a start without an exit or
  failure, and a heartbeat that stopped (docs/record.md);
- a stopped peer (SIGSTOP inside a collective) cannot write either: the ranks waiting on it do, when their main
  thread has not moved for ENVBUILD_RECORD_HANG_S seconds (all stacks into faulthandler.log, a `hang` event naming
  the torch.distributed call they are in);
- torch.distributed's group lifecycle (init/new_group/destroy) is recorded by wrapping those three functions when
  torch.distributed.distributed_c10d is imported; its collectives are wrapped only to catch their exception (the
  first failure, where error 999 surfaces), nothing on the success path; ENVBUILD_RECORD_WRAP=0 turns both off;
- the user's process never breaks: an unwritable run dir records nothing and says so once on stderr; every
  recorder error is swallowed.
"""
from __future__ import annotations

import faulthandler
import json
import os
import re
import sys
import threading
import time
from typing import Any, Callable, Dict, Optional

DIR_VAR = "ENVBUILD_RECORD_DIR"
WARNED_VAR = "ENVBUILD_RECORD_WARNED"
SCHEMA_PROCESS = "envbuild.record.process/1"
SCHEMA_NODE = "envbuild.record.node/1"
EVENTS_MAX = int(os.environ.get("ENVBUILD_RECORD_EVENTS_MAX", str(1 << 20)))  # bytes; essential kinds get 2x
PROCS_MAX = int(os.environ.get("ENVBUILD_RECORD_MAX_PROCS", "4000"))  # process dirs per host
HANG_DUMPS_MAX = 6
START_DELAY_S = float(os.environ.get("ENVBUILD_RECORD_START_DELAY_S", "2"))  # the full start.json after this
NCCL_MAX = int(os.environ.get("ENVBUILD_RECORD_NCCL_MAX", str(16 << 20)))  # disk bytes of one process's NCCL file
NCCL_KEEP = 1 << 20  # its first and last MiB are kept when the middle is dropped
FR_FILES_MAX = int(os.environ.get("ENVBUILD_RECORD_FR_FILES_MAX", "64"))  # flight-recorder dumps per host
FR_BYTES_MAX = int(os.environ.get("ENVBUILD_RECORD_FR_MAX", str(512 << 20)))  # and their bytes
_STEERING = ("NCCL_", "TORCH_", "PYTORCH_", "CUDA_", "SGLANG_", "ENVBUILD_RECORD_")
_SECRETISH = re.compile(r"KEY|TOKEN|SECRET|PASS|CRED|AUTH", re.I).search
SET_VAR = "ENVBUILD_RECORD_SET"  # the names this recorder set: a child sets them anew (its own FR file)
HANG_ANY = os.environ.get("ENVBUILD_RECORD_HANG_ANY") == "1"  # watch processes outside a torch.distributed group too
ESSENTIAL = frozenset({"exception", "signal", "exit", "hang", "gpu_memory", "truncated"})
FR_BUFFER = "2000"
_state: Optional["Recorder"] = None
_fork_hooked = False
_finder_installed = False


def setup(origin: str = "ray") -> None:
    """Start recording this process (once per process; a second call only adds what the first could not know)."""
    global _state, _fork_hooked
    if _state is not None and _state.pid == os.getpid():
        if origin == "ray":
            _state.in_ray = True
            _note_exit_actor()
        return
    root = os.environ.get(DIR_VAR)
    if not root:
        return
    try:
        rec = Recorder(root, origin)
        rec.start()
    except Exception as exc:  # never the user's problem
        _say_once(f"envbuild record: not recording pid {os.getpid()} into {root}: {exc}")
        return
    _state = rec
    if not _fork_hooked:
        os.register_at_fork(after_in_child=_after_fork)
        _fork_hooked = True
    if origin == "ray":
        _note_exit_actor()
        _chain_next_hook()


def _note_exit_actor() -> None:
    """Ray's `exit_actor` ends the worker without running atexit: the actor's context and its exit are recorded
    first, so an actor that ended itself does not read as one killed without a word. (ray.actor is loaded in
    every Ray worker by the time the setup hook runs; nothing is imported here.)"""
    mod = sys.modules.get("ray.actor")
    original = getattr(mod, "exit_actor", None)
    if original is None or getattr(original, "_envbuild_noted", False):
        return

    def exit_actor(*args: Any, **kwargs: Any) -> Any:
        rec = _state
        if rec is not None and rec.pid == os.getpid():
            rec.ended_by_exit_actor()
        return original(*args, **kwargs)

    exit_actor._envbuild_noted = True  # type: ignore[attr-defined]
    exit_actor.__doc__, exit_actor.__wrapped__ = original.__doc__, original  # type: ignore[attr-defined]
    mod.exit_actor = exit_actor  # type: ignore[union-attr]


def _chain_next_hook() -> None:
    """A job that had its own worker_process_setup_hook keeps it: `envbuild record env` moved it here."""
    name = os.environ.get("ENVBUILD_RECORD_NEXT_HOOK")
    if not name:
        return
    import importlib

    module, _, attr = name.rpartition(".")
    getattr(importlib.import_module(module), attr)()


def _after_fork() -> None:
    global _state
    if _state is None or _state.pid == os.getpid():
        return
    parent, _state = _state, None
    parent.forked_away()
    setup(origin="fork")


def _say_once(line: str) -> None:
    if os.environ.get(WARNED_VAR):
        return
    os.environ[WARNED_VAR] = "1"  # children inherit it: one line for the whole process tree
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def host_name() -> str:
    import socket

    name = socket.gethostname() or "unknown-host"
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def start_time(pid: int) -> str:
    """Field 22 of /proc/<pid>/stat (clock ticks since boot): with the pid, a name no reused pid repeats."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return str(int(time.time()))


def bootstrap_dir() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap")


class Recorder:
    def __init__(self, root: str, origin: str):
        self.t0 = time.perf_counter()
        self.pid, self.origin = os.getpid(), origin
        self.in_ray = origin == "ray" or "ray" in sys.modules
        self.ray_done = False  # the ray_context event is written (by the thread, or when exit_actor is called)
        self.exit_noted = False  # the exit event is written (when exit_actor is called; else at interpreter exit)
        self.t_start = time.time()
        self.host = host_name()
        self.host_dir = os.path.join(root, self.host)
        self.dir = os.path.join(self.host_dir, "proc", f"{self.pid}-{start_time(self.pid)}")
        self.hang_s = float(os.environ.get("ENVBUILD_RECORD_HANG_S", "300") or 0)
        self.beat_s = max(0.2, float(os.environ.get("ENVBUILD_RECORD_HEARTBEAT_S", "10") or 10))
        self.lock = threading.Lock()
        self.events_fd = -1
        self.events_bytes = 0
        self.failed = False
        self.set_here: Dict[str, str] = {}
        self.fh_file: Any = None
        self.libs_key: Any = None
        self.hang_dumps = 0
        self.stop = threading.Event()
        self.fr_full = ""
        self.started = False
        self.nccl_file: Optional[str] = None

    # -- the start path: standard library, a few file operations --------------------------------------------
    def start(self) -> None:
        procs = os.path.join(self.host_dir, "proc")
        os.makedirs(procs, exist_ok=True)
        if PROCS_MAX and _count_at_least(procs, PROCS_MAX):
            raise OSError(f"{PROCS_MAX} processes already recorded on this host (ENVBUILD_RECORD_MAX_PROCS)")
        os.mkdir(self.dir)
        self.events_fd = os.open(os.path.join(self.dir, "events.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._defaults()
        self._faulthandler()
        self._install_hooks()
        self._early_start()
        _preimport()
        threading.Thread(target=self._run, name="envbuild-record", daemon=True).start()
        # setup_ms: what this start path cost the process (benchmarks/bench_record.py reads it)
        self.event("start", pid=self.pid, ppid=os.getppid(), origin=self.origin,
                   setup_ms=round((time.perf_counter() - self.t0) * 1000, 2))
        if self.fr_full:
            self.event("recorder_note", what=f"flight-recorder dumps off in this process: {self.fr_full}")

    def _defaults(self) -> None:
        """What NCCL and torch read at init, set where the user did not: NCCL's warnings into per-process files
        (only when the user set no NCCL_DEBUG either: a level they chose keeps going where they see it), the
        flight recorder with a bounded buffer, dumped on timeout into fr/<pid>-<starttime>.nccl_trace_rank_<r>
        (while fr/ holds fewer than FR_FILES_MAX dumps and FR_BYTES_MAX bytes). Children inherit these; what a
        parent's recorder set (SET_VAR) a child's recorder sets again for itself."""
        env = os.environ
        ours = set(filter(None, env.get(SET_VAR, "").split(",")))

        def unset(*names: str) -> bool:
            return all(n not in env or n in ours for n in names)

        want: Dict[str, str] = {}
        if unset("NCCL_DEBUG", "NCCL_DEBUG_FILE"):
            os.makedirs(os.path.join(self.host_dir, "nccl"), exist_ok=True)
            want["NCCL_DEBUG"] = "WARN"
            want["NCCL_DEBUG_FILE"] = os.path.join(self.host_dir, "nccl", "%h.%p.log")
        if unset("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
            want["TORCH_FR_BUFFER_SIZE"] = want["TORCH_NCCL_TRACE_BUFFER_SIZE"] = FR_BUFFER
        if unset("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
            fr = os.path.join(self.host_dir, "fr")
            os.makedirs(fr, exist_ok=True)
            self.fr_full = _dir_over(fr, FR_FILES_MAX, FR_BYTES_MAX)
            if not self.fr_full:
                want["TORCH_FR_DUMP_TEMP_FILE"] = want["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = \
                    os.path.join(fr, os.path.basename(self.dir) + ".nccl_trace_rank_")
        if unset("TORCH_NCCL_DUMP_ON_TIMEOUT"):
            want["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "0" if self.fr_full else "1"
        boot = bootstrap_dir()
        path = env.get("PYTHONPATH", "")
        if boot not in path.split(os.pathsep):
            want["PYTHONPATH"] = boot + (os.pathsep + path if path else "")
        env.update(want)
        env[SET_VAR] = ",".join(sorted((ours | set(want)) - {"PYTHONPATH"}))
        self.set_here = want

    def _faulthandler(self) -> None:
        """Fatal-signal stacks into faulthandler.log. Ray enables faulthandler into the worker's log (which dies
        with the node): taken over in Ray workers; a faulthandler the user enabled elsewhere is kept (the hang
        dumps still come here)."""
        self.fh_file = open(os.path.join(self.dir, "faulthandler.log"), "a", buffering=1)
        self.fh_user = faulthandler.is_enabled() and self.origin == "sitecustomize"
        if not self.fh_user:
            faulthandler.enable(file=self.fh_file, all_threads=True)
        try:
            import signal

            if signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
                faulthandler.register(signal.SIGUSR1, file=self.fh_file, all_threads=True)
        except (ValueError, RuntimeError, AttributeError):
            pass

    def _install_hooks(self) -> None:
        prev = sys.excepthook

        def excepthook(tp, value, tb):  # type: ignore[no-untyped-def]
            self.failure(value, where="sys.excepthook")
            prev(tp, value, tb)

        sys.excepthook = excepthook
        prev_thread = threading.excepthook

        def thread_hook(args):  # type: ignore[no-untyped-def]
            if args.exc_type is not SystemExit:
                self.failure(args.exc_value, where=f"thread {getattr(args.thread, 'name', '?')}")
            prev_thread(args)

        threading.excepthook = thread_hook
        import atexit

        atexit.register(self._at_exit)
        if os.environ.get("ENVBUILD_RECORD_WRAP", "1") != "0":
            _watch_torch_distributed()

    # -- writing ---------------------------------------------------------------------------------------------
    def event(self, kind: str, **fields: Any) -> None:
        if self.events_fd < 0 or self.pid != os.getpid():
            return
        line = json.dumps({"t": round(time.time(), 6), "kind": kind, **fields}, default=str) + "\n"
        data = line.encode()
        with self.lock:
            limit = EVENTS_MAX * (2 if kind in ESSENTIAL else 1)
            if self.events_bytes + len(data) > limit:
                if self.events_bytes <= 2 * EVENTS_MAX - 200 and kind != "truncated":
                    self.events_bytes = 2 * EVENTS_MAX  # one marker, then nothing more of this kind
                    os.write(self.events_fd, json.dumps({"t": time.time(), "kind": "truncated",
                                                         "dropped_from": kind}).encode() + b"\n")
                return
            self.events_bytes += len(data)
            try:
                os.write(self.events_fd, data)
            except OSError:
                pass

    def write_json(self, name: str, data: Any, exclusive: bool = False, where: Optional[str] = None) -> bool:
        path = os.path.join(where or self.dir, name)
        text = json.dumps(data, indent=1, default=str, sort_keys=True)
        if exclusive:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "w") as f:
                f.write(text)
            return True
        tmp = f"{path}.{self.pid}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
        return True

    def libs(self, when: str) -> None:
        from envbuild.record import snapshot

        libs = snapshot.mapped_libs()
        self.libs_key = snapshot.libs_key(libs)
        line = json.dumps({"t": round(time.time(), 6), "when": when, "libs": libs}) + "\n"
        with open(os.path.join(self.dir, "libs.jsonl"), "a") as f:
            f.write(line)

    # -- the thread ------------------------------------------------------------------------------------------
    def _early_start(self) -> None:
        """A first start.json ("partial": true) for a process killed before its full one: who it is, its Ray
        node and job (in a Ray worker), and the short steering values (under 8 characters: no credential detector would flag one,
        so nothing needs detect-secrets here); the full record replaces it START_DELAY_S later."""
        env = {k: v for k, v in os.environ.items() if k.startswith(_STEERING) and len(v) < 8 and not _SECRETISH(k)}
        self.write_json("start.json", {"schema": SCHEMA_PROCESS, "partial": True, "pid": self.pid,
                                       "ppid": os.getppid(), "host": self.host, "t_start": self.t_start,
                                       "origin": self.origin, "ray": _ray_ids(), "env": env,
                                       "hang_s": self.hang_s, "heartbeat_s": self.beat_s})

    def _records_at_start(self) -> None:
        """start.json (argv and environment redacted), node.json, the first libs.jsonl line, audit.json: once."""
        with self.lock:
            if self.started:
                return
            self.started = True
        try:
            from envbuild.record import snapshot

            self.write_json("start.json", snapshot.start_record(self))
            snapshot.write_node(self)
            self.libs("start")
            self.write_json("audit.json", snapshot.audit(load_libcuda=False))
        except Exception as exc:
            self.event("recorder_error", where="start", error=repr(exc)[:300])

    def _run(self) -> None:
        # The start records wait START_DELAY_S: redaction (detect-secrets) and the audit cost ~0.3 s of CPU, which
        # on the process's GIL would lengthen its start, and their imports, made here while the main thread is
        # still importing its own, can meet it in a module-lock cycle that hands one of them a partly initialised
        # module (seen: "cannot import name 'pack' from 'struct'" in a resource tracker). A process that exits
        # sooner writes them at exit; one killed sooner has its partial start.json and `start` event only.
        delay_end = time.monotonic() + START_DELAY_S
        while time.monotonic() < delay_end:  # the heartbeat goes on meanwhile
            if self.stop.wait(min(self.beat_s, max(0.0, delay_end - time.monotonic()))):
                return
            try:
                self.write_json("alive.json", {"t": round(time.time(), 3), "pid": self.pid})
            except OSError:
                pass
        self._records_at_start()
        waits = [0.5, 1.0, 2.0, 4.0]
        last_frame: Any = None
        since = time.monotonic()
        while not self.stop.is_set():
            self.stop.wait(min(waits.pop(0), self.beat_s) if waits and not self.ray_done else self.beat_s)
            if self.pid != os.getpid():
                return
            try:
                self.write_json("alive.json", {"t": round(time.time(), 3), "pid": self.pid})
                if not self.ray_done and self.in_ray:
                    self.ray_done = self._ray_context(final=not waits)
                from envbuild.record import snapshot

                libs = snapshot.mapped_libs()
                if snapshot.libs_key(libs) != self.libs_key:
                    self.libs("change")
                if "libnccl" in libs and "NCCL_DEBUG_FILE" in self.set_here:
                    self._cap_nccl_file()
                if self.hang_s > 0 and (_in_process_group() or HANG_ANY):
                    frame = _main_frame()
                    if frame is None or frame != last_frame:
                        last_frame, since = frame, time.monotonic()
                    elif time.monotonic() - since >= self.hang_s * (2 ** self.hang_dumps):
                        self._hang(time.monotonic() - since)
            except Exception as exc:
                self.event("recorder_error", where="beat", error=repr(exc)[:300])

    def _cap_nccl_file(self) -> None:
        """Keep this process's NCCL file under NCCL_MAX bytes of disk: NCCL holds it open and writes on, so its
        middle is given back to the filesystem (a hole: the first and last MiB stay, the size NCCL sees stays)."""
        from envbuild.record import snapshot

        if self.nccl_file is None:
            self.nccl_file = snapshot.own_nccl_file(os.path.join(self.host_dir, "nccl"), self.pid)
            if self.nccl_file is None:
                return
        dropped = snapshot.punch_middle(self.nccl_file, NCCL_MAX, NCCL_KEEP)
        if dropped:
            self.event("capped", what="nccl", freed=dropped, file=os.path.basename(self.nccl_file))

    def _ray_context(self, final: bool) -> bool:
        from envbuild.record import snapshot

        ctx = snapshot.ray_context()
        if ctx is None:
            return final
        if ctx.get("actor_id") or final:
            self.event("ray_context", **ctx)
            return True
        return False

    def _hang(self, stuck: float) -> None:
        if self.hang_dumps >= HANG_DUMPS_MAX:
            return
        self.hang_dumps += 1
        from envbuild.record import snapshot

        where = snapshot.main_stack_summary()
        self.event("hang", stuck_s=round(stuck, 1), frame=where.get("frame"), collective=where.get("collective"),
                   dump=self.hang_dumps)
        if where.get("collective"):
            self.event("collective", name=where["collective"], source="stack", state="waiting",
                       stuck_s=round(stuck, 1))
        if self.fh_file is not None:
            self.fh_file.write(f"\n# envbuild record: main thread at the same place for {stuck:.1f} s "
                               f"(ENVBUILD_RECORD_HANG_S={self.hang_s:g}), all threads:\n")
            self.fh_file.flush()
            faulthandler.dump_traceback(file=self.fh_file, all_threads=True)

    # -- failure and exit ------------------------------------------------------------------------------------
    def failure(self, exc: BaseException, where: str, **extra: Any) -> None:
        """The exception (every one as an event; the first one also as failure.json with GPU memory, the
        kernel's Xid lines and the libraries at that moment)."""
        try:
            from envbuild.record import snapshot

            first = not self.failed
            self.failed = True
            info = snapshot.exception_info(exc)
            self.event("exception", first=first, where=where, **info, **extra)
            if not first:
                return
            mem = snapshot.gpu_memory()
            self.event("gpu_memory", **mem)
            self.libs("failure")
            kmsg = snapshot.kmsg_around(time.time(), self.host_dir)
            self.write_json("failure.json", {"schema": SCHEMA_PROCESS, "t": time.time(), "pid": self.pid,
                                             "kind": "exception", "where": where, **info, **extra,
                                             "gpu_memory": mem, "kmsg": kmsg,
                                             "libs": snapshot.mapped_libs()}, exclusive=True)
        except Exception:
            pass

    def ended_by_exit_actor(self) -> None:
        """The actor called Ray's exit_actor: the process ends without atexit (see _note_exit_actor). The quick
        records first, then the start records an actor that ends inside the start delay has not written yet."""
        try:
            if not self.ray_done:
                self.ray_done = self._ray_context(final=True)
            self.event("exit", code=0, how="exit_actor")
            self.exit_noted = True
            self._records_at_start()
        except Exception:
            pass

    def _at_exit(self) -> None:
        if self.pid == os.getpid():
            self.stop.set()
            self._records_at_start()
            if not self.exit_noted:  # exit_actor wrote it (Ray may still run atexit after it)
                self.event("exit", code=_exit_code())

    def forked_away(self) -> None:
        """In a forked child: the parent's file and thread are not ours."""
        self.events_fd = -1
        self.stop.set()


def _exit_code() -> Optional[int]:
    code = getattr(sys, "last_exc", None)
    return 1 if code is not None else None


def _preimport() -> None:
    """The standard modules the recorder's thread needs first, imported here in the main thread (already loaded
    in a Ray worker; a few ms in a bare interpreter), so the thread's own imports are envbuild's and
    detect-secrets', which the process itself does not import."""
    try:
        import ctypes  # noqa: F401
        import socket  # noqa: F401
        import struct  # noqa: F401
        import traceback  # noqa: F401
    except Exception:
        pass


def _ray_ids() -> Optional[Dict[str, Any]]:
    """The job, node and worker of this Ray worker (the actor comes later, in a `ray_context` event)."""
    ray = sys.modules.get("ray")
    try:
        ctx = ray.get_runtime_context()  # type: ignore[union-attr]
        return {"job_id": ctx.get_job_id(), "node_id": ctx.get_node_id(), "worker_id": ctx.get_worker_id()}
    except Exception:
        return None


def _dir_over(folder: str, files_max: int, bytes_max: int) -> str:
    """Why `folder` is full ('' when it is not): at least files_max entries, or bytes_max bytes in them."""
    total = 0
    with os.scandir(folder) as it:
        for i, entry in enumerate(it, 1):
            if i >= files_max:
                return f"{folder} holds {files_max} files (ENVBUILD_RECORD_FR_FILES_MAX)"
            try:
                total += entry.stat().st_size
            except OSError:
                continue
            if total >= bytes_max:
                return f"{folder} holds {total >> 20} MiB (ENVBUILD_RECORD_FR_MAX)"
    return ""


def _count_at_least(folder: str, n: int) -> bool:
    with os.scandir(folder) as it:
        for i, _ in enumerate(it, 1):
            if i >= n:
                return True
    return False


def _in_process_group() -> bool:
    dist = sys.modules.get("torch.distributed")
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:
        return False


def _main_frame() -> Any:
    """Where the main thread is now (code object, line); None when it waits idle in Ray's task loop."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    if frame is None:
        return None
    code = frame.f_code
    if code.co_name in ("main_loop", "run_task_loop") and "ray" in code.co_filename:
        return None
    return (id(code), frame.f_lineno)


# -- torch.distributed ------------------------------------------------------------------------------------------
C10D = "torch.distributed.distributed_c10d"
LIFECYCLE = ("init_process_group", "new_group", "destroy_process_group")
COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "barrier", "send", "recv", "isend",
               "irecv", "reduce", "gather", "scatter", "broadcast_object_list", "all_gather_object",
               "batch_isend_irecv", "monitored_barrier")


def _watch_torch_distributed() -> None:
    global _finder_installed
    mod = sys.modules.get(C10D)
    if mod is not None:
        _patch_c10d(mod)
        return
    if not _finder_installed:
        sys.meta_path.insert(0, _C10DFinder())
        _finder_installed = True


class _C10DFinder:
    """Patches torch.distributed.distributed_c10d once it has run (before torch.distributed re-exports it)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != C10D:
            return None
        import importlib.machinery

        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


class _PatchingLoader:
    def __init__(self, loader: Any):
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        _patch_c10d(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


def _patch_c10d(mod: Any) -> None:
    if getattr(mod, "_envbuild_record", False):
        return
    mod._envbuild_record = True
    pkg = sys.modules.get("torch.distributed")
    for name in LIFECYCLE + COLLECTIVES:
        fn = getattr(mod, name, None)
        if not callable(fn):
            continue
        wrapped = (_lifecycle if name in LIFECYCLE else _collective)(name, fn)
        setattr(mod, name, wrapped)
        if pkg is not None and getattr(pkg, name, None) is fn:
            setattr(pkg, name, wrapped)


def _lifecycle(name: str, fn: Callable) -> Callable:
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            out = fn(*args, **kwargs)
        except BaseException as exc:
            _note(exc, name)
            raise
        rec = _state
        if rec is not None and rec.pid == os.getpid():
            try:
                _pg_event(rec, name, args, kwargs)
            except Exception:
                pass
        return out

    return wrapper


def _collective(name: str, fn: Callable) -> Callable:
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            _note(exc, name)
            raise

    return wrapper


def _note(exc: BaseException, name: str) -> None:
    rec = _state
    if rec is None or rec.pid != os.getpid() or isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return
    rec.event("collective", name=name, source="wrapper", state="failed")
    first = not rec.failed
    rec.failure(exc, where=f"torch.distributed.{name}", collective=name)
    if first:
        _dump_flight_recorder(rec)


def _dump_flight_recorder(rec: Recorder) -> None:
    """At the first failed collective, PyTorch's flight-recorder buffer into this process's dump file: PyTorch
    dumps by itself only on an NCCL watchdog timeout, and an error such as 999 raised by a collective is not one.
    A dump PyTorch already wrote there is kept."""
    prefix = rec.set_here.get("TORCH_FR_DUMP_TEMP_FILE")
    c10d = sys.modules.get("torch._C._distributed_c10d")
    dist = sys.modules.get("torch.distributed")
    if not prefix or c10d is None or dist is None:
        return
    try:
        dump = getattr(c10d, "_dump_fr_trace", None) or getattr(c10d, "_dump_nccl_trace")
        rank = dist.get_rank() if dist.is_initialized() else 0
        data = dump()
        path = f"{prefix}{rank}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        rec.event("flight_recorder", file=os.path.basename(path), bytes=len(data), why="first failed collective")
    except FileExistsError:
        pass
    except Exception as exc:
        rec.event("recorder_error", where="flight_recorder", error=repr(exc)[:300])


def _pg_event(rec: Recorder, name: str, args: Any, kwargs: Any) -> None:
    dist = sys.modules.get("torch.distributed")
    op = {"init_process_group": "init", "new_group": "new_group", "destroy_process_group": "destroy"}[name]
    fields: Dict[str, Any] = {"op": op}
    if op != "destroy" and dist is not None:
        try:
            if dist.is_initialized():
                fields.update(rank=dist.get_rank(), world=dist.get_world_size())
                fields["backend"] = str(kwargs.get("backend") or (args[0] if args and op == "init" else None)
                                        or dist.get_backend())
        except Exception:
            pass
        if op == "new_group":
            ranks = kwargs.get("ranks", args[0] if args else None)
            fields["ranks"] = list(ranks)[:64] if ranks is not None else None
            fields["group_name"] = kwargs.get("group_desc")
    rec.event("process_group", **fields)
    if op == "init":
        threading.Thread(target=_after_init, args=(rec,), daemon=True).start()


def _after_init(rec: Recorder) -> None:
    """The libraries torch has loaded by its first group (libnccl, libcudart): the `cuda` snapshot and audit."""
    try:
        from envbuild.record import snapshot

        rec.libs("cuda")
        rec.write_json("audit.json", snapshot.audit(load_libcuda=True))
    except Exception:
        pass
