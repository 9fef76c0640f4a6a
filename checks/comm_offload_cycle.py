"""Offload/resume probe: pause and resume model-sized GPU memory K times while NCCL communicators live on.

What slime does every step with --offload: torch_memory_saver (TMS) unmaps the weights' physical memory
(pause), the rollout engine uses the GPU, then TMS maps fresh memory at the same addresses and restores
the bytes (resume); the NCCL communicators created before must still work after. slime #1305 died with
999 right after wake_up (THUDM/slime #1305; causes M3, M5, C9 of envbuild/knowledge/causes.toml).

Backends: "tms" (torch_memory_saver, preload hook: the payload re-executes itself with LD_PRELOAD set to
the hook for torch's CUDA major, the way TMS's own configure_subprocess() does for children) or "cumem"
(this probe's own cuMemUnmap/cuMemRelease + cuMemCreate/cuMemMap at the same virtual addresses, with a
pinned host backup) when TMS is absent or --backend cumem is asked.

Every cycle: free memory before/after pause (mem_get_info) vs the region size, data compared bit-exact
after resume, an all_reduce on the world group and on a subgroup created before the first pause, compared
exactly. Exit: os._exit after the result is written, because TMS's torch hook mode exits 1 in interpreter
teardown (measured on the lent 2xH200, 2026-11-29); the default process group is destroyed first.

Args: --mode quick|full  --backend auto|tms|cumem  --hook preload|torch; `--print-start-env ARGS` prints, as JSON, the
variables a rank of ARGS starts with (re-exec'd with), without importing torch.
"""
from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import sys
import time
from typing import Any, Dict, List, Optional

from _common import WARM_IMPORT_T_VAR
from _harness import Probe, exact_fill, exact_sum, mismatches, parse_mode, word_pattern

# Region per mode. A pause's time is torch_memory_saver pinning a fresh host shadow (cudaMallocHost at 2-3 GB/s: TMS
# 0.0.10 frees it at every resume unless TMS_RETAIN_CPU_BACKUP is set, and slime does not set it), so it grows with
# the bytes and nothing else: 0.69-1.05 s per pause for 2 GiB in quick (docs/gpu-runs/s7), 2.8-4.2 s for 8 GiB in
# full (doctor-full-1gpu-s5.json: 31 of the check's 44 s). What the check judges does not grow with them: the share
# released (whole cuMem chunks), every word back, the collectives after each resume, free memory over the cycles
# (an eighth of the region: DRIFT_FRACTION). So both modes pause 0.5-2 GiB, slime's way (CPU backup, shadow re-pinned every cycle), and
# full keeps its 8 allocations and 10 cycles; the train step (train.moe_step) moves the large volumes. Quick's
# region went from 4 x 256 MiB to 4 x 128 MiB in session 11 (0.4 s of its 0.53 s per cycle was the pause, issue 26's
# 15 s goal): still 256 whole 2 MiB chunks released, every word compared, three cycles.
# Free memory may fall by at most this share of the region from the second cycle to the last: 256 MiB of full's 2 GiB
# (an absolute 256 MiB before session 11, which a halved quick region would have halved the check's grip on);
# healthy runs drift 0-2 MiB (docs/gpu-runs/s10-doctor, s11).
DRIFT_FRACTION = 1 / 8
SIZES = {"quick": {"tensors": 4, "tensor_bytes": 128 << 20, "cycles": 3},
         "full": {"tensors": 8, "tensor_bytes": 256 << 20, "cycles": 10}}
RELEASE_FRACTION = 0.90  # at least this share of the region must come back on pause (see docs/checks-comm.md)
REEXEC_FLAG = "ENVBUILD_TMS_PRELOADED"
OPTIONS = {"backend": ("auto", "tms", "cumem"), "hook": ("preload", "torch")}  # first = default


def tms_preload_path() -> Optional[str]:
    """The TMS preload hook for torch's CUDA major, found without importing torch or TMS (this runs before
    the re-exec, and importing torch first would make the preload pointless)."""
    tms = importlib.util.find_spec("torch_memory_saver")
    torch_spec = importlib.util.find_spec("torch")
    if tms is None or tms.origin is None or torch_spec is None or torch_spec.origin is None:
        return None
    version_py = os.path.join(os.path.dirname(torch_spec.origin), "version.py")
    try:
        text = open(version_py, encoding="utf-8").read()
    except OSError:
        return None
    m = re.search(r"^cuda(?:\s*:\s*[^=]+)?\s*=\s*['\"](\d+)", text, re.M)
    if not m:
        return None
    pkg_dir = os.path.dirname(tms.origin)
    for base in (pkg_dir, os.path.dirname(pkg_dir)):
        found = glob.glob(os.path.join(base, f"torch_memory_saver_hook_mode_preload_cu{m.group(1)}.*.so"))
        if len(found) == 1:
            return found[0]
    return None


def _wheel_cudart_dir(hook: str) -> Optional[str]:
    """The nvidia-* wheel folder holding libcudart.so.<major> for the hook's CUDA major, if installed."""
    m = re.search(r"_cu(\d+)\.", os.path.basename(hook))
    spec = importlib.util.find_spec("nvidia")
    if not m or spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        for pattern in (f"cu{m.group(1)}/lib/libcudart.so.{m.group(1)}",
                        f"cuda_runtime/lib/libcudart.so.{m.group(1)}"):
            found = glob.glob(os.path.join(base, pattern))
            if found:
                return os.path.dirname(found[0])
    return None


def preload_env() -> Dict[str, str]:
    """The variables this payload re-executes itself with (the TMS preload hook in LD_PRELOAD, the wheel's
    libcudart beside it), {} when it runs as it is. Found without importing torch or TMS."""
    args = parse_mode(**OPTIONS)
    if os.environ.get(REEXEC_FLAG) or args.backend == "cumem" or args.hook != "preload":
        return {}
    if "torch_memory_saver" in os.environ.get("LD_PRELOAD", ""):
        return {}
    hook = tms_preload_path()
    if hook is None:
        return {}
    env = {"LD_PRELOAD": hook + (":" + os.environ["LD_PRELOAD"] if os.environ.get("LD_PRELOAD") else "")}
    # The hook needs libcudart.so.<major> before torch is imported: offer the copy torch's wheels ship.
    cudart_dir = _wheel_cudart_dir(hook)
    if cudart_dir:
        old = os.environ.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = cudart_dir + (":" + old if old else "")
    env[REEXEC_FLAG] = "1"
    return env


def maybe_reexec_with_preload() -> None:
    """Re-exec this payload with preload_env() (same pid, so the launcher keeps it). A launch that already
    carries those variables (the check passes them: envbuild/doctor/checks/comm_offload_cycle.py, so a warm
    rank can have imported torch under the hook) runs on as it is."""
    extra = preload_env()
    if extra:
        env = {**os.environ, **extra}
        env.pop(WARM_IMPORT_T_VAR, None)  # the new image imports torch itself: no warm import to report
        os.execve(sys.executable, [sys.executable, "-u"] + sys.argv, env)


class CuMemRegion:
    """The probe's own pausable region: chunks of cuMem physical memory mapped into one reserved VA range,
    exposed to torch as int32 tensors at fixed addresses (as TMS does)."""

    def __init__(self, torch, drv, device: int, chunk_bytes: int, chunks: int):
        self.torch, self.drv, self.device = torch, drv, device
        g = drv.granularity(device)
        self.chunk = (chunk_bytes + g - 1) // g * g
        self.n = chunks
        self.base = drv.reserve(self.chunk * chunks)
        self.handles: List[Optional[int]] = [None] * chunks
        self._map_all()
        self.tensors = [self._tensor(k) for k in range(chunks)]
        self.backup = None

    def _map_all(self) -> None:
        for k in range(self.n):
            h = self.drv.create(self.device, self.chunk)
            self.drv.map(self.base + k * self.chunk, self.chunk, h)
            self.handles[k] = h
        self.drv.set_access(self.base, self.chunk * self.n, [self.device])

    def _tensor(self, k: int):
        region = self

        class _View:
            __cuda_array_interface__ = {"shape": (region.chunk // 4,), "typestr": "<i4",
                                        "data": (region.base + k * region.chunk, False), "version": 3,
                                        "strides": None}

        return self.torch.as_tensor(_View(), device=f"cuda:{self.device}")

    def pause(self) -> None:
        torch = self.torch
        torch.cuda.synchronize(self.device)
        if self.backup is None:
            self.backup = [torch.empty(self.chunk // 4, dtype=torch.int32, pin_memory=True) for _ in range(self.n)]
        for t, b in zip(self.tensors, self.backup):
            b.copy_(t)
        torch.cuda.synchronize(self.device)
        for k in range(self.n):
            self.drv.unmap(self.base + k * self.chunk, self.chunk)
            self.drv.release(self.handles[k])
            self.handles[k] = None

    def resume(self) -> None:
        self._map_all()
        for t, b in zip(self.tensors, self.backup):
            t.copy_(b)
        self.torch.cuda.synchronize(self.device)


def main(p: Probe) -> None:
    args = parse_mode(**OPTIONS)
    mode, want, hook = args.mode, args.backend, args.hook
    import torch

    size = SIZES[mode]
    region_bytes = size["tensors"] * size["tensor_bytes"]
    with p.phase("init"):
        dist = p.init_dist()
        dev = p.device
        world = dist.group.WORLD
        sub = dist.new_group(ranks=list(range(p.world_size)))
        backend = want
        if backend == "auto":
            backend = "tms" if importlib.util.find_spec("torch_memory_saver") else "cumem"
        p.evidence.update({"mode": mode, "backend": backend, "hook_mode": hook if backend == "tms" else None,
                           "ld_preload": os.environ.get("LD_PRELOAD"), "region_bytes": region_bytes,
                           "nccl_version": ".".join(map(str, torch.cuda.nccl.version())),
                           "nccl_cumem_enable": os.environ.get("NCCL_CUMEM_ENABLE")})
    with p.phase("collective before pause"):
        _check_collectives(torch, dist, p, [("world", world), ("subgroup", sub)], dev, salt=0)
    p.settle()  # free memory is read around every pause: an earlier probe's context going away would move it
    with p.phase("allocate region"):
        if backend == "tms":
            from torch_memory_saver import torch_memory_saver as tms

            p.evidence["tms_version"] = _dist_version("torch_memory_saver")
            if hook == "torch":
                tms.hook_mode = "torch"
            with tms.region(tag="weights", enable_cpu_backup=True):
                tensors = [torch.empty(size["tensor_bytes"] // 4, dtype=torch.int32, device=dev)
                           for _ in range(size["tensors"])]
            for k, t in enumerate(tensors):  # filled outside the region: temporaries stay unpausable
                t.copy_(word_pattern(t.numel(), 0x7000 + k, dev))
            pause, resume = (lambda: tms.pause("weights")), (lambda: tms.resume("weights"))
        else:
            from _cudrv import Driver

            region = CuMemRegion(torch, Driver(), dev.index, size["tensor_bytes"], size["tensors"])
            tensors = region.tensors
            for k, t in enumerate(tensors):
                t.copy_(word_pattern(t.numel(), 0x7000 + k, dev))
            pause, resume = region.pause, region.resume
        torch.cuda.synchronize(dev)
    cycles: List[Dict[str, Any]] = []
    problems: List[str] = []
    causes: List[str] = []
    for c in range(size["cycles"]):
        rec: Dict[str, Any] = {"cycle": c}
        with p.phase(f"pause {c}"):
            free_before = _free_bytes(torch, dev)
            t0 = time.perf_counter()
            pause()
            torch.cuda.synchronize(dev)
            rec["pause_s"] = round(time.perf_counter() - t0, 4)
            free_paused = _free_bytes(torch, dev)
            rec["released_bytes"] = free_paused - free_before
        with p.phase(f"resume {c}"):
            t0 = time.perf_counter()
            resume()
            torch.cuda.synchronize(dev)
            rec["resume_s"] = round(time.perf_counter() - t0, 4)
            rec["free_after_resume"] = _free_bytes(torch, dev)
        with p.phase(f"verify {c}"):
            bad = sum(mismatches(t, word_pattern(t.numel(), 0x7000 + k, dev))
                      for k, t in enumerate(tensors))
            rec["mismatched_words"] = bad
        with p.phase(f"collective after resume {c}"):
            rec["collectives"] = _check_collectives(torch, dist, p, [("world", world), ("subgroup", sub)], dev,
                                                    salt=c + 1)
        cycles.append(rec)
        frac = rec["released_bytes"] / region_bytes
        if bad:
            problems.append(f"cycle {c}: {bad} words differ after resume")
            causes += ["M5", "C9"]
        if frac < RELEASE_FRACTION:
            problems.append(f"cycle {c}: pause released {rec['released_bytes'] / 2**30:.2f} of "
                            f"{region_bytes / 2**30:.2f} GiB ({frac:.0%})")
            causes += ["C9"]
        if rec["collectives"]["mismatched"]:
            problems.append(f"cycle {c}: collective after resume wrong ({rec['collectives']['mismatched']} "
                            "elements)")
            causes += ["M5"]
        if problems:
            break
    # Growth is judged from the second cycle on: the first one pays one-off costs (pinned backup, NCCL
    # buffers touched by the first collective after a resume).
    first = cycles[1] if len(cycles) > 2 else cycles[0]
    drift = first["free_after_resume"] - cycles[-1]["free_after_resume"]
    p.evidence.update({"cycles": cycles, "free_drift_bytes": drift})
    released = min(c["released_bytes"] for c in cycles)
    p.metric("released_fraction", round(released / region_bytes, 4), "ratio",
             expect=f">= {RELEASE_FRACTION}", source="docs/checks-comm.md#commoffload_cycle")
    p.metric("resume_s_max", max(c["resume_s"] for c in cycles), "s")
    p.metric("pause_s_max", max(c["pause_s"] for c in cycles), "s")
    if drift > region_bytes * DRIFT_FRACTION:
        problems.append(f"free memory fell by {drift / 2**20:.0f} MiB from the first to the last cycle (more than "
                        f"{DRIFT_FRACTION:.1%} of the {region_bytes / 2**20:.0f} MiB region)")
        causes += ["M4"]
    status = "fail" if problems else "pass"
    summary = "; ".join(problems) if problems else (
        f"{len(cycles)} pause/resume cycles of {region_bytes / 2**30:.1f} GiB ({backend}"
        + (f", {hook} hook" if backend == "tms" else "") + f"): released {released / region_bytes:.0%}, "
        "data exact, collectives exact after every resume")
    p.finish(status, summary, causes=sorted(set(causes)))
    _exit_now(dist)


def _free_bytes(torch, dev) -> int:
    """Free device memory once torch's cache is emptied, so cached temporaries do not read as a leak."""
    torch.cuda.synchronize(dev)
    torch.cuda.empty_cache()
    return torch.cuda.mem_get_info(dev)[0]


def _check_collectives(torch, dist, p, groups, dev, salt: int) -> Dict[str, Any]:
    """all_reduce of an exact integer fill on each group; returns mismatching element counts."""
    out: Dict[str, Any] = {"mismatched": 0}
    n = 1 << 20
    for name, g in groups:
        size = dist.get_world_size(g)
        rank_in = dist.get_rank(g)
        t = exact_fill(n, rank_in, size, torch.float32, dev, salt=salt)
        dist.all_reduce(t, group=g)
        bad = mismatches(t, exact_sum(n, size, torch.float32, dev, salt=salt))
        out[name] = bad
        out["mismatched"] += bad
    return out


def _dist_version(name: str) -> Optional[str]:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


def _exit_now(dist) -> None:
    """Destroy NCCL cleanly, then leave without interpreter teardown (TMS hooks and CUDA can crash in it)."""
    try:
        dist.destroy_process_group()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--print-start-env"]:  # the check asks which variables the ranks must start with
        del sys.argv[1]
        print(json.dumps(preload_env()))
        sys.exit(0)
    maybe_reexec_with_preload()
    Probe.run(main)
