"""CUDA and a 1-rank NCCL group initialised beside the loader's trace, in a child process, through the copies the
trace will most likely resolve: the static doctor's stack probe (`stack_probe.py --resolve-init`), "the init beside
the trace".

Why: on a node's first run the probe's trace of torch's libraries (0.3-0.5 s) and then cuInit, the first buffer
and NCCL's kernels (0.65-1.0 s) were its whole critical path, one after the other (docs/faults.md, session 13).
This child starts with the trace: it loads, by path, the libcudart of torch's CUDA major and the libnccl of the
CUDA wheels beside torch (as checks/stack_probe.py `load_runtime` loads the copies the trace resolves), waits
for the gate, and runs the same initialisation (checks/_torch_native.py `initialise`). Its answer stands for the
probe's only when the copies it mapped (every libcudart, libnccl and libcuda in its /proc/self/maps, compared as
sets: the maps list them in address order) are exactly those the trace resolved. When the trace's libcudart or
libnccl already differ from what the child maps (the copies it was given and those LD_PRELOAD maps into every
process), the probe stops it right after the trace without waiting for its init; when its libcuda differs (a stub
or compat libcuda the runtime would not meet here), or it failed before its first CUDA call (a copy that does not
load or lacks a call: the probe's own path raises NativeUnavailable and loads torch, as without the child), its
answer is dropped. Either way the probe then initialises through the resolved copies itself, as before. A CUDA or
NCCL error of the child is the probe's finding, raised as the same InitError in the same phase.

The child dies with the probe (PR_SET_PDEATHSIG) and leaves no file: its phases reach the probe through a pipe.
Standard library only.

Usage (the probe runs it): python _early_init.py --parent PID [--phase-fd FD] [--gate PATH] CUDART NCCL... ;
one JSON object on stdout.
"""
import ctypes
import glob
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import _torch_native as native
from _common import family_of, mapped_paths

FAMILIES = ("libcudart", "libnccl", "libcuda")
LOAD = "load"  # the child's phase before its first CUDA call: an error there is no finding of CUDA's or NCCL's
PR_SET_PDEATHSIG = 1
STOP_WAIT_S = 5.0  # a SIGKILLed child in D state (a wedged driver call) is not waited for longer


# ---------------------------------------------------------------- the child


def mapped_copies(maps_path="/proc/self/maps"):
    """{family: sorted real paths} mapped by a process, for FAMILIES (a set each: the maps list them in address
    order, not in the order they were loaded)."""
    out = {f: set() for f in FAMILIES}
    with open(maps_path) as fh:
        for path in mapped_paths(fh.read()):
            real = os.path.realpath(path)
            family = family_of(os.path.basename(real))
            if family in out:
                out[family].add(real)
    return {f: sorted(paths) for f, paths in out.items()}


def die_with_parent(parent):
    """SIGKILL this child when the probe that started it dies, SIGKILLed too (Linux; the signal follows the thread
    that started the child, the probe's main thread); exit at once when it already has (`parent` is no longer this
    process's parent)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0),
                                    ctypes.c_ulong(0), ctypes.c_ulong(0))
        except (OSError, AttributeError):
            pass
    if parent is not None and os.getppid() != parent:
        os._exit(1)


class Phases:
    """The child's phases: the seconds of each, and each name written to the probe's pipe when it is entered
    (where a wedged init stopped, for the probe's watchdog: EarlyInit.phase)."""

    def __init__(self, fd):
        self.fd, self.seconds, self.name, self.since = fd, {}, None, None

    def enter(self, name):
        now = time.monotonic()
        if self.name is not None:
            self.seconds[self.name] = round(now - self.since, 3)
        self.name, self.since = name, now
        if self.fd is not None:
            try:
                os.write(self.fd, (name + "\n").encode())
            except OSError:  # the probe is gone or stopped reading: the init goes on
                pass


def initialise(copies, gate, phases):
    """The answer: `copies` loaded into the global scope, the gate, then checks/_torch_native.py's initialisation;
    an error is kept with its type and the phase it happened in."""
    answer = {"torch": {}, "init": {"cuda_tensor": False, "nccl_group": False}}
    try:
        phases.enter(LOAD)
        handles = [ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL) for path in copies]
        runtime = native.Runtime([ctypes.CDLL(None)] + handles)
        phases.enter("gate")
        answer["init"]["gate_wait_s"] = native.wait_for_gate(gate)
        native.initialise(answer["torch"], runtime, answer["init"], phases.enter)
    except Exception as exc:  # the probe raises an InitError as its own finding, and runs its own path on the rest
        answer["error"] = {"type": type(exc).__name__, "phase": phases.name, "message": str(exc)}
    phases.enter("done")
    answer["phases"] = phases.seconds
    return answer


def parse_args(argv):
    """{"parent": pid, "phase_fd": fd or None, "gate": path or None, "copies": [CUDART, NCCL...]}."""
    opts = {"parent": None, "phase_fd": None, "gate": None}
    options = {"--parent": ("parent", int), "--phase-fd": ("phase_fd", int), "--gate": ("gate", str)}
    while argv[:1] and argv[0] in options:
        key, kind = options[argv[0]]
        opts[key] = kind(argv[1])
        argv = argv[2:]
    opts["copies"] = list(argv)
    return opts


def main(argv):
    opts = parse_args(argv)
    die_with_parent(opts["parent"])
    json_fd = os.dup(1)  # NCCL 2.28 prints its banner to fd 1: keep the real stdout for the answer
    os.dup2(2, 1)
    answer = initialise(opts["copies"], opts["gate"], Phases(opts["phase_fd"]))
    answer["mapped"] = mapped_copies()
    os.write(json_fd, (json.dumps(answer) + "\n").encode())
    sys.stderr.flush()
    os._exit(0)


# ---------------------------------------------------------------- the probe's side

SCRIPT = os.path.abspath(__file__)
RUNNING = []  # children not stopped yet: the probe's watchdog kills them once it has answered (kill_all)
_LOCK = threading.Lock()  # RUNNING and each child's phase pipe, between the main thread and the watchdog's


def running_phase():
    """The phase of the child still running, None when none runs or it entered none yet; the child runs on."""
    with _LOCK:
        return RUNNING[0].phase() if RUNNING else None


def kill_all():
    """SIGKILL every child still running, without waiting for it: the watchdog's answer is out, and a child in D
    state (a wedged driver call) must not hold up the probe's exit."""
    with _LOCK:
        for child in RUNNING:
            child.kill()


def preloaded(family):
    """(real paths of `family`'s copies named by path in LD_PRELOAD, whether one is named without a path: the
    loader's search picks that one)."""
    paths, by_name = set(), False
    for item in re.split(r"[:\s]+", os.environ.get("LD_PRELOAD", "")):
        if not item or family_of(os.path.basename(item)) != family:
            continue
        if "/" in item:
            paths.add(os.path.realpath(item))
        else:
            by_name = True
    return paths, by_name


def stands_for(answer, resolved):
    """Whether the child's answer is the probe's own: it mapped exactly the copies the trace resolved (`resolved`,
    {family: real paths}, compared as sets), and it either initialised or met CUDA's or NCCL's refusal (InitError)
    after its first CUDA call. An error before (phase LOAD) or of another kind is the probe's own path's to raise."""
    if "init" not in answer:
        return False
    mapped = answer.get("mapped") or {}
    if any(set(mapped.get(f, ())) != set(resolved.get(f, ())) for f in FAMILIES):
        return False
    error = answer.get("error")
    return error is None or (error.get("type") == native.InitError.__name__ and error.get("phase") != LOAD)


class EarlyInit:
    """The child above, started on the copies torch's CUDA wheels hold. `can_map(resolved)` says whether it can map the
    libcudart and libnccl the trace resolved; `take(resolved)` gives its answer when it stands for the probe's
    (stands_for), else None. The child is stopped either way (stop)."""

    def __init__(self, cudart, nccl, gate):
        self.given = {"libcudart": {os.path.realpath(cudart)}, "libnccl": {os.path.realpath(p) for p in nccl}}
        self.last_phase, self.pending = None, b""
        self.phase_fd, write_fd = os.pipe()
        args = [sys.executable, "-s", SCRIPT, "--parent", str(os.getpid()), "--phase-fd", str(write_fd)]
        args += (["--gate", gate] if gate else []) + [cudart] + list(nccl)
        try:
            # its stderr is the probe's (NCCL's warnings reach the launcher's log of the probe)
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, pass_fds=(write_fd,))
        except OSError:
            os.close(self.phase_fd)
            raise
        finally:
            os.close(write_fd)
        os.set_blocking(self.phase_fd, False)
        with _LOCK:
            RUNNING.append(self)

    def can_map(self, resolved):
        """False when the child's libcudart or libnccl (those it was given, with those LD_PRELOAD names by path)
        cannot be the copies the trace resolved; True when they are, or when LD_PRELOAD names one of them without a
        path (its answer is then compared with the trace, take)."""
        for family, given in self.given.items():
            by_path, by_name = preloaded(family)
            if not by_name and set(resolved.get(family, ())) != given | by_path:
                return False
        return True

    def take(self, resolved):
        """Its answer when it stands for the probe's own (stands_for), else None. Waits as long as the child runs:
        the probe's init watchdog (--init-timeout) bounds that wait and answers for a wedged init itself."""
        try:
            out, _ = self.proc.communicate()
            answer = json.loads(out.decode() or "{}")
        except (ValueError, OSError):
            answer = {}
        finally:
            self.stop()
        return answer if stands_for(answer, resolved) else None

    def phase(self):
        """The last phase the child entered ('torch.cuda.is_available' is cuInit), None before its first; read
        from its pipe without stopping it (call under _LOCK or from the only thread that uses this child)."""
        try:
            while True:
                chunk = os.read(self.phase_fd, 4096)
                if not chunk:
                    break
                self.pending += chunk
        except OSError:  # nothing more now (EAGAIN), or the pipe is closed
            pass
        *lines, self.pending = self.pending.split(b"\n")
        names = [line for line in lines if line]
        if names:
            self.last_phase = names[-1].decode("utf-8", "replace")
        return self.last_phase

    def kill(self):
        """SIGKILL it, unless it has been reaped."""
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except OSError:
                pass

    def stop(self):
        """Kill it and reap it (waiting at most STOP_WAIT_S), close its pipes: the probe leaves no process behind.
        Idempotent, from any thread."""
        with _LOCK:
            if self not in RUNNING:
                return
            RUNNING.remove(self)
            os.close(self.phase_fd)
        self.kill()
        try:
            self.proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:  # SIGKILLed in D state: it goes when the driver lets it
            pass
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def start(pkg_dir, cuda, gate):
    """The child on the copies torch's CUDA wheels hold beside it (the libcudart of torch's CUDA major `cuda`, the
    libnccl), None when they are not there (the probe then initialises after the trace, as before)."""
    site = os.path.dirname(pkg_dir)
    major = str(cuda).split(".")[0]
    cudart = sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib", "libcudart.so.%s" % major)))
    nccl = sorted(glob.glob(os.path.join(site, "nvidia", "nccl", "lib", "libnccl.so.2")))
    if len(cudart) != 1 or len(nccl) != 1:
        return None
    try:
        return EarlyInit(cudart[0], nccl, gate)
    except OSError:
        return None


if __name__ == "__main__":
    main(sys.argv[1:])
