"""Stdlib-only helpers shared by both sides: the payloads (checks/*.py, run by the python of the environment
under test, which may not have envbuild) and envbuild itself (which imports this very file as
`envbuild.data.checks._common`: envbuild/data/checks is checks/, shipped as package data).

What is here is what both sides parse or print the same way: /proc/<pid>/maps, the version codes of NCCL,
CUDA and cuDNN, size labels, and the marker of the variables the launcher set. Keep it stdlib-only and free of
envbuild imports.
"""
import json
from typing import Dict, List, Mapping, Optional


def mapped_paths(maps_text: str) -> List[str]:
    """The distinct files of a /proc/<pid>/maps text, in its order: by address, not the order they were loaded in
    (a file mapped in several segments counts once; anonymous and [special] mappings are left out; a " (deleted)"
    suffix is kept, because a library replaced on disk while mapped is worth seeing)."""
    seen = set()
    out = []
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        path = parts[5].strip()
        if path.startswith("/") and path not in seen:
            seen.add(path)
            out.append(path)
    return out


def library_name(path: str) -> str:
    """The file name of a mapped path without a " (deleted)" suffix: '/x/libnccl.so.2 (deleted)' -> 'libnccl.so.2'."""
    return path.replace(" (deleted)", "").rsplit("/", 1)[-1]


def nccl_version_string(code: int) -> str:
    """ncclGetVersion / NCCL_VERSION_CODE -> "X.Y.Z": X*10000 + Y*100 + Z since NCCL 2.9 (22809 -> 2.28.9),
    X*1000 + Y*100 + Z before (2708 -> 2.7.8)."""
    if code >= 10000:
        return "%d.%d.%d" % (code // 10000, (code % 10000) // 100, code % 100)
    return "%d.%d.%d" % (code // 1000, (code % 1000) // 100, code % 100)


def cuda_version_string(code: Optional[int]) -> Optional[str]:
    """cudaRuntimeGetVersion / cuDriverGetVersion / NVML's CUDA driver version: 12090 -> "12.9"; None for 0."""
    return "%d.%d" % (code // 1000, (code % 1000) // 10) if code else None


def cudnn_version_string(code: int) -> str:
    """cudnnGetVersion: 91900 -> "9.19.0" (major*10000 + minor*100 + patch since cuDNN 9; *1000 before)."""
    if code >= 90000:
        return "%d.%d.%d" % (code // 10000, (code % 10000) // 100, code % 100)
    return "%d.%d.%d" % (code // 1000, (code % 1000) // 100, code % 100)


_UNITS = (("GiB", 30), ("MiB", 20), ("KiB", 10))


def size_label(b: int) -> str:
    """64MiB, 1GiB, 4096B: an exact size as metric names and phases spell it (no rounding, so a label names one
    size)."""
    b = int(b)
    for unit, k in _UNITS:
        if b >= 1 << k and b % (1 << k) == 0:
            return "%d%s" % (b >> k, unit)
    return "%dB" % b


def human_bytes(n: int) -> str:
    """A size for a person to read: "64 MiB", "15.6 GiB", "512 B"."""
    for unit, k in _UNITS:
        size = 1 << k
        if n >= size:
            return "%d %s" % (n // size, unit) if n % size == 0 else "%.1f %s" % (n / size, unit)
    return "%d B" % n


def stat_fields(pid):
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, ...), None if gone. Split after the
    last ")" because the command name itself may hold spaces and parentheses. The launcher's process tracking
    (envbuild/doctor/launcher.py) and a payload's wait for an earlier probe's exit (_harness.py Probe.settle) both
    read it."""
    try:
        with open("/proc/%s/stat" % pid, "r") as fh:
            data = fh.read()
    except OSError:
        return None
    return data[data.rfind(")") + 2:].split(" ")


def family_of(basename):
    """'libcudnn_ops.so.9' -> 'libcudnn'; 'libcuda.so.1' -> 'libcuda'; None for unrelated libraries
    (libnccl-net.so plugins, libcudadevrt.a, libcuda_stub-like names)."""
    for fam in ("libnvidia-ml", "libcudart", "libcudnn", "libnccl", "libcuda"):
        if basename.startswith(fam + ".so") or (fam == "libcudnn" and basename.startswith("libcudnn_")):
            return fam
    return None


def running(pid: int) -> bool:
    """Whether `pid` still runs: a zombie has already closed its files, the GPU's among them (its CUDA context is
    gone), so it counts as gone."""
    fields = stat_fields(pid)
    return bool(fields) and fields[0] not in ("Z", "X", "")


# How a warm interpreter (checks/_warm.py) hands its rank the wall-clock start and end of the torch import it made
# ahead ("began,finished"); the rank's harness takes it out of the environment (the launcher's import_s and
# import_wait_s), and a payload that re-executes itself drops it (the new image imports torch on its own).
WARM_IMPORT_T_VAR = "ENVBUILD_WARM_IMPORT_T"

# The pids (comma-separated) of an earlier probe's ranks still exiting when this launch started: their teardown runs
# behind this probe (envbuild/doctor/launcher.py Drain), and a payload waits for them before it measures free
# memory or speed (checks/_harness.py Probe.settle), so another process's context going away never moves a reading.
SETTLE_PIDS_VAR = "ENVBUILD_SETTLE_PIDS"
# The longest that wait may last (seconds): under the launch's deadline for its "settle" phase, so the wait itself is
# never what the launcher reports as a hang.
SETTLE_LIMIT_VAR = "ENVBUILD_SETTLE_S"

# The stack probe's init.source when its `mapped` comes from the dynamic loader's trace of torch's libraries
# (`stack_probe.py --resolve-only`, create's gate; checks/_loader_trace.py) instead of a process that loaded them, and
# the prefix of that trace's torch.method and init.method: envbuild's stack.torch check tells the gate's facts by it.
LOADER_TRACE = "loader trace"
# How init.method starts when, after that trace, CUDA and a 1-rank NCCL group were initialised through the libcudart
# and libnccl it resolved (`stack_probe.py --resolve-init`, the static doctor): the copies were resolved, and these two
# loaded and run.
RESOLVED_INIT = LOADER_TRACE + ", then CUDA and NCCL through the copies it resolved"


# The launcher (envbuild/doctor/launcher.py) names every variable it set or changed in a payload's environment
# (rank variables, ENVBUILD_*, NVLS pinned off, CUDA_VISIBLE_DEVICES, a caller's extras) in this one variable, as
# JSON {NAME: the value the launching process had, or null when it had none}. A payload that records "the
# environment the user launches with" (checks/stack_probe.py) undoes them with user_environ(), so the doctor's own
# pins never reach the facts that stack.env_policy and the other stack.* checks judge.
LAUNCHER_SET = "ENVBUILD_LAUNCHER_SET"


def mark_launcher_set(base: Mapping[str, str], env: Dict[str, str]) -> Dict[str, str]:
    """`env` (the environment a launcher built on top of `base`) with LAUNCHER_SET naming what it set or changed."""
    changed = {k: base.get(k) for k, v in env.items() if base.get(k) != v and k != LAUNCHER_SET}
    env[LAUNCHER_SET] = json.dumps(changed, sort_keys=True)
    return env


def user_environ(environ: Mapping[str, str]) -> Dict[str, str]:
    """`environ` as the launching process had it: every variable LAUNCHER_SET names back at its original value (or
    gone when it had none), the marker itself dropped. An environment without the marker is returned as is."""
    env = dict(environ)
    raw = env.pop(LAUNCHER_SET, None)
    try:
        original = json.loads(raw) if raw else {}
    except ValueError:
        original = {}
    for key, value in (original.items() if isinstance(original, dict) else ()):
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env
