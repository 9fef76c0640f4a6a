"""Stack probe: what CUDA/NCCL/cuDNN stack THIS interpreter really gets. Prints ONE JSON object on stdout.

Run by the python of the environment under test (`<env>/bin/python checks/stack_probe.py`), never
imported by envbuild. Standard library only; loads torch's native libraries when torch is installed
(checks/_torch_native.py, without running torch's Python package; `import torch` when that path cannot tell)
and still reports what it can without torch (reachable libraries, distributions, environment). The keys are
documented in envbuild/facts/stack.py.

Why a separate process: which libnccl/libcudart/libcuda a process maps depends on that interpreter's
RPATHs, LD_LIBRARY_PATH and import order, and a library once mapped cannot be unmapped. So the probe
(1) snapshots the environment variables, (2) loads torch's libraries and initialises CUDA and NCCL the way a
training process does, (3) reads /proc/self/maps. Meanwhile a thread takes the inventory that does not depend
on the maps: the versions of the *other* reachable copies (read in a child process so that they never enter
this process's maps), the distributions and the checkouts. `--gate PATH` holds the first CUDA call until PATH
exists (the doctor's NVML snapshot is taken meanwhile).

Never hangs: the CUDA/NCCL initialisation runs under a watchdog that, on timeout, prints whatever was
gathered (with the phase that hung) and exits; every subprocess has a timeout. Every part records its
own error instead of aborting the whole probe. phase_s in the JSON says where its seconds went.

envbuild runs it under its launcher (envbuild/doctor/launcher.py, through envbuild/doctor/stack_reader.py) like
every payload: then ENVBUILD_RUN_DIR is set and the probe also writes rank<k>.phase at every phase, rank<k>.json
(the same JSON, atomically) and rank<k>.stacks on SIGUSR1. The environment it records is the user's: the
variables the launcher set are undone first (ENVBUILD_LAUNCHER_SET, checks/_common.py).
"""
import ctypes
import faulthandler
import json
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from typing import List, Optional

import _early_init as early_init
import _torch_native as native
from _common import (LOADER_TRACE, RESOLVED_INIT, cudnn_version_string, cuda_version_string, family_of, mapped_paths,
                     nccl_version_string, user_environ)

PAYLOAD_VERSION = 1
LIB_FAMILIES = ("libnccl", "libcudart", "libcudnn", "libcuda", "libnvidia-ml")
# Libraries whose reachable copies are inventoried (libnvidia-ml only matters when mapped).
REACHABLE_FAMILIES = ("libnccl", "libcudart", "libcudnn", "libcuda")
ENV_PREFIXES = ("NCCL_", "CUDA_", "PYTORCH_", "TORCH_NCCL_", "TORCH_SYMM_MEM_", "TMS_", "SGLANG_", "NVTE_",
                "RAY_EXPERIMENTAL_NOSET_", "VLLM_NCCL_", "CUBLAS_", "NVSHMEM_")
ENV_NAMES = ("LD_PRELOAD", "LD_LIBRARY_PATH", "CONDA_PREFIX", "VIRTUAL_ENV", "RAY_USE_UVLOOP")
NCCL_VERSION_RE = re.compile(rb"NCCL version (\d+\.\d+\.\d+)([^\x00\s]*)")
SUBPROCESS_TIMEOUT_S = 20.0
# The phase in which the probe waits for the init beside the trace (checks/_early_init.py): no bound of its own, the
# probe's init watchdog (--init-timeout) names a hang there with the child's phase.
BESIDE = "init beside the trace"
# Held by the thread that answers (main's emit): once the watchdog holds it, the main thread starts nothing more.
ANSWERING = threading.Lock()
CHILD_ENV = {}  # the environment at the probe's start, for the processes the inventory runs (filled by main)


def path_flags(path):
    """Markers that matter for C7/C8: a stub libcuda or a forward-compat (cuda-compat) libcuda."""
    low = path.lower()
    parts = low.split("/")
    return {"stub": "stubs" in parts, "compat": ("compat" in parts) or ("cuda-compat" in low)}


def version_from_filename(path):
    """'libcuda.so.580.159.04' -> '580.159.04'; 'libcudart.so.12.9.79' -> '12.9.79'; None if only a major."""
    m = re.search(r"\.so\.(\d+(?:\.\d+)+)$", os.path.basename(path))
    return m.group(1) if m else None


def nccl_string_version(path):
    """The 'NCCL version X.Y.Z+cudaA.B' string compiled into libnccl (no dlopen needed)."""
    import mmap

    with open(path, "rb") as fh:
        try:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # empty file
            return None
        try:
            idx = mm.find(b"NCCL version ")
            if idx < 0:
                return None
            m = NCCL_VERSION_RE.match(mm[idx: idx + 80])
            return (m.group(1) + m.group(2)).decode("ascii", "replace") if m else None
        finally:
            mm.close()


def api_version(family, handle):
    """Ask a loaded library for its version through its C API. Returns (raw code, decoded string, error)."""
    out = ctypes.c_int(0)
    if family == "libnccl":
        rc = handle.ncclGetVersion(ctypes.byref(out))
        return (out.value, nccl_version_string(out.value), None) if rc == 0 else (None, None, "ncclGetVersion returned %d" % rc)
    if family == "libcudart":
        rc = handle.cudaRuntimeGetVersion(ctypes.byref(out))
        return (out.value, cuda_version_string(out.value), None) if rc == 0 else (None, None, "cudaRuntimeGetVersion returned %d" % rc)
    if family == "libcuda":
        rc = handle.cuDriverGetVersion(ctypes.byref(out))
        if rc == 0:
            return out.value, cuda_version_string(out.value), None
        return None, None, "cuDriverGetVersion returned %d%s" % (rc, " (CUDA_ERROR_STUB_LIBRARY: a stub libcuda)" if rc == 34 else "")
    if family == "libcudnn":
        handle.cudnnGetVersion.restype = ctypes.c_size_t
        v = int(handle.cudnnGetVersion())
        return v, cudnn_version_string(v), None
    return None, None, "no version API for %s" % family


def version_of_file(family, path):
    """Version of one library file, read without mapping it here when possible (NCCL: the string)."""
    info = {}
    fv = version_from_filename(os.path.realpath(path))
    if fv:
        info["file_version"] = fv
    if family == "libnccl":
        try:
            s = nccl_string_version(path)
            if s:
                info["version"] = s.split("+")[0]
                info["version_string"] = s
                info["version_method"] = "NCCL version string"
        except OSError as exc:
            info["error"] = "cannot read: %s" % exc
    return info


# ---------------------------------------------------------------- parts of the probe


def read_maps():
    """Every mapped file of the families above, from /proc/self/maps, in its (address) order."""
    with open("/proc/self/maps") as fh:
        return mapped_entries(mapped_paths(fh.read()))


def watchdog_mapped(traced: Optional[List[dict]]) -> List[dict]:
    """`mapped` for the watchdog's answer to an initialisation of this process's own that did not finish. Before the
    answer only the loader's trace (resolve_torch) puts `mapped` in the result (`traced`): its copies stay, with
    their versions (torch's libcudnn and the libcuda the runtime would open, which this process has not mapped), and
    the copies this process mapped beyond them (by real path) follow, as read from its maps without versions (a
    wedged driver's library is not asked). Without a trace (None): the copies this process mapped."""
    own = read_maps()
    if traced is None:
        return own
    known = {entry["realpath"] for entry in traced}
    return traced + [entry for entry in own if entry["realpath"] not in known]


def mapped_entries(paths):
    """The `mapped` entries of those paths that belong to a family above (from the maps or the loader's trace)."""
    out = []
    for path in paths:
        fam = family_of(os.path.basename(path))
        if fam is None:
            continue
        entry = {"family": fam, "path": path, "realpath": os.path.realpath(path)}
        entry.update(path_flags(path))
        out.append(entry)
    return out


def add_mapped_versions(mapped):
    """Ask each mapped library (already in this process) for its version through its API."""
    for entry in mapped:
        entry.update(version_of_file(entry["family"], entry["path"]))
        if entry["family"] in ("libnccl", "libcudart", "libcuda") or os.path.basename(entry["path"]).startswith("libcudnn.so"):
            try:
                handle = ctypes.CDLL(entry["path"], mode=getattr(os, "RTLD_NOLOAD", 4) | ctypes.RTLD_GLOBAL)
                raw, dec, err = api_version(entry["family"], handle)
                if raw is not None:
                    entry["api_version_code"] = raw
                    entry["api_version"] = dec
                    if entry["family"] == "libnccl":
                        entry["version"] = dec
                        entry.setdefault("version_method", "ncclGetVersion")
                if err:
                    entry["api_error"] = err
            except (OSError, AttributeError) as exc:
                entry["api_error"] = str(exc)


def site_dirs():
    """Directories on sys.path (site-packages, PYTHONPATH entries) that exist."""
    out = []
    for p in sys.path:
        if p and os.path.isdir(p) and p not in out:
            out.append(p)
    return out


def prefixes():
    """The env's prefix, $CONDA_PREFIX, and the base prefix of a venv made from a conda python (whose
    lib/ the interpreter's RPATH reaches)."""
    out = []
    base = getattr(sys, "base_prefix", sys.prefix)
    conda_base = base if os.path.isdir(os.path.join(base, "conda-meta")) else None
    for p in (sys.prefix, os.environ.get("CONDA_PREFIX"), conda_base):
        if p and os.path.isdir(p) and os.path.realpath(p) not in [os.path.realpath(x) for x in out]:
            out.append(p)
    return out


def ldconfig_entries():
    """(soname, path) pairs of `ldconfig -p`, in the cache's order (the order the loader searches)."""
    exe = None
    for cand in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "/usr/bin/ldconfig"):
        if os.path.exists(cand):
            exe = cand
            break
    if exe is None:
        raise RuntimeError("ldconfig not found")
    proc = subprocess.run([exe, "-p"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=SUBPROCESS_TIMEOUT_S,
                          stdin=subprocess.DEVNULL, env=CHILD_ENV or None)
    out = []
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        m = re.match(r"\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)", line)
        if m and "64" in m.group(2):  # skip 32-bit entries; the loader of a 64-bit python ignores them
            out.append((m.group(1), m.group(3)))
    return out


def list_libs(directory):
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    return [os.path.join(directory, n) for n in names
            if family_of(n) in REACHABLE_FAMILIES and os.path.isfile(os.path.join(directory, n))]


def reachable_libraries(errors):
    """Every libnccl/libcudart/libcudnn/libcuda a process of this env could load, with where it was found.

    Origins: LD_LIBRARY_PATH entries (searched first by the loader), site-packages/nvidia/*/lib (torch's
    RPATH), PREFIX/lib (+ stubs, cuda-compat, targets/*/lib), the ld.so cache (`ldconfig -p`).
    """
    found = {}  # path -> entry

    def add(path, origin, order_key=None):
        entry = found.get(path)
        if entry is None:
            entry = {"family": family_of(os.path.basename(path)), "path": path, "realpath": os.path.realpath(path),
                     "origins": []}
            entry.update(path_flags(path))
            found[path] = entry
        if origin not in entry["origins"]:
            entry["origins"].append(origin)

    ld_path = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    for d in ld_path:
        for p in list_libs(d):
            add(p, "LD_LIBRARY_PATH")
    for sd in site_dirs():
        nv = os.path.join(sd, "nvidia")
        if os.path.isdir(nv):
            for sub in sorted(os.listdir(nv)):
                for p in list_libs(os.path.join(nv, sub, "lib")):
                    add(p, "site-packages")
        for p in list_libs(os.path.join(sd, "torch", "lib")):
            add(p, "torch/lib")
    for pre in prefixes():
        for rel in ("lib", "lib/stubs", "lib64", "cuda-compat", "targets/x86_64-linux/lib",
                    "targets/x86_64-linux/lib/stubs", "targets/sbsa-linux/lib"):
            for p in list_libs(os.path.join(pre, rel)):
                add(p, "prefix")
    try:
        cache = ldconfig_entries()
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        errors["ldconfig"] = str(exc)
        cache = []
    for soname, path in cache:
        if family_of(os.path.basename(soname)) in REACHABLE_FAMILIES:
            add(path, "ldconfig")
    return list(found.values()), ld_path, cache


def resolution_order(ld_path, cache):
    """For each soname a process asks for by name, the candidates in the loader's search order
    (LD_LIBRARY_PATH, then the ld.so cache). RPATHs (torch -> nvidia/*/lib) come before both for torch's
    own libraries, so the first entry is what any *other* library asking by name gets."""
    sonames = ["libcuda.so.1", "libnccl.so.2", "libcudart.so.12", "libcudart.so.13", "libcudnn.so.9"]
    out = {}
    for so in sonames:
        cands = []
        for d in ld_path:
            p = os.path.join(d, so)
            if os.path.exists(p):
                cands.append({"path": p, "origin": "LD_LIBRARY_PATH", "stub": path_flags(p)["stub"],
                              "compat": path_flags(p)["compat"]})
        for name, p in cache:
            if name == so and p not in [c["path"] for c in cands]:
                cands.append({"path": p, "origin": "ldconfig", "stub": path_flags(p)["stub"],
                              "compat": path_flags(p)["compat"]})
        if cands:
            out[so] = cands
    return out


VERSION_CHILD = r"""
import ctypes, json, sys
sys.path.insert(0, sys.argv[1])
import stack_probe as sp
out = {}
for fam, path in json.loads(sys.stdin.read()):
    try:
        h = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        raw, dec, err = sp.api_version(fam, h)
        out[path] = {"api_version_code": raw, "api_version": dec, "api_error": err}
    except Exception as exc:
        out[path] = {"api_error": "%s: %s" % (type(exc).__name__, exc)}
print(json.dumps(out))
"""


def versions_in_child(items, errors, part):
    """dlopen each (family, path) in a child process and ask its C API for the version; a failure is kept in
    errors[part].

    A child, so that the copies NOT loaded by this env never show up in our /proc/self/maps (and, for the loader
    trace's copies, so that this process stays small)."""
    if not items:
        return {}
    try:
        proc = subprocess.run([sys.executable, "-c", VERSION_CHILD, os.path.dirname(os.path.abspath(__file__))],
                              input=json.dumps(items).encode(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=SUBPROCESS_TIMEOUT_S, env=CHILD_ENV or None)
        return json.loads(proc.stdout.decode() or "{}")
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        errors[part] = "%s: %s" % (type(exc).__name__, exc)
        return {}


def add_file_versions(entries, errors, part):
    """Versions of library copies this process has not loaded (the reachable ones, or those the loader's trace
    resolved): NCCL from its version string, the others (and NCCL builds without the string) from their C API in a
    child process, once per real file; a failure of that child is kept in errors[part]."""
    ask = {}
    for entry in entries:
        entry.update(version_of_file(entry["family"], entry["path"]))
        base = os.path.basename(entry["path"])
        wants_api = entry["family"] in ("libcudart", "libcuda") or base.startswith("libcudnn.so") \
            or (entry["family"] == "libnccl" and "version" not in entry)
        if wants_api:
            ask.setdefault(entry["realpath"], (entry["family"], entry["realpath"]))
    answers = versions_in_child(list(ask.values()), errors, part)
    for entry in entries:
        ans = answers.get(entry["realpath"])
        if not ans:
            continue
        for k, v in ans.items():
            if v is not None:
                entry[k] = v
        if entry["family"] == "libnccl" and ans.get("api_version") and "version" not in entry:
            entry["version"] = ans["api_version"]
            entry["version_method"] = "ncclGetVersion"


def direct_url(dist):
    """PEP 610 direct_url.json: the git commit a distribution was installed from (pip install git+...,
    editable checkouts), which is how commit-pinned pieces (apex, TMS, Megatron) can be compared."""
    try:
        text = dist.read_text("direct_url.json")
    except Exception:
        return {}
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    out = {"url": data.get("url")}
    vcs = data.get("vcs_info") or {}
    if vcs.get("commit_id"):
        out["commit"] = vcs["commit_id"]
    if (data.get("dir_info") or {}).get("editable"):
        out["editable"] = True
    return out


def _header_lines(dist):
    """The lines of a distribution's metadata header (before the long description)."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    return text.split("\n\n", 1)[0].splitlines()


def _name_version(dist, header):
    """Name and Version from the metadata's header alone. dist.metadata parses the whole file (long description
    included) with the email parser, and dist.version parses it again: half of this probe's CPU on a node with a
    hundred distributions, and every node of a fleet sweep pays it."""
    fields = {}
    for line in header:
        key, sep, value = line.partition(":")
        if sep and key in ("Name", "Version") and key not in fields:
            fields[key] = value.strip()
    if "Name" not in fields or "Version" not in fields:  # an odd file: the parser's answer
        meta = dist.metadata
        return meta["Name"], meta["Version"]
    return fields["Name"], fields["Version"]


def _requires(header):
    """The Requires-Dist lines of a metadata header (what pip check compares)."""
    return [line.partition(":")[2].strip() for line in header if line.startswith("Requires-Dist:")]


def distributions(errors):
    """Installed distributions (name, version, where), from importlib.metadata: finds cu12+cu13 mixes."""
    try:
        from importlib import metadata
    except ImportError as exc:  # pragma: no cover (python < 3.8)
        errors["distributions"] = str(exc)
        return []
    out = []
    for dist in metadata.distributions():
        try:
            header = _header_lines(dist)
            name, version = _name_version(dist, header)
            loc = getattr(dist, "_path", None)
            entry = {"name": name, "version": version,
                     "location": str(loc.parent) if loc is not None else None}
            entry.update(direct_url(dist))
            if name.lower() == "torch":  # without `import torch`, its Python dependencies are judged from these
                entry["requires"] = _requires(header)
            out.append(entry)
        except Exception as exc:  # a broken dist-info must not hide the others
            errors.setdefault("distributions", "")
            errors["distributions"] += "%s; " % exc
    out.sort(key=lambda d: ((d["name"] or "").lower(), d["location"] or ""))
    return out


def find_package_dir(name):
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        # a namespace package's path can hold placeholders (setuptools' editable finders), not folders
        dirs = [p for p in spec.submodule_search_locations if os.path.isdir(p)]
        return dirs[0] if dirs else None
    return os.path.dirname(spec.origin) if spec.origin else None


def git_info(pkg_dir, patches, errors, key):
    """The git checkout a package is imported from (editable installs), its HEAD, dirty state and
    whether each of the profile's patches is applied (`git apply --reverse --check`)."""
    d = os.path.realpath(pkg_dir)
    root = None
    for _ in range(6):
        if os.path.exists(os.path.join(d, ".git")):
            root = d
            break
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    rel = os.path.relpath(os.path.realpath(pkg_dir), root) if root else ""
    if root is None or "site-packages" in rel.split(os.sep) or "dist-packages" in rel.split(os.sep):
        return None  # a wheel install living inside some unrelated repository is not a checkout

    def git(*args):
        return subprocess.run(["git", "-C", root] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=SUBPROCESS_TIMEOUT_S, stdin=subprocess.DEVNULL, env=CHILD_ENV or None)

    info = {"root": root}
    try:
        head = git("rev-parse", "HEAD")
        info["commit"] = head.stdout.decode().strip() or None
        status = git("status", "--porcelain", "--untracked-files=no")
        info["dirty"] = bool(status.stdout.strip())
        info["changed_files"] = len(status.stdout.decode().splitlines())
        states = []
        for p in patches:
            if p.get("target") != key:
                continue
            path = p["path"]
            if not os.path.isfile(path):
                states.append({"file": p.get("file", path), "state": "missing-patch-file"})
                continue
            rev = git("apply", "--reverse", "--check", path)
            if rev.returncode == 0:
                state = "applied"
            else:
                fwd = git("apply", "--check", path)
                state = "not-applied" if fwd.returncode == 0 else "conflicts"
            states.append({"file": p.get("file", path), "state": state,
                           "detail": (rev.stderr.decode("utf-8", "replace").strip().splitlines() or [""])[0][:300]})
        if states:
            info["patches"] = states
    except (OSError, subprocess.TimeoutExpired) as exc:
        errors["git_" + key] = str(exc)
    return info


def package_info(import_name, dist_names, patches, errors, key):
    from importlib import metadata

    info = {"import_name": import_name}
    pkg_dir = find_package_dir(import_name)
    info["location"] = pkg_dir
    for dn in dist_names:
        try:
            info["version"] = metadata.version(dn)
            info["distribution"] = dn
            break
        except metadata.PackageNotFoundError:
            continue
    if pkg_dir is None and "version" not in info:
        return None
    if pkg_dir is not None:
        g = git_info(pkg_dir, patches, errors, key)
        if g:
            info["git"] = g
    return info


def tms_info(errors):
    """torch_memory_saver's native hook libraries: slime LD_PRELOADs the one for torch's CUDA major."""
    pkg = find_package_dir("torch_memory_saver")
    hooks = []
    dirs = []
    if pkg:
        dirs += [pkg, os.path.dirname(pkg)]
    for d in dirs:
        try:
            for n in sorted(os.listdir(d)):
                if n.startswith("torch_memory_saver") and ".so" in n:
                    hooks.append(os.path.join(d, n))
        except OSError:
            continue
    if not pkg and not hooks:
        return None
    out = {"location": pkg, "hook_files": sorted(set(hooks))}
    try:
        from importlib import metadata

        out["version"] = metadata.version("torch_memory_saver")
    except Exception:
        pass
    return out


def env_snapshot():
    """The policy variables as the user launched with them: what envbuild's launcher pinned is undone."""
    env = user_environ(os.environ)
    return {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}


def launcher_file(suffix):
    """rank<k><suffix> in the launcher's run directory, None when not started by envbuild's launcher."""
    run_dir = os.environ.get("ENVBUILD_RUN_DIR")
    return os.path.join(run_dir, "rank%s%s" % (os.environ.get("RANK", "0"), suffix)) if run_dir else None


def dumps(result):
    """The JSON line of the result. The watchdog answers while other threads may still add to it (the copies'
    versions): a dict that changed size while it was read is read again."""
    for _ in range(20):
        try:
            return json.dumps(result, sort_keys=True, default=str) + "\n"
        except RuntimeError:
            time.sleep(0.01)
    return json.dumps(result, sort_keys=True, default=str) + "\n"


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def enter(state, name):
    """Record the phase the probe is in: for the watchdog's message and, under the launcher, in rank<k>.phase
    (the launcher names it when the probe has to be stopped)."""
    now = time.monotonic()
    if "phase" in state:  # seconds per phase, in the JSON: where the probe's time goes
        seconds = state.setdefault("seconds", {})
        seconds[state["phase"]] = round(seconds.get(state["phase"], 0.0) + now - state["since"], 3)
    state["phase"], state["since"] = name, now
    path = launcher_file(".phase")
    if path:
        try:
            write_atomic(path, json.dumps({"phase": name, "t": time.time(), "pid": os.getpid()}))
        except OSError:
            pass


def probe_torch(result, errors, init_state, gate, resolve_only=False, resolve_init=False, gate_path=None):
    """torch's facts, then CUDA and NCCL initialised like a training process would; False when there is no torch.

    `resolve_only` (create's gate): the loader's trace of torch's libraries instead (resolve_torch), unless it
    cannot stand in or fails in any way (else `mapped` would be this probe's own maps, without torch, and the
    gate's checks would skip), which torch["resolve_path"] then says. Else through torch's native libraries when that path
    can tell (checks/_torch_native.py: 0.5 s instead of the 3.4-5.5 s of `import torch` on an H200 node), else by
    importing torch (import_torch), with the reason kept in torch["native_path"]."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError) as exc:
        result["torch"] = {"present": False, "error": str(exc)}
        return False
    if spec is None:
        result["torch"] = {"present": False, "error": "No module named 'torch'"}
        return False
    if resolve_only or resolve_init:
        versions = answer = runtime = None
        early = start_early_init(spec, gate_path) if resolve_init else None
        try:
            versions = resolve_torch(result, errors, spec, lambda name: enter(init_state, name), resolve_init)
            if resolve_init:
                cudart, nccl = resolved_copies(result)
                answer = take_early_init(early, result, cudart, init_state)
                early = None
                runtime = None if answer else load_runtime(cudart, nccl)
        except Exception as exc:  # a fault of the trace itself too: the gate must judge the loaded libraries then
            if early is not None:
                early.stop()
            if versions is not None:
                versions.join()  # its child process ends before the probe loads torch's libraries instead
            why = str(exc) if isinstance(exc, native.NativeUnavailable) else "%s: %s" % (type(exc).__name__, exc)
            result.pop("mapped", None)
            present = load_torch(result, errors, init_state, gate, spec)
            result["torch"]["resolve_path"] = "not used: %s" % why
            return present
        if resolve_init:  # CUDA's or NCCL's refusal from here on is a finding (InitError), never a fallback
            try:
                if answer is not None:
                    adopt_early_init(result, answer, init_state)
                else:
                    read_ahead(result.get("mapped") or [], ("libnccl", "libcuda"))
                    initialise_resolved(result, runtime, init_state, gate)
            finally:
                versions.join()
        return True
    return load_torch(result, errors, init_state, gate, spec)


def resolved_copies(result):
    """(libcudart, [libnccl...]) real paths the CUDA runtime's and NCCL's calls go through, of the copies the
    loader's trace resolved for torch (`--resolve-init`): its libcudart of torch's CUDA major and every libnccl it
    resolved. (None, []) for a CPU build. NativeUnavailable (before any CUDA call) when the trace resolved neither:
    the probe then loads torch's libraries after all."""
    t = result["torch"]
    if not t.get("cuda"):
        return None, []
    mapped = result.get("mapped") or []
    major = "libcudart.so.%s" % str(t["cuda"]).split(".")[0]
    runtimes = [m["realpath"] for m in mapped if m["family"] == "libcudart"]
    # only torch's major: a libcudart of another one (an LD_PRELOAD) is not the runtime torch's calls bind to
    cudart = next((p for p in runtimes if os.path.basename(p).startswith(major)), None)
    nccl = [m["realpath"] for m in mapped if m["family"] == "libnccl"]
    if cudart is None or not nccl:
        raise native.NativeUnavailable("the trace resolved no %s or no libnccl" % major)
    return cudart, nccl


def load_runtime(cudart, nccl):
    """The copies loaded by their paths into the global scope, as torch's _load_global_deps loads the CUDA wheels'
    libraries (an LD_PRELOADed libnccl is already there, first, as it is for torch); None for a CPU build.
    NativeUnavailable (before any CUDA call) when a copy does not load or lacks a call."""
    if cudart is None:
        return None
    try:
        handles = [ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL) for path in [cudart] + nccl]
    except OSError as exc:
        raise native.NativeUnavailable("a resolved copy did not load: %s" % exc)
    return native.Runtime([ctypes.CDLL(None)] + handles)


def start_early_init(spec, gate_path):
    """The init beside the trace: CUDA's and NCCL's initialisation started in a child (checks/_early_init.py) on the
    copies torch's CUDA wheels hold; None when torch's package or those copies do not tell."""
    try:
        pkg_dir, t = native.package_facts(spec, "")
    except native.NativeUnavailable:
        return None
    return early_init.start(pkg_dir, t["cuda"], gate_path) if t.get("cuda") else None


def trace_copies(result):
    """{family: real paths} of the libcudart, libnccl and libcuda copies the loader's trace resolved."""
    mapped = result.get("mapped") or []
    return {f: sorted({m["realpath"] for m in mapped if m["family"] == f}) for f in early_init.FAMILIES}


def take_early_init(early, result, cudart, init_state):
    """The answer of the init beside the trace when it stands for the probe's own (checks/_early_init.py
    `stands_for`), else None: the probe then initialises through the resolved copies itself. A child that cannot
    map the trace's libcudart and libnccl (or started for a CPU build's trace) is stopped at once, without waiting
    for its init. After the watchdog answered, this thread goes no further (park)."""
    if early is None:
        return None
    resolved = trace_copies(result)
    if cudart is None or not early.can_map(resolved):
        early.stop()
        return None
    enter(init_state, BESIDE)
    answer = early.take(resolved)
    if ANSWERING.locked():  # the watchdog answered (and stopped the child): no second init on that GPU
        park()
    return answer


def park():
    """Wait for the thread that answers to end the process (emit)."""
    threading.Event().wait()


def adopt_early_init(result, answer, init_state):
    """The child's initialisation as the probe's own (initialise_resolved's facts and wording); its CUDA or NCCL
    refusal raised here as the probe's own InitError, in the phase it happened in."""
    init = dict(answer["init"], source=LOADER_TRACE, beside_trace_s=answer.get("phases"))
    result["init"] = init
    result["torch"].update(answer.get("torch") or {})
    error = answer.get("error")
    if error:
        enter(init_state, error["phase"])
        raise native.InitError(error["message"])
    if init.get("method"):
        init["method"] = "%s: %s" % (RESOLVED_INIT, init["method"])
    result["torch"]["method"] = ("%s: torch's libraries resolved by the dynamic loader (LD_TRACE_LOADED_OBJECTS); "
                                 "of them only the libcudart and libnccl it resolved loaded, beside the trace"
                                 % LOADER_TRACE)


def read_ahead(mapped, families):
    """Ask the kernel to read the copies of `families` into the page cache now (POSIX_FADV_WILLNEED: asynchronous),
    so that cuInit and NCCL's first communicator (which loads NCCL's kernels from its file) find them there on a
    node's first run: on the lent H100, with the page cache dropped, the 1-rank NCCL group took 0.62 s of a 1.47 s
    probe (docs/faults.md, session 12). Best effort."""
    for entry in mapped:
        if entry.get("family") in families:
            try:
                fd = os.open(entry.get("realpath") or entry["path"], os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                finally:
                    os.close(fd)
            except (OSError, AttributeError):
                pass


def initialise_resolved(result, runtime, init_state, gate):
    """CUDA and a 1-rank NCCL group initialised through `runtime` (load_runtime), after the gate: the static
    doctor's facts without loading torch's other libraries (libtorch_cuda, cuBLAS, cuDNN: most of a first run's 2-3 s
    reading them from disk, docs/faults.md)."""
    enter(init_state, "gate")
    init = {"cuda_tensor": False, "nccl_group": False, "source": LOADER_TRACE, "gate_wait_s": gate()}
    result["init"] = init
    native.initialise(result["torch"], runtime, init, lambda name: enter(init_state, name))
    init["method"] = "%s: %s" % (RESOLVED_INIT, init["method"])
    result["torch"]["method"] = ("%s: torch's libraries resolved by the dynamic loader (LD_TRACE_LOADED_OBJECTS); of "
                                 "them only the libcudart and libnccl it resolved loaded" % LOADER_TRACE)


def resolve_torch(result, errors, spec, enter_fn, versions_beside=False):
    """torch's facts and the `mapped` copies from the dynamic loader's trace (checks/_loader_trace.py), with their
    versions read from the files and, for the C APIs, in a child process: nothing of torch is loaded here and CUDA
    and NCCL are not initialised, so the probe stays a few tens of MB. NativeUnavailable when the trace cannot
    stand in for loading.

    Returns None once the versions are in; with `versions_beside` (--resolve-init) the thread reading them instead,
    to be joined: its child's 0.07 s warm (more on a node's first run, dlopening cuDNN) then run beside CUDA's and
    NCCL's initialisation, which needs only the copies' paths."""
    import _loader_trace as loader_trace

    t, paths = loader_trace.torch_facts(spec, enter_fn)
    mapped = mapped_entries(paths)
    result["torch"], result["mapped"] = t, mapped
    result["init"] = {"cuda_tensor": False, "nccl_group": False, "source": LOADER_TRACE,
                      "method": loader_trace.METHOD + "; CUDA and NCCL not initialised"}
    if not versions_beside:
        add_file_versions(mapped, errors, "mapped_versions")
        return None
    versions = threading.Thread(target=add_file_versions, args=(mapped, errors, "mapped_versions"),
                                name="mapped-versions", daemon=True)
    versions.start()
    return versions


def load_torch(result, errors, init_state, gate, spec):
    """torch's libraries loaded (checks/_torch_native.py), else `import torch`; CUDA and NCCL initialised."""
    init = {"cuda_tensor": False, "nccl_group": False, "method": None}
    try:
        t, runtime = native.torch_facts(spec, lambda name: enter(init_state, name))
        result["torch"], result["init"] = t, init
        enter(init_state, "gate")
        init["gate_wait_s"] = gate()
        native.initialise(t, runtime, init, lambda name: enter(init_state, name))
        return True
    except native.NativeUnavailable as exc:
        why = str(exc)
    enter(init_state, "import torch")
    present = import_torch(result, errors, init_state, gate)
    result["torch"]["native_path"] = "not used: %s" % why
    return present


def import_torch(result, errors, init_state, gate):
    """Import torch, read its versions, then initialise CUDA and NCCL through it; False when the import fails."""
    try:
        import torch
    except ImportError as exc:
        result["torch"] = {"present": False, "error": str(exc)}
        return False
    except Exception as exc:  # a broken torch install is itself a finding
        result["torch"] = {"present": False, "error": "%s: %s" % (type(exc).__name__, exc)}
        return False
    t = {"present": True, "version": torch.__version__, "cuda": getattr(torch.version, "cuda", None),
         "git_version": getattr(torch.version, "git_version", None), "file": torch.__file__,
         "method": "import torch"}
    m = re.search(r"\+(cu\d+|cpu|rocm[\d.]+)$", torch.__version__)
    t["cuda_tag"] = m.group(1) if m else None
    result["torch"] = t
    try:
        v = torch.cuda.nccl.version()
        t["nccl_version"] = ".".join(str(x) for x in v[:3]) if isinstance(v, tuple) else nccl_version_string(int(v))
        if isinstance(v, tuple) and len(v) > 3 and v[3]:
            t["nccl_version_suffix"] = str(v[3])
    except Exception as exc:
        t["nccl_error"] = "%s: %s" % (type(exc).__name__, exc)
    try:
        cv = torch.backends.cudnn.version()
        t["cudnn_version_code"] = cv
        t["cudnn_version"] = cudnn_version_string(cv) if cv else None
    except Exception as exc:
        t["cudnn_error"] = "%s: %s" % (type(exc).__name__, exc)
    enter(init_state, "gate")
    gate()
    enter(init_state, "torch.cuda.is_available")
    try:
        t["cuda_available"] = bool(torch.cuda.is_available())
        t["device_count"] = torch.cuda.device_count() if t["cuda_available"] else 0
        t["arch_list"] = torch.cuda.get_arch_list() if t["cuda_available"] else []
    except Exception as exc:
        t["cuda_available"] = False
        errors["cuda_available"] = "%s: %s" % (type(exc).__name__, exc)
    init = {"cuda_tensor": False, "nccl_group": False, "method": None}
    result["init"] = init
    if not t.get("cuda_available"):
        init["method"] = "no GPU: CUDA and NCCL not initialised (libraries are those mapped by `import torch`)"
        return True
    enter(init_state, "cuda tensor")
    x = torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    init["cuda_tensor"] = True
    enter(init_state, "nccl process group")
    import torch.distributed as dist

    # The FileStore's file lives in the banner's directory: removed on the way out, or swept by the next probe
    # when this one is killed inside the init (a file of its own in /tmp would be left behind).
    with native.NcclBanner() as banner:
        store = dist.FileStore(os.path.join(banner.dir, "store"), 1)
        torch.cuda.set_device(0)
        with banner.init_output():
            dist.init_process_group("nccl", store=store, rank=0, world_size=1)
            dist.all_reduce(x)
            torch.cuda.synchronize()
        init["nccl_group"] = True
        init.update(banner.found())
        init["method"] = "1-rank NCCL process group over a FileStore + all_reduce"
        enter(init_state, "nccl destroy")
        dist.destroy_process_group()  # inside the block: the group's store file goes with the directory after it
    return True


def probe_without_torch(result, errors):
    """No torch: load libcuda, libcudart and libnccl by name, as a process of this env would, so that
    the maps and versions reflect the loader's choice (LD_LIBRARY_PATH, ld.so cache)."""
    init = {"cuda_tensor": False, "nccl_group": False, "method": "no torch: dlopen by name"}
    result["init"] = init
    loaded = {}
    # One CUDA runtime only (the first major found), as one process of the env would have.
    for group in (("libcuda.so.1",), ("libcudart.so.12", "libcudart.so.13"), ("libnccl.so.2",)):
        for so in group:
            try:
                loaded[so] = ctypes.CDLL(so, mode=ctypes.RTLD_GLOBAL)
                break
            except OSError as exc:
                init.setdefault("dlopen_errors", {})[so] = str(exc)
    h = loaded.get("libnccl.so.2")
    if h is not None:
        raw, dec, err = api_version("libnccl", h)
        init["nccl_get_version"] = dec or err


def mapped_in_maps(result, errors):
    """result["mapped"]: the libraries this process mapped, with the versions their C APIs report."""
    try:
        result["mapped"] = read_maps()
    except Exception as exc:
        errors["mapped"] = "%s: %s" % (type(exc).__name__, exc)
        result["mapped"] = []
    try:
        add_mapped_versions(result["mapped"])
    except Exception as exc:
        errors["mapped_versions"] = "%s: %s" % (type(exc).__name__, exc)


def mapped_cudnn_version(result):
    """torch.backends.cudnn.version() is cudnnGetVersion() of the libcudnn torch loaded: without `import torch`
    the probe reads the same call on the mapped copy."""
    t = result.get("torch") or {}
    if not t.get("present") or "cudnn_version_code" in t:
        return
    for entry in result.get("mapped") or []:
        if os.path.basename(entry["path"]).startswith("libcudnn.so") and entry.get("api_version_code"):
            t["cudnn_version_code"] = entry["api_version_code"]
            t["cudnn_version"] = entry.get("api_version")
            return


class _LinkMap(ctypes.Structure):
    """The public head of glibc's struct link_map (<link.h>): all that loaded_objects reads."""


_LinkMap._fields_ = [("l_addr", ctypes.c_void_p), ("l_name", ctypes.c_char_p), ("l_ld", ctypes.c_void_p),
                     ("l_next", ctypes.POINTER(_LinkMap)), ("l_prev", ctypes.POINTER(_LinkMap))]
RTLD_DI_LINKMAP = 2


def loaded_objects() -> List[str]:
    """Real paths of the objects this process loaded, in the loader's own order (its list of loaded objects): the
    order in which a lookup by soname meets them. [] where that cannot be asked.

    The list is walked from the program's entry (dlinfo RTLD_DI_LINKMAP), not through dl_iterate_phdr: that one calls
    back into Python, which needs the GIL, while it holds the loader's lock, and the inventory thread importing a C
    extension holds the GIL while dlopen waits for that lock. The two waited on each other for good (a probe on a fake
    torch whose loader fails hung until its caller's timeout in 2 runs of about 410; docs/faults.md, session 16)."""
    lib = ctypes.CDLL(None)
    head = ctypes.POINTER(_LinkMap)()
    try:
        dlinfo = lib.dlinfo
    except AttributeError:  # glibc before 2.34 keeps it in libdl
        try:
            dlinfo = ctypes.CDLL("libdl.so.2").dlinfo
        except (OSError, AttributeError):
            return []
    dlinfo.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    if dlinfo(lib._handle, RTLD_DI_LINKMAP, ctypes.byref(head)) != 0:
        return []
    names, node = [], head
    while node:
        name = node.contents.l_name
        if name:
            names.append(os.path.realpath(os.fsdecode(name)))
        node = node.contents.l_next
    return names


def bound_cuda_versions(result: dict, mapped: List[dict], order: Optional[List[str]] = None) -> None:
    """cudaRuntimeGetVersion / cuDriverGetVersion of the copies the CUDA calls bind to, when several are mapped.

    The loader hands a request by soname (a DT_NEEDED entry, a dlopen by name) the first object loaded under that
    soname: libcudart's dlopen("libcuda.so.1") at cuInit gets the first libcuda loaded, libtorch_cuda's
    libcudart.so.<major> the first libcudart of that major. So the bound copy is the first in load order, and for the
    runtime the first of torch's CUDA major (a libcudart of another one, e.g. LD_PRELOADed, is not the runtime torch's
    versioned calls bind to: resolved_copies, checks/_torch_native.py Runtime). `order`: the real paths in load order
    (loaded_objects) when `mapped` is read from /proc/self/maps, which lists by address and so says nothing of which
    copy binds; None when `mapped` is in load order already (the loader's trace). A copy missing from `order` comes
    after those in it."""
    rank = {path: i for i, path in enumerate(order or [])}
    major = str((result.get("torch") or {}).get("cuda") or "").split(".")[0]
    for fam, key in (("libcudart", "cuda_runtime"), ("libcuda", "cuda_driver")):
        copies = [m for m in mapped if m["family"] == fam]
        if not copies:
            result[key] = {"mapped": False}
            continue
        copies.sort(key=lambda m: rank.get(m["realpath"], len(rank)))  # stable: `mapped`'s order without `order`
        if fam == "libcudart" and major:
            copies = [m for m in copies if os.path.basename(m["realpath"]).startswith("libcudart.so.%s" % major)] \
                or copies
        first = copies[0]
        result[key] = {"mapped": True, "path": first["path"], "version_code": first.get("api_version_code"),
                       "version": first.get("api_version"), "error": first.get("api_error")}


def inventory(found, errors, patches):
    """What this env could load and what it has installed (reachable copies with their versions, the load order,
    distributions, torch_memory_saver, sglang, Megatron): none of it depends on what this process maps, so it runs
    in a thread while torch's libraries load and CUDA/NCCL initialise (their ctypes calls release the GIL).
    Fills `found`, a dict of its own, merged into the result once complete."""
    try:
        reachable, ld_path, cache = reachable_libraries(errors)
        add_file_versions(reachable, errors, "reachable_versions")
        found["reachable"] = reachable
        found["resolution"] = resolution_order(ld_path, cache)
    except Exception as exc:
        errors["reachable"] = "%s: %s" % (type(exc).__name__, exc)
        found.setdefault("reachable", [])
    for key, fn in (("distributions", lambda: distributions(errors)),
                    ("torch_memory_saver", lambda: tms_info(errors)),
                    ("sglang", lambda: package_info("sglang", ("sglang",), patches, errors, "sglang")),
                    # megatron-core's package is megatron.core; `megatron` is only a namespace (an editable
                    # install of the Megatron-LM checkout maps megatron.core alone)
                    ("megatron", lambda: package_info("megatron.core", ("megatron-core", "megatron_core"),
                                                      patches, errors, "megatron"))):
        try:
            found[key] = fn()
        except Exception as exc:
            errors[key] = "%s: %s" % (type(exc).__name__, exc)
            found[key] = None


def parse_args(argv):
    """--patches FILE: JSON list of {"target": "sglang"|"megatron", "file": name, "path": abs path}.
    --init-timeout S: watchdog for the CUDA/NCCL initialisation (default 120).
    --gate PATH: wait (at most 30 s) for PATH to exist before the first CUDA call (_torch_native.wait_for_gate).
    --resolve-only: torch's libraries resolved by the loader's trace, not loaded (resolve_torch).
    --resolve-init: resolved so, then CUDA and NCCL initialised through the copies resolved (initialise_resolved)."""
    opts = {"patches": [], "init_timeout": 120.0, "gate": None, "resolve_only": False, "resolve_init": False}
    i = 0
    while i < len(argv):
        if argv[i] == "--patches" and i + 1 < len(argv):
            with open(argv[i + 1]) as fh:
                opts["patches"] = json.load(fh)
            i += 2
        elif argv[i] == "--gate" and i + 1 < len(argv):
            opts["gate"] = argv[i + 1]
            i += 2
        elif argv[i] in ("--resolve-only", "--resolve-init"):
            opts[argv[i][2:].replace("-", "_")] = True
            i += 1
        elif argv[i] == "--init-timeout" and i + 1 < len(argv):
            opts["init_timeout"] = float(argv[i + 1])
            i += 2
        else:
            raise SystemExit("stack_probe.py: unknown argument %r" % argv[i])
    return opts


def main(argv):
    t0 = time.monotonic()
    # Libraries (NCCL_DEBUG=INFO, torch warnings) print to fd 1; keep the real stdout for our JSON only.
    json_fd = os.dup(1)
    os.dup2(2, 1)
    errors = {}
    result = {"payload": "stack_probe", "payload_version": PAYLOAD_VERSION, "errors": errors}
    found = {}
    inventory_done = threading.Event()
    init_state = {}

    def emit(exit_code):
        """The answer, from one thread only (ANSWERING): another that gets here waits for it to end the process."""
        if not ANSWERING.acquire(blocking=False):
            park()
        answer(exit_code)

    def answer(exit_code):
        """With ANSWERING held: the JSON on stdout and in the launcher's file, then the process ends."""
        try:
            result["elapsed_s"] = round(time.monotonic() - t0, 3)
            if inventory_done.is_set():
                result.update(found)
            if "phase" in init_state:
                enter(init_state, "answer")
                result["phase_s"] = dict(init_state.get("seconds", {}))
            text = dumps(result)
            os.write(json_fd, text.encode())
            path = launcher_file(".json")
            if path:
                try:
                    write_atomic(path, text)
                except OSError as exc:
                    sys.stderr.write("stack_probe.py: cannot write %s: %s\n" % (path, exc))
            sys.stderr.flush()
        finally:
            early_init.kill_all()  # the init beside the trace the watchdog answered for, once the answer is out
            os._exit(exit_code)

    opts = parse_args(argv)
    stacks = launcher_file(".stacks")
    if stacks:  # the launcher sends SIGUSR1 before it kills a probe that ran past its deadline
        faulthandler.register(signal.SIGUSR1, file=open(stacks, "a"), all_threads=True)
    result["env"] = env_snapshot()
    result["python"] = {"executable": sys.executable, "version": "%d.%d.%d" % sys.version_info[:3],
                        "prefix": sys.prefix, "base_prefix": getattr(sys, "base_prefix", sys.prefix),
                        "sys_path_dirs": site_dirs(), "platform": sys.platform,
                        "machine": platform.machine(), "implementation": sys.implementation.name}
    CHILD_ENV.update(os.environ)  # the inventory's children never see the NCCL_DEBUG* the 1-rank group sets

    def take_inventory():
        started = time.monotonic()
        try:
            native.sweep_banner_dirs()  # of probes killed in their NCCL init, off the critical path
            inventory(found, errors, opts["patches"])
        finally:
            # its own seconds: the phase "inventory" only counts the wait for it once torch's part is done
            found["inventory_s"] = round(time.monotonic() - started, 3)
            inventory_done.set()

    threading.Thread(target=take_inventory, name="inventory", daemon=True).start()
    enter(init_state, "import torch")

    def watchdog():
        """The answer for an initialisation that did not finish: where it hung, and the libraries (answer)."""
        if not ANSWERING.acquire(blocking=False):  # the main thread is answering already
            return
        where = init_state["phase"]
        if where == BESIDE:  # the child's own phase, read without stopping it; `mapped` stays the trace's copies
            beside = early_init.running_phase()
            where = "%s, in its phase %s" % (where, beside) if beside else where
        else:  # the probe's own init: the trace's copies stay, with what this process mapped beyond them
            try:
                result["mapped"] = watchdog_mapped(result.get("mapped"))
            except Exception as exc:
                errors["maps"] = str(exc)
        errors["init"] = "CUDA/NCCL initialisation did not finish within %.0f s (hung in: %s)" % (
            opts["init_timeout"], where)
        answer(3)

    timer = threading.Timer(opts["init_timeout"], watchdog)
    timer.daemon = True
    timer.start()
    try:
        if not probe_torch(result, errors, init_state, lambda: native.wait_for_gate(opts["gate"]), opts["resolve_only"],
                           opts["resolve_init"], gate_path=opts["gate"]):
            probe_without_torch(result, errors)
    except Exception as exc:
        errors["init"] = "%s during %s: %s" % (type(exc).__name__, init_state["phase"], exc)
    timer.cancel()

    enter(init_state, "libraries")
    traced = "mapped" in result  # the loader's trace (resolve_torch) fills it, in load order, without mapping anything
    if not traced:
        mapped_in_maps(result, errors)
    mapped_cudnn_version(result)
    bound_cuda_versions(result, result["mapped"], None if traced else loaded_objects())
    enter(init_state, "inventory")
    inventory_done.wait()
    emit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
