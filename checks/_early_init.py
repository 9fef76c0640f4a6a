"""CUDA and a 1-rank NCCL group initialised beside the loader's trace, in a child process, through the copies the
trace will most likely resolve: the static doctor's stack probe (`stack_probe.py --resolve-init`).

Why: on a node's first run the probe's trace of torch's libraries (0.3-0.5 s) and then cuInit, the first buffer
and NCCL's kernels (0.65-1.0 s) were its whole critical path, one after the other (docs/faults.md, session 13).
This child starts with the trace: it loads, by path, the libcudart of torch's CUDA major and the libnccl of the
CUDA wheels beside torch (as checks/stack_probe.py `load_runtime` loads the copies the trace resolves), waits
for the gate, and runs the same initialisation (checks/_torch_native.py `initialise`). Its answer stands for the
probe's only when the copies it mapped (libcudart, every libnccl, libcuda: read from its /proc/self/maps) are
exactly those the trace resolved; otherwise (a preloaded libnccl, a libcudart first on LD_LIBRARY_PATH, a stub or
compat libcuda the runtime would not meet here) the probe stops it and initialises through the resolved copies
itself, as before. Standard library only.

Usage (the probe runs it): python _early_init.py [--gate PATH] CUDART NCCL... ; one JSON object on stdout.
"""
import ctypes
import json
import os
import subprocess
import sys
import time

FAMILIES = ("libcudart", "libnccl", "libcuda")


def mapped_copies():
    """{family: [real paths in first-mapped order]} of this process, for FAMILIES."""
    out = {f: [] for f in FAMILIES}
    with open("/proc/self/maps") as fh:
        for line in fh:
            parts = line.split(None, 5)
            if len(parts) < 6 or not parts[5].startswith("/"):
                continue
            path = os.path.realpath(parts[5].strip())
            base = os.path.basename(path)
            family = next((f for f in FAMILIES if base.startswith(f + ".so")), None)
            if family and path not in out[family]:
                out[family].append(path)
    return out


def main(argv):
    import _torch_native as native

    gate = phase_file = None
    while argv[:1] in (["--gate"], ["--phase-file"]):
        if argv[0] == "--gate":
            gate = argv[1]
        else:
            phase_file = argv[1]
        argv = argv[2:]
    json_fd = os.dup(1)  # NCCL 2.28 prints its banner to fd 1: keep the real stdout for the answer
    os.dup2(2, 1)
    phases, state = {}, {}

    def enter(name):
        now = time.monotonic()
        if "phase" in state:
            phases[state["phase"]] = round(now - state["since"], 3)
        state["phase"], state["since"] = name, now
        if phase_file:  # where a wedged initialisation stopped, for the probe's watchdog (EarlyInit.phase)
            with open(phase_file + ".tmp", "w") as fh:
                fh.write(name)
            os.replace(phase_file + ".tmp", phase_file)

    answer = {"torch": {}, "init": {"cuda_tensor": False, "nccl_group": False}}
    try:
        enter("load")
        handles = [ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL) for path in argv]
        runtime = native.Runtime([ctypes.CDLL(None)] + handles)
        enter("gate")
        answer["init"]["gate_wait_s"] = native.wait_for_gate(gate)
        native.initialise(answer["torch"], runtime, answer["init"], enter)
    except Exception as exc:  # the probe reports it as its own init error when the copies match
        answer["error"] = {"type": type(exc).__name__, "phase": state.get("phase"), "message": str(exc)}
    enter("done")
    answer["phases"] = phases
    answer["mapped"] = mapped_copies()
    os.write(json_fd, (json.dumps(answer) + "\n").encode())
    sys.stderr.flush()
    os._exit(0)


RUNNING = []  # children not reaped yet: the probe's watchdog stops them before it answers (stop_all)


def stop_all():
    """Stop every child still running; returns the phase the first was in (None when none ran)."""
    phase = RUNNING[0].phase() if RUNNING else None
    for child in list(RUNNING):
        child.stop()
    return phase


class EarlyInit:
    """The child above, started on the guessed copies; `take(resolved)` gives its answer when the trace resolved
    exactly those copies, else None (the child is reaped either way)."""

    def __init__(self, cudart, nccl, gate):
        import tempfile

        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_early_init.py")
        # in the launcher's run directory when there is one: the doctor removes it even if the probe is killed
        self.dir = tempfile.mkdtemp(prefix="early-init-", dir=os.environ.get("ENVBUILD_RUN_DIR") or None)
        self.phase_file = os.path.join(self.dir, "phase")
        args = [sys.executable, "-s", script, "--phase-file", self.phase_file] + (["--gate", gate] if gate else [])
        args += [cudart] + list(nccl)
        # its stderr is the probe's (NCCL's warnings reach the launcher's log of the probe)
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        RUNNING.append(self)

    def take(self, resolved, timeout_s):
        """Its answer when its mapped copies equal `resolved` ({family: [real paths]}), waiting at most timeout_s;
        None otherwise or when it does not answer in time."""
        try:
            out, _ = self.proc.communicate(timeout=timeout_s)
            answer = json.loads(out.decode() or "{}")
        except (subprocess.TimeoutExpired, ValueError, OSError):
            return None
        finally:
            self.stop()
        mapped = answer.get("mapped") or {}
        same = all(mapped.get(f, []) == resolved.get(f, []) for f in FAMILIES)
        return answer if same and "init" in answer else None

    def phase(self):
        """The phase the child is in ('torch.cuda.is_available' is cuInit), or None."""
        try:
            with open(self.phase_file) as fh:
                return fh.read().strip() or None
        except OSError:
            return None

    def stop(self):
        """Kill and reap it, and remove its phase file (the probe leaves no process or file behind)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self in RUNNING:
            RUNNING.remove(self)
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)


def start(pkg_dir, cuda, gate):
    """The child on the copies torch's CUDA wheels hold beside it (the libcudart of torch's CUDA major `cuda`, the
    libnccl), None when they are not there (the probe then initialises after the trace, as before)."""
    import glob

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
