"""Payload of gpu.basic: can this process drive its GPU at all, with this env's torch?

One rank per GPU. Steps, each its own phase so a hang names it:
  cuinit   cuInit(0) and cuDriverGetVersion through ctypes on the libcuda the process loads (a 999 here
           is envbuild/knowledge/causes.toml D1/D4/D5 territory, before torch is involved);
  context  torch creates the primary context on the device;
  kernel   a tiny elementwise kernel whose result is checked exactly;
  memory   allocate --mem-mib, write a pattern, read it back, free, and see the memory come back;
  arch     the device's SM (compute capability) in torch.cuda.get_arch_list(): sm_XY natively, or a
           compute_XY PTX that the driver can JIT (slower first start), else torch cannot run here (D10).
"""
from __future__ import annotations

import argparse
import ctypes
import time

from _common import library_name, mapped_paths
from _harness import Probe

CUDA_ERROR_NAMES = {0: "CUDA_SUCCESS", 3: "CUDA_ERROR_NOT_INITIALIZED", 34: "CUDA_ERROR_STUB_LIBRARY",
                    35: "CUDA_ERROR_INSUFFICIENT_DRIVER", 100: "CUDA_ERROR_NO_DEVICE",
                    101: "CUDA_ERROR_INVALID_DEVICE", 803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
                    804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", 999: "CUDA_ERROR_UNKNOWN"}
# cuInit's answer -> causes of envbuild/knowledge/causes.toml
CUINIT_CAUSES = {34: ["C7"], 35: ["C6", "D9"], 803: ["C8", "D2"], 804: ["C8"], 999: ["D1", "D4", "D5", "D2"],
                 100: ["D5"], 3: ["D1", "D5"]}


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mem-mib", type=int, default=1024)
    return ap.parse_args()


def cu_init(p: Probe) -> int:
    """cuInit(0) on libcuda.so.1; records the driver version and the library path actually mapped."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        p.evidence["cuinit"] = f"libcuda.so.1 cannot be loaded: {exc}"
        return -1
    rc = int(lib.cuInit(0))
    ver = ctypes.c_int(0)
    if rc == 0 and lib.cuDriverGetVersion(ctypes.byref(ver)) == 0:
        p.evidence["cuda_driver_version"] = ver.value
    p.evidence["cuinit"] = CUDA_ERROR_NAMES.get(rc, f"CUresult {rc}")
    try:
        with open("/proc/self/maps") as fh:
            paths = sorted(p for p in mapped_paths(fh.read()) if library_name(p).startswith("libcuda.so"))
        p.evidence["libcuda"] = paths
    except OSError:
        pass
    return rc


def main(p: Probe) -> None:
    args = parse_args()
    with p.phase("cuinit"):
        rc = cu_init(p)
    if rc == -1:
        p.finish("fail", p.evidence["cuinit"], causes=["D5"])
        return
    if rc != 0:
        p.finish("fail", f"cuInit failed: {CUDA_ERROR_NAMES.get(rc, rc)} ({rc})", causes=CUINIT_CAUSES.get(rc, []))
        return
    import torch

    with p.phase("context"):
        t0 = time.perf_counter()
        dev = p.cuda_device()
        torch.cuda.init()
        torch.zeros(1, device=dev)
        p.metric("context_s", round(time.perf_counter() - t0, 3), "s")
        cap = torch.cuda.get_device_capability(dev)
        p.evidence.update(device=torch.cuda.get_device_name(dev), capability=f"{cap[0]}.{cap[1]}",
                          torch=torch.__version__, torch_cuda=torch.version.cuda,
                          visible=torch.cuda.device_count())
    problems, causes = [], []
    with p.phase("kernel"):
        n_el = 1 << 20
        x = torch.arange(n_el, device=dev, dtype=torch.int64)
        y = int((x * 2 + 1).sum().item())  # the first n odd numbers sum to n^2, exactly in int64
        want = n_el * n_el
        if y != want:
            problems.append(f"tiny kernel gave {y}, expected {want}")
            causes += ["M5", "D3"]
    with p.phase("memory"):
        torch.cuda.synchronize(dev)
        free0, total = torch.cuda.mem_get_info(dev)
        n = args.mem_mib * (1 << 20) // 4
        t0 = time.perf_counter()
        buf = torch.empty(n, device=dev, dtype=torch.int32)
        buf.copy_(torch.arange(n, device=dev, dtype=torch.int32))
        bad = int((buf != torch.arange(n, device=dev, dtype=torch.int32)).sum().item())
        del buf
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        free1, _ = torch.cuda.mem_get_info(dev)
        p.metric("alloc_check_free_s", round(time.perf_counter() - t0, 3), "s")
        p.metric("free_mib", free1 // (1 << 20), "MiB")
        p.evidence.update(total_mib=total // (1 << 20), free_before_mib=free0 // (1 << 20),
                          free_after_mib=free1 // (1 << 20))
        if bad:
            problems.append(f"{bad} of {n} int32 words read back wrong from a {args.mem_mib} MiB buffer")
            causes += ["D3"]
        if free0 - free1 > 64 * (1 << 20):
            problems.append(f"{(free0 - free1) >> 20} MiB did not come back after free + empty_cache")
    with p.phase("arch"):
        arches = torch.cuda.get_arch_list()
        sm = f"sm_{cap[0]}{cap[1]}"
        p.evidence["arch_list"] = arches
        ptx = [a for a in arches if a.startswith("compute_") and int(a.split("_")[1][:2]) <= cap[0] * 10 + cap[1]]
        if sm in arches:
            arch_note = f"{sm} in torch's arch list"
        elif ptx:
            arch_note = f"{sm} not built natively; PTX {ptx[-1]} will be JIT-compiled (slow first start)"
            p.evidence["arch_warning"] = arch_note
        else:
            problems.append(f"{sm} not in torch's arch list {arches}: no kernel image for this GPU")
            causes += ["D10"]
            arch_note = ""
    name = p.evidence.get("device", "GPU")
    if problems:
        p.finish("fail", f"{name}: " + "; ".join(problems), causes=sorted(set(causes)))
    elif "arch_warning" in p.evidence:
        p.finish("warn", f"{name}: {arch_note}", causes=["D10"])
    else:
        p.finish("pass", f"{name} (SM {cap[0]}.{cap[1]}): cuInit, context, kernel, {args.mem_mib} MiB "
                         f"alloc/free ok; {arch_note}")


if __name__ == "__main__":
    Probe.run(main)
