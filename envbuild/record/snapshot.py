"""What the recorder reads about its process, off the start path (the recorder's thread, or a failure): the
mapped CUDA/NCCL libraries with versions, the redacted start record, the node record, the fleet audit, the Ray
context, the main thread's stack, the GPU memory (NVML through ctypes: no CUDA context is made) and the kernel's
NVRM/Xid lines around a moment (/dev/kmsg, else `dmesg`)."""
from __future__ import annotations

import ctypes
import json
import os
import re
import sys
import threading
import time
import traceback
from typing import Any, Dict, List, Optional

from envbuild import __version__

KMSG_WINDOW_S = 120.0
KMSG_MAX_LINES = 200
TRACEBACK_MAX = 16000
_XID = re.compile(r"NVRM|Xid", re.I)


def mapped_libs(maps_text: Optional[str] = None) -> Dict[str, Dict[str, Any]]:
    """{"libnccl": {"path", "version", "copies"?}}: the first mapped copy of each of the audit's LIBS, with every
    copy under "copies" when more than one is mapped (two libnccl in one process is cause C3)."""
    from envbuild.fleet.audit import mapped_libraries

    out: Dict[str, Dict[str, Any]] = {}
    for key, paths in mapped_libraries(maps_text).items():
        copies = [{"path": p, "version": lib_version(key, p)} for p in paths]
        out[key] = dict(copies[0])
        if len(copies) > 1:
            out[key]["copies"] = copies
    return out


def libs_key(libs: Dict[str, Dict[str, Any]]) -> Any:
    return sorted((k, c["path"]) for k, v in libs.items() for c in v.get("copies", [v]))


def lib_version(key: str, path: str) -> Optional[str]:
    """The version in the real file name (libcudart.so.13.0.96), else ncclGetVersion of an already mapped
    libnccl (ctypes on a loaded library adds no mapping)."""
    m = re.search(r"\.so\.(\d+(?:\.\d+)+)$", os.path.realpath(path))
    if m:
        return m.group(1)
    if key == "libnccl":
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            v = ctypes.c_int(0)
            if lib.ncclGetVersion(ctypes.byref(v)) == 0:
                code = v.value
                major, minor, patch = (code // 10000, code % 10000 // 100, code % 100) if code >= 10000 else \
                    (code // 1000, code % 1000 // 100, code % 100)
                return f"{major}.{minor}.{patch}"
        except (OSError, AttributeError):
            pass
    m = re.search(r"\.so\.(\d+)$", path)
    return m.group(1) if m else None


def own_nccl_file(folder: str, pid: int) -> Optional[str]:
    """The file NCCL_DEBUG_FILE=<folder>/%h.%p.log made for this pid (NCCL writes %h its own way), if any yet."""
    tail = f".{pid}.log"
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if entry.name.endswith(tail):
                    return entry.path
    except OSError:
        pass
    return None


_FALLOC_PUNCH = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE (linux/falloc.h)


def punch_middle(path: str, max_disk: int, keep: int) -> int:
    """When `path` takes more than max_disk bytes of disk, free all but its first and last `keep` bytes in place
    (fallocate PUNCH_HOLE: the writer's offset and the file size stay, the dropped part reads as zeros and takes
    no disk). Returns the bytes freed, 0 when under the cap or where the filesystem cannot punch holes."""
    try:
        st = os.stat(path)
    except OSError:
        return 0
    if st.st_blocks * 512 <= max_disk:
        return 0
    start = (keep + 4095) // 4096 * 4096
    end = (st.st_size - keep) // 4096 * 4096
    if end <= start:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_WRONLY)
    try:
        rc = libc.fallocate(fd, _FALLOC_PUNCH, ctypes.c_longlong(start), ctypes.c_longlong(end - start))
    finally:
        os.close(fd)
    return end - start if rc == 0 else 0


def steering_env() -> Dict[str, str]:
    from envbuild.fleet.audit import environment

    from envbuild.redact import redact_env_value

    env = environment()
    env.update({k: redact_env_value(k, v) for k, v in os.environ.items() if k.startswith("TORCH_FR_")})
    for k in ("CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "ENVBUILD_RECORD_DIR"):
        if k in os.environ:
            env[k] = redact_env_value(k, os.environ[k])
    return env


def _argv() -> List[str]:
    try:
        with open("/proc/self/cmdline", "rb") as f:
            raw = f.read().split(b"\0")
        argv = [a.decode(errors="replace") for a in raw if a]
    except OSError:
        argv = list(sys.argv)
    from envbuild.redact import scrub_text

    return [scrub_text(a) for a in argv[:64]]


def role_hint(argv: List[str], origin: str) -> str:
    head = argv[0] if argv else ""
    if origin == "fork":  # a forked child keeps its parent's argv (and a Ray worker's title)
        return "fork child"
    if head.startswith("ray::"):
        return "ray worker " + head[5:]
    if head.startswith("sglang::"):
        return "sglang " + head[8:]
    joined = " ".join(argv)
    if "multiprocessing.spawn" in joined or "spawn_main" in joined:
        return "multiprocessing spawn child"
    if "multiprocessing.forkserver" in joined:
        return "multiprocessing forkserver"
    if "sglang" in joined:
        return "sglang process"
    return os.path.basename(head) or "process"


def start_record(rec: Any) -> Dict[str, Any]:
    argv = _argv()
    from envbuild.redact import redact_env_value

    return {"schema": "envbuild.record.process/1", "envbuild_version": __version__, "pid": rec.pid,
            "ppid": os.getppid(), "host": rec.host, "argv": argv, "exe": sys.executable, "t_start": rec.t_start,
            "origin": rec.origin, "role": role_hint(argv, rec.origin), "ray": ray_context(),
            "env": steering_env(), "set_by_record": {k: redact_env_value(k, v) for k, v in rec.set_here.items()},
            "hang_s": rec.hang_s, "heartbeat_s": rec.beat_s}


def write_node(rec: Any) -> None:
    """node.json, by the first process of the node (O_EXCL)."""
    path = os.path.join(rec.host_dir, "node.json")
    if os.path.exists(path):
        return
    from envbuild.fleet.audit import kernel_module_version

    def read(p: str) -> Optional[str]:
        try:
            with open(p) as f:
                return f.read().strip()
        except OSError:
            return None

    u = os.uname()
    rec.write_json("node.json", {"schema": "envbuild.record.node/1", "envbuild_version": __version__,
                                 "host": rec.host, "kernel": u.release, "machine": u.machine,
                                 "boot_id": read("/proc/sys/kernel/random/boot_id"),
                                 "driver": read("/proc/driver/nvidia/version"),
                                 "kernel_module": kernel_module_version(), "gpus": gpu_names(),
                                 "t": time.time(), "first_pid": rec.pid},
                   exclusive=True, where=rec.host_dir)


def gpu_names() -> Optional[List[str]]:
    try:
        return sorted(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return None


def audit(load_libcuda: bool) -> Dict[str, Any]:
    """The fleet audit (envbuild/fleet/audit.py) of this process; the driver API is asked only of a libcuda the
    process mapped already (loading one here would change what it maps)."""
    from envbuild.fleet import audit as fa

    libs = fa.mapped_libraries()
    libcuda = libs.get("libcuda", [])
    return {"host": fa.socket.gethostname(), "pid": os.getpid(), "env": fa.environment(), "libraries": libs,
            "kernel_module": fa.kernel_module_version(), "usermode_driver": fa.usermode_driver_version(libcuda),
            "cuda_driver_api": fa.driver_api_version(libcuda) if (libcuda and load_libcuda) else None,
            "torch_cuda": fa.torch_cuda(), "tms_hook": fa.tms_hook(mapped=libs.get("torch_memory_saver", [])),
            "ray_gpu_ids": fa.ray_gpu_ids()}


def ray_context() -> Optional[Dict[str, Any]]:
    ray = sys.modules.get("ray")
    if ray is None:
        return None
    try:
        if not ray.is_initialized():
            return None
        ctx = ray.get_runtime_context()
        out = {"job_id": ctx.get_job_id(), "node_id": ctx.get_node_id(), "worker_id": ctx.get_worker_id(),
               "actor_id": ctx.get_actor_id()}
    except Exception:
        return None
    try:
        with open("/proc/self/cmdline", "rb") as f:
            title = f.read().split(b"\0")[0].decode(errors="replace")
        if title.startswith("ray::") and out.get("actor_id"):
            out["actor_class"] = title[5:].split(".")[0]
        out["proctitle"] = title[:200]
    except OSError:
        pass
    try:
        out["actor_name"] = ctx.get_actor_name() if out.get("actor_id") else None
    except Exception:
        pass
    return out


def main_stack_summary() -> Dict[str, Any]:
    """The main thread's innermost frame, and the torch.distributed function it is inside, if any."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    out: Dict[str, Any] = {}
    if frame is None:
        return out
    out["frame"] = f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}"
    f = frame
    while f is not None:
        fn = f.f_code.co_filename.replace("\\", "/")
        if "/torch/distributed/" in fn and not f.f_code.co_name.startswith("_") and f.f_code.co_name != "wrapper":
            out["collective"] = f.f_code.co_name
        f = f.f_back
    return out


def exception_info(exc: BaseException) -> Dict[str, Any]:
    from envbuild.redact import scrub_text

    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if len(tb) > TRACEBACK_MAX:
        tb = tb[:TRACEBACK_MAX // 4] + "\n...\n" + tb[-TRACEBACK_MAX * 3 // 4:]
    return {"type": f"{type(exc).__module__}.{type(exc).__qualname__}", "message": scrub_text(str(exc))[:4000],
            "traceback": scrub_text(tb)}


class _NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def gpu_memory() -> Dict[str, Any]:
    """{"gpus": [{"index", "free", "used", "total"}]} from NVML, or {"error": why}: no CUDA context is made."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as exc:
        return {"error": f"no NVML: {exc}"[:200]}
    try:
        if nvml.nvmlInit_v2() != 0:
            return {"error": "nvmlInit failed"}
        count = ctypes.c_uint(0)
        nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
        visible = _visible_indices(count.value)
        gpus = []
        for i in visible:
            handle = ctypes.c_void_p()
            if nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != 0:
                continue
            mem = _NvmlMemory()
            if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)) == 0:
                gpus.append({"index": i, "free": mem.free, "used": mem.used, "total": mem.total})
        nvml.nvmlShutdown()
        return {"gpus": gpus}
    except Exception as exc:
        return {"error": repr(exc)[:200]}


def _visible_indices(count: int) -> List[int]:
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return list(range(count))
    out = []
    for part in cvd.split(","):
        part = part.strip()
        if part.isdigit() and int(part) < count:
            out.append(int(part))
    return out


def parse_kmsg(raw: str, boot_time: float) -> Optional[Dict[str, Any]]:
    """One /dev/kmsg record ("pri,seq,usec,flags;text") as {"seq", "t", "text"}; None for other lines."""
    head, sep, text = raw.partition(";")
    if not sep:
        return None
    fields = head.split(",")
    if len(fields) < 3 or not fields[1].isdigit() or not fields[2].isdigit():
        return None
    return {"seq": int(fields[1]), "t": round(boot_time + int(fields[2]) / 1e6, 3), "text": text.rstrip("\n")}


def read_kmsg(path: str = "/dev/kmsg") -> List[Dict[str, Any]]:
    """Every record the kernel still keeps, non-blocking; raises OSError where /dev/kmsg is not readable."""
    with open("/proc/uptime") as f:
        boot = time.time() - float(f.read().split()[0])
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    out = []
    try:
        while True:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == 32:  # EPIPE: a record was overwritten while reading; go on
                    continue
                raise
            if not chunk:
                break
            rec = parse_kmsg(chunk.decode(errors="replace"), boot)
            if rec is not None:
                out.append(rec)
    finally:
        os.close(fd)
    return out


def kmsg_around(t: float, host_dir: str) -> Dict[str, Any]:
    """The NVRM/Xid lines within KMSG_WINDOW_S of t; appended to <host>/kmsg.jsonl (deduplicated by seq)."""
    try:
        records = read_kmsg()
    except OSError as exc:
        return {"error": f"/dev/kmsg: {exc.strerror or exc}", "lines": []}
    lines = [r for r in records if _XID.search(r["text"]) and abs(r["t"] - t) <= KMSG_WINDOW_S][-KMSG_MAX_LINES:]
    path = os.path.join(host_dir, "kmsg.jsonl")
    seen = set()
    try:
        with open(path) as f:
            for line in f.readlines()[-2000:]:
                try:
                    seen.add(json.loads(line)["seq"])
                except (ValueError, KeyError, TypeError):
                    pass
    except OSError:
        pass
    new = [r for r in lines if r["seq"] not in seen]
    if new:
        with open(path, "a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in new))
    return {"lines": lines, "window_s": KMSG_WINDOW_S}
