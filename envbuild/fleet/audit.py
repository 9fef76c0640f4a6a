"""What a process of a Ray job really has: the CUDA/NCCL libraries it mapped, the variables that steer them,
the user-mode driver against the kernel module, the torch_memory_saver hook slime would preload.

Why inside the actor: Ray workers inherit the `ray start` shell and the job's runtime_env, not the shell a
user types `envbuild doctor` in (research/error999.md C1, C2, C4). Two uses:

- `envbuild doctor --ray ADDRESS --audit` runs `audit_process()` in a Ray worker on every node and compares
  each with the driver's shell and with the others (`compare()`).
- A slime user calls it in their own actors, where the real communicator lives:

      from envbuild.fleet.audit import audit_actor
      audit_actor("/shared/audit", group="train")   # in each actor, after torch / NCCL init

  It writes `<dir>/<host>-<pid>.json`, an envbuild.report v1 whose results are the audit's checks; then
  `envbuild report merge /shared/audit` joins them and checks that every member of a group agrees.

Secrets: only variables under the prefixes below are read at all, and only the names in VALUE_ALLOWLIST keep
their value; any other matching variable is listed with the value "<redacted>" (NCCL_IB_* may hold hostnames,
*_TOKEN never gets here).
"""
from __future__ import annotations

import ctypes
import datetime as _dt
import glob
import os
import re
import socket
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from envbuild.redact import REDACTED, VALUE_ALLOWLIST

PREFIXES = ("NCCL_", "CUDA_", "PYTORCH_", "TMS_", "LD_", "SGLANG_", "RAY_EXPERIMENTAL_NOSET_", "NVTE_", "TORCH_NCCL_")
LIBS = {"libcuda": "libcuda.so", "libnccl": "libnccl.so", "libcudart": "libcudart.so", "libnvidia-ml": "libnvidia-ml.so",
        "torch_memory_saver": "torch_memory_saver"}
# What every member of one communicator must agree on (research/error999.md C4, M1, N1): NCCL's defaults differ
# from slime's and sglang's, and a mismatch shows up as a hang or a Cuda failure mid-collective.
AGREE = ("NCCL_CUMEM_ENABLE", "NCCL_CUMEM_HOST_ENABLE", "NCCL_NVLS_ENABLE", "NCCL_ALGO")


def environment(environ: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The variables that steer CUDA/NCCL/torch, values kept only for the allowlist."""
    env = os.environ if environ is None else environ
    return {k: (v if k in VALUE_ALLOWLIST else REDACTED) for k, v in sorted(env.items()) if k.startswith(PREFIXES)}


def mapped_libraries(maps_text: Optional[str] = None) -> Dict[str, List[str]]:
    """Paths of the CUDA/NCCL libraries this process has mapped (/proc/self/maps), per library."""
    if maps_text is None:
        try:
            with open("/proc/self/maps") as f:
                maps_text = f.read()
        except OSError:
            return {}
    out: Dict[str, set] = {k: set() for k in LIBS}
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        path = parts[5].strip()
        base = os.path.basename(path)
        for key, stem in LIBS.items():
            if base.startswith(stem) and ".so" in base:
                out[key].add(path)
    return {k: sorted(v) for k, v in out.items() if v}


def kernel_module_version(root: str = "/") -> Optional[str]:
    """The NVIDIA kernel module's version from /proc/driver/nvidia/version, None without the driver."""
    try:
        with open(os.path.join(root, "proc/driver/nvidia/version")) as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"Kernel Module(?: for [^ ]+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else None


def driver_api_version(libcuda_paths: Sequence[str]) -> Optional[int]:
    """cuDriverGetVersion() of the libcuda this process uses (e.g. 12090); None when no libcuda loads.
    Reads a version number only: no cuInit, no context, nothing the GPU sees."""
    for name in list(libcuda_paths) + ["libcuda.so.1"]:
        try:
            lib = ctypes.CDLL(name)
            v = ctypes.c_int(0)
            if lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
                return v.value
        except (OSError, AttributeError):
            continue
    return None


def usermode_driver_version(libcuda_paths: Sequence[str]) -> Optional[str]:
    """The user-mode driver's version from the mapped libcuda's real file name (libcuda.so.580.159.04)."""
    for p in libcuda_paths:
        m = re.search(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$", os.path.realpath(p))
        if m:
            return m.group(1)
    return None


def tms_hook(environ: Optional[Dict[str, str]] = None, mapped: Sequence[str] = ()) -> Dict[str, Any]:
    """The torch_memory_saver hook this process preloads, and the one slime would pick (by existence, cu13
    first), with the CUDA major each is built for."""
    env = os.environ if environ is None else environ
    preloaded = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if "torch_memory_saver" in p]
    files: List[str] = []
    try:
        import importlib.util

        spec = importlib.util.find_spec("torch_memory_saver")
        if spec is not None and spec.submodule_search_locations:
            for d in spec.submodule_search_locations:
                files += glob.glob(os.path.join(d, "*torch_memory_saver*.so")) + \
                    glob.glob(os.path.join(os.path.dirname(d), "torch_memory_saver*.so"))
    except (ImportError, ValueError):
        pass
    files = sorted(set(files))
    pick = next((f for f in files if "cu13" in os.path.basename(f)), None) or \
        next((f for f in files if "cu12" in os.path.basename(f)), None)
    used = (preloaded or list(mapped) or [None])[0]
    return {"preloaded": preloaded, "mapped": list(mapped), "files": files, "slime_pick": pick,
            "cuda_major": _cuda_major(used), "slime_pick_cuda_major": _cuda_major(pick)}


def _cuda_major(path: Optional[str]) -> Optional[int]:
    m = re.search(r"cu(1\d)", os.path.basename(path)) if path else None
    return int(m.group(1)) if m else None


def torch_cuda() -> Optional[str]:
    """torch.version.cuda if torch is already imported here (never imported for the audit)."""
    torch = sys.modules.get("torch")
    return getattr(getattr(torch, "version", None), "cuda", None) if torch is not None else None


def audit_process(group: Optional[str] = None) -> Dict[str, Any]:
    """Everything the audit reads, from this process, as one JSON-able dict."""
    libs = mapped_libraries()
    libcuda = libs.get("libcuda", [])
    return {
        "host": socket.gethostname(), "pid": os.getpid(), "python": sys.executable, "group": group,
        "env": environment(), "libraries": libs, "kernel_module": kernel_module_version(),
        "usermode_driver": usermode_driver_version(libcuda), "cuda_driver_api": driver_api_version(libcuda),
        "torch_cuda": torch_cuda(), "tms_hook": tms_hook(mapped=libs.get("torch_memory_saver", [])),
        "ray_gpu_ids": ray_gpu_ids(),
    }


def ray_gpu_ids() -> Optional[List[str]]:
    """The GPUs Ray assigned to this worker (it sets CUDA_VISIBLE_DEVICES to them), None outside a Ray worker."""
    ray = sys.modules.get("ray")  # never import ray here: a process that has not, is no Ray worker
    if ray is None:
        return None
    try:
        if not ray.is_initialized():
            return None
        return [str(g) for g in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])]
    except Exception:  # an older Ray without the accelerator API: unknown, and the variable is compared as is
        return None


def check_process(audit: Dict[str, Any], shell: Optional[Dict[str, Any]] = None):
    """The audit of one process as Results: libraries, driver, and (given the driver's shell) the variables
    that differ between the shell the user sees and the process that runs."""
    from envbuild.report.model import Result, Status

    out = []
    libs = audit.get("libraries", {})
    bad = {k: v for k, v in libs.items() if len(v) > 1}
    odd = [p for v in libs.values() for p in v if "/stubs/" in p or "/compat" in p]
    if bad or odd:
        out.append(Result("fleet.audit_libs", "stack", Status.FAIL if bad else Status.WARN,
                          "; ".join([f"{len(v)} copies of {k} mapped: {', '.join(v)}" for k, v in sorted(bad.items())]
                                    + [f"{p} is a stub or forward-compat library" for p in odd]),
                          evidence={"libraries": libs}, causes=["C1", "C2"],
                          remediation="keep one libcuda/libnccl on the worker's LD_LIBRARY_PATH: start Ray from a clean "
                                      "shell or set LD_LIBRARY_PATH in the job's runtime_env"))
    else:
        mapped = ", ".join(f"{k}={os.path.basename(v[0])}" for k, v in sorted(libs.items())) or "no CUDA library yet"
        out.append(Result("fleet.audit_libs", "stack", Status.PASS, f"one copy each mapped ({mapped})",
                          evidence={"libraries": libs}))
    km, um, api = audit.get("kernel_module"), audit.get("usermode_driver"), audit.get("cuda_driver_api")
    ev = {"kernel_module": km, "usermode_driver": um, "cuda_driver_api": api, "torch_cuda": audit.get("torch_cuda")}
    if km is None:
        out.append(Result("fleet.audit_driver", "stack", Status.SKIP, "no NVIDIA kernel module on this node "
                          "(/proc/driver/nvidia/version missing)", evidence=ev))
    elif um is not None and um != km:
        out.append(Result("fleet.audit_driver", "stack", Status.WARN,
                          f"the process uses user-mode driver {um} (libcuda) on kernel module {km}: forward-compat "
                          "libcuda, which Docker images enable and bare metal does not", evidence=ev, causes=["C1"],
                          remediation="use the host's libcuda (matching the kernel module) or the same cuda-compat "
                                      "everywhere; set it in the runtime_env, not a login shell"))
    else:
        tc = audit.get("torch_cuda")
        low = api is not None and tc and api < int(tc.split(".")[0]) * 1000 + int(tc.split(".")[1]) * 10
        out.append(Result("fleet.audit_driver", "stack", Status.FAIL if low else Status.PASS,
                          f"cuDriverGetVersion {api} below torch's CUDA {tc}: upgrade the driver" if low else
                          f"driver {km}, cuDriverGetVersion {api}", evidence=ev, causes=["C1"] if low else []))
    if shell is not None:
        mine, theirs = audit.get("env", {}), shell.get("env", {})
        diff = {k: {"shell": theirs.get(k), "process": mine.get(k)} for k in sorted(set(mine) | set(theirs))
                if mine.get(k) != theirs.get(k)}
        steering = {k: v for k, v in diff.items() if k.startswith(("NCCL_", "LD_", "PYTORCH_", "TMS_", "CUDA_"))}
        assigned = audit.get("ray_gpu_ids")
        by_ray = ""
        if assigned is not None and "CUDA_VISIBLE_DEVICES" in steering and \
                mine.get("CUDA_VISIBLE_DEVICES") == ",".join(assigned):
            # Ray itself sets it to the GPUs it gave the worker: expected, not a difference the user made
            del steering["CUDA_VISIBLE_DEVICES"]
            by_ray = f" (CUDA_VISIBLE_DEVICES={mine.get('CUDA_VISIBLE_DEVICES')}: the GPUs Ray assigned this worker)"
        out.append(Result("fleet.audit_env", "stack", Status.WARN if steering else Status.PASS,
                          (f"{len(steering)} variable(s) differ between your shell and the Ray worker: "
                           + ", ".join(steering) + by_ray) if steering else
                          "the Ray worker sees your shell's NCCL/CUDA/LD variables" + by_ray,
                          evidence={"differs": diff, "process_env": mine}, causes=["C4"] if steering else [],
                          remediation="set these in the job's runtime_env (env_vars) so every worker gets the same, "
                                      "or restart Ray from the shell you tested" if steering else None))
    return out


def compare(audits: Sequence[Dict[str, Any]]):
    """Results for a set of processes that share a communicator: they must agree on AGREE and on the
    torch_memory_saver hook's CUDA major."""
    from envbuild.report.model import Result, Status

    out = []
    by_group: Dict[str, List[Dict[str, Any]]] = {}
    for a in audits:
        by_group.setdefault(a.get("group") or "all", []).append(a)
    for group, members in sorted(by_group.items()):
        split: Dict[str, Dict[str, List[str]]] = {}
        for key in AGREE:
            values: Dict[str, List[str]] = {}
            for a in members:
                values.setdefault(str(a.get("env", {}).get(key, "<unset>")), []).append(f"{a.get('host')}:{a.get('pid')}")
            if len(values) > 1:
                split[key] = values
        majors: Dict[str, List[str]] = {}
        for a in members:
            hook = a.get("tms_hook") or {}
            major = hook.get("cuda_major") or hook.get("slime_pick_cuda_major")
            majors.setdefault(str(major), []).append(f"{a.get('host')}:{a.get('pid')}")
        if len(majors) > 1:
            split["torch_memory_saver hook CUDA major"] = majors
        if split:
            text = "; ".join(f"{k}: " + " vs ".join(f"{v} on {len(m)}" for v, m in sorted(vals.items()))
                             for k, vals in split.items())
            out.append(Result("fleet.audit_agree", "comm", Status.FAIL, f"group {group}: members disagree: {text}",
                              evidence={"group": group, "split": split}, causes=["C4", "M1", "N1"], subject=group,
                              remediation="set NCCL_CUMEM_ENABLE/NCCL_NVLS_ENABLE once in the job's runtime_env "
                                          "(slime and sglang both want 0) and install one torch_memory_saver build"))
        else:
            out.append(Result("fleet.audit_agree", "comm", Status.PASS,
                              f"group {group}: {len(members)} member(s) agree on {', '.join(AGREE)} and the hook",
                              evidence={"group": group}, subject=group))
    return out


def audit_actor(out_dir: str, group: Optional[str] = None, name: Optional[str] = None) -> str:
    """Audit this process (a slime actor) and write the result as an envbuild.report v1 into out_dir;
    returns the path. `envbuild report merge out_dir` joins the members and checks they agree."""
    from envbuild import __version__
    from envbuild.report.json_report import write_json
    from envbuild.report.model import Report, Result, Status

    t0 = time.monotonic()
    audit = audit_process(group=group)
    results = check_process(audit)
    results.append(Result("fleet.audit", "stack", Status.PASS, f"audit of pid {audit['pid']} on {audit['host']}"
                          + (f" (group {group})" if group else ""), evidence={"audit": audit}))
    node = name or f"{audit['host']}-{audit['pid']}"
    report = Report(host={"hostname": node, "source": f"audit_actor in pid {audit['pid']}", "kernel": None,
                          "captured_at": None}, gpus=[], results=results,
                    options={"mode": "audit", "group": group},
                    started_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    duration_s=round(time.monotonic() - t0, 3), envbuild_version=__version__)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{node}.json")
    write_json(report, path)
    return path


def audits_in(nodes) -> List[Dict[str, Any]]:
    """The audit dicts carried by node reports (the `fleet.audit` results), for compare() at merge time."""
    found = []
    for n in nodes:
        for r in n.results():
            if r.check_id == "fleet.audit" and isinstance(r.evidence.get("audit"), dict):
                found.append(r.evidence["audit"])
    return found


if __name__ == "__main__":  # `python -m envbuild.fleet.audit DIR [GROUP]`: audit this shell's process
    print(audit_actor(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
