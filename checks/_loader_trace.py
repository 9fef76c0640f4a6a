"""The stack probe's resolve-only path (`stack_probe.py --resolve-only`, what `envbuild create`'s gate runs): which
copies of libnccl, libcudart, libcudnn and libcuda torch's libraries would bind, asked of the dynamic loader
itself instead of loading them.

Why: loading torch's native libraries (checks/_torch_native.py) relocates and initialises libtorch_cpu,
libtorch_cuda, cuBLAS and the rest: about 400 MB resident for a torch 2.11 cu130 stack, the peak of create's
whole process tree, while what the gate judges is only which files get mapped. The env's own python, run with
LD_TRACE_LOADED_OBJECTS=1, is mapped by its own loader (its PT_INTERP), which then maps every object in
LD_PRELOAD and their dependencies, prints "soname => path" for each and exits before relocating anything or
running any code: the same search (the objects' RPATHs and RUNPATHs, the executable's RPATH, LD_LIBRARY_PATH,
LD_PRELOAD, /etc/ld.so.preload, the ld.so cache) with the same environment, a few MB resident. What `import torch`
opens goes through that trace one open at a time, in the order torch opens it (Loader): the files torch's own
`_load_global_deps` opens (that function from the release's __init__.py, run with a `ctypes` that traces instead
of loading and a /proc/self/maps answered from the trace so far), then the torch._C extension, then, unless a
libcuda is mapped by then, libcuda.so.1 by name (what the CUDA runtime opens at its first call). Each open is
traced with every file mapped before it preloaded by path ahead of it, so its dependencies meet them by soname as
in the real process (a by-path open of another file maps a second copy), and the mapped copies are those of the
real import; the scope (RTLD_LOCAL or GLOBAL) changes symbol binding, not which files are mapped. About 3 ms per
trace (19 for torch 2.11 cu130; a file already mapped is not traced again).

It cannot stand in for everything: a library the loader does not find, a symbol version a library requires and
its dependency lacks ("version `GLIBCXX_3.4.30' not found": the trace reports it and still exits 0), an object it
cannot preload, a path LD_PRELOAD cannot carry (a space or a colon), a `_load_global_deps` that needs more of
ctypes than CDLL, a trace that does not answer, or a CUDA build whose libtorch_cuda code does not tell its NCCL
(checks/_elf.py) raise NativeUnavailable, and the probe then loads the libraries as `envbuild doctor` does (the
verdict is then the full probe's). A missing symbol (not version) is not seen: that needs relocation
(docs/checks-stack.md, known gaps). CUDA and NCCL are never initialised here. Standard library only.
"""
import builtins
import glob
import io
import os
import re
import struct
import subprocess
import sys
import types
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from _common import LOADER_TRACE
from _elf import returned_integer, returned_string
from _torch_native import (CUDA_BUILD_NCCL_SUFFIX, CUDA_BUILD_NCCL_VERSION, NativeUnavailable, extension,
                           package_facts, package_loader, require_local_scope, stand_in_package)

TRACE_TIMEOUT_S = 20.0
DRIVER_SONAME = "libcuda.so.1"  # what libcudart dlopens by name at its first call
METHOD = LOADER_TRACE + ": torch's libraries resolved by the dynamic loader (LD_TRACE_LOADED_OBJECTS), not loaded"
TRACE_LINE = re.compile(r"^\s*(?:(\S+) => )?(/.*?) \(0x[0-9a-fA-F]+\)\s*$")
NOT_FOUND = re.compile(r"^\s*(\S+) => not found\s*$")
VERSION_NOT_FOUND = re.compile(r"version .* not found")
# Presentation-only loader variables that would add lines to the trace (or make it relocate: LD_WARN).
QUIET = ("LD_VERBOSE", "LD_WARN", "LD_DEBUG")


def trace(preloads: Sequence[str], by_name: Sequence[str] = ()) -> List[str]:
    """The files the loader maps for this python with `preloads` (paths) and `by_name` (sonames) appended to
    LD_PRELOAD, in load order, as real paths (what /proc/self/maps would show); raises NativeUnavailable when a
    dependency is not found or lacks a symbol version an object requires, a preload is not mapped, or the trace
    does not answer."""
    exe = sys.executable
    if not exe or not os.path.isfile(exe):
        raise NativeUnavailable("no interpreter path to trace (sys.executable %r)" % exe)
    unfit = [p for p in preloads if re.search(r"[:\s]", p)]  # LD_PRELOAD splits on spaces and colons
    if unfit:
        raise NativeUnavailable("a path LD_PRELOAD cannot carry: %s" % unfit)
    env = {k: v for k, v in os.environ.items() if k not in QUIET}
    env["LD_TRACE_LOADED_OBJECTS"] = "1"
    env["LD_PRELOAD"] = " ".join([env.get("LD_PRELOAD", "")] + list(preloads) + list(by_name)).strip()
    try:
        proc = subprocess.run([exe, "-c", ""], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=TRACE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NativeUnavailable("the loader's trace did not answer: %s: %s" % (type(exc).__name__, exc))
    stdout, stderr = proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")
    # Tracing, ld.so reports a missing symbol version and still exits 0; the real load fails on it.
    unversioned = [line.strip() for line in (stderr + "\n" + stdout).splitlines() if VERSION_NOT_FOUND.search(line)]
    if unversioned:
        raise NativeUnavailable("the loader reports %s" % unversioned[0])
    paths = parse(stdout)
    if proc.returncode != 0 or not paths:
        tail = stderr.strip().splitlines()[-1:]
        raise NativeUnavailable("the loader's trace failed (exit %d) %s" % (proc.returncode, tail))
    absent = [p for p in preloads if os.path.realpath(p) not in paths]
    if absent:
        raise NativeUnavailable("the loader could not map %s" % absent)
    return paths


class Loader:
    """The loader's state across torch's opens, one open at a time, as in the real import.

    Why: one trace with every open in LD_PRELOAD maps all of them before any of their dependencies is searched,
    whereas each real dlopen resolves its dependencies at once. When an earlier open needs soname S, found by its
    RPATH at file A, and a later open is another file B with SONAME S by path, the real import maps A and B but a
    single trace only B (A's need is met by the preloaded B). So each open is traced with everything mapped so far
    preloaded by path ahead of it: those files come first, exactly as mapped, so the new open's dependencies meet
    them by soname as in the real process, and only the new open's own search is new. Each step is about 3 ms."""

    def __init__(self) -> None:
        base = trace([])  # the python's own objects (and the user's LD_PRELOAD): never carried by path
        self.base = set(base)
        self.mapped = list(base)

    def open(self, name: str) -> None:
        """Map `name` (a path, or a soname opened by name) after everything mapped so far. A path already mapped
        is not traced again: dlopen of a loaded file returns it and maps nothing (most of torch 2.11's preloads are
        libtorch_global_deps' dependencies by then)."""
        if "/" in name and os.path.realpath(name) in self.mapped:
            return
        carried = [p for p in self.mapped if p not in self.base]
        paths = trace(carried + [name]) if "/" in name else trace(carried, (name,))
        self.mapped += [p for p in paths if p not in self.mapped]


def parse(text: str) -> List[str]:
    """Real paths of the trace's lines, in order, each once; NativeUnavailable for a "soname => not found" line."""
    out = []
    for line in text.splitlines():
        missing = NOT_FOUND.match(line)
        if missing:
            raise NativeUnavailable("the loader finds no %s" % missing.group(1))
        m = TRACE_LINE.match(line)
        if m:
            real = os.path.realpath(m.group(2))
            if real not in out:
                out.append(real)
    return out


class _Recorder:
    """What the release's `_load_global_deps` opens, traced in order (Loader) instead of loaded; its reads of
    /proc/self/maps are answered with the files the loader would have mapped by then."""

    def __init__(self, loader):
        self.loader = loader

    def ctypes(self):
        """A `ctypes` holding CDLL and the RTLD_* flags only: a loader needing more cannot be stood in for."""
        import ctypes

        return types.SimpleNamespace(CDLL=self.cdll, RTLD_GLOBAL=ctypes.RTLD_GLOBAL, RTLD_LOCAL=ctypes.RTLD_LOCAL)

    def cdll(self, name, mode=None, *args, **kwargs):
        self.loader.open(name)

    def open(self, file, *args, **kwargs):
        if file != "/proc/self/maps":
            return builtins.open(file, *args, **kwargs)
        return io.StringIO("".join("0-0 r-xp 00000000 00:00 0 %s\n" % p for p in self.loader.mapped))


def global_deps(pkg_dir: str, loader: Loader) -> None:
    """Trace, through `loader`, each file torch's own `_load_global_deps` opens, in its order, without opening it."""
    recorder = _Recorder(loader)
    load_global_deps = package_loader(pkg_dir, {"ctypes": recorder.ctypes(), "open": recorder.open})
    try:
        with stand_in_package(pkg_dir):
            load_global_deps()
    except NativeUnavailable:
        raise
    except Exception as exc:  # e.g. a release that calls what the recording ctypes does not have
        raise NativeUnavailable("torch's _load_global_deps cannot be traced: %s: %s" % (type(exc).__name__, exc))


def start_read_ahead(paths: Sequence[str]) -> Optional[subprocess.Popen]:
    """checks/_read_ahead.py on `paths`, in a process of its own beside the trace (None when it cannot start):
    stop it with stop_read_ahead once the trace is done.

    Why a process: the trace's loader faults in each library's tables one file after another on a node's first
    run (0.41-0.49 s with the page cache dropped against 0.15-0.23 s warm on the lent H100, docs/gpu-runs/s13/);
    read side by side ahead of it, most are in the page cache when the trace asks. Threads of this process would
    take the interpreter's lock from the trace's own steps: warm, that cost more than it saved."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_read_ahead.py")
    try:
        return subprocess.Popen([sys.executable, "-E", "-s", "-S", script] + list(paths), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None


def stop_read_ahead(proc: Optional[subprocess.Popen]) -> None:
    """End the read-ahead (it is of no use once the trace is done) and reap it: the probe leaves no process."""
    if proc is not None:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def torch_libraries(pkg_dir: str) -> List[str]:
    """The shared libraries of torch's own lib directory and of the CUDA wheels beside it (site-packages/nvidia/*/
    lib): the files the trace of `import torch` reads most, biggest last (_read_ahead.py starts from the end)."""
    found = glob.glob(os.path.join(pkg_dir, "lib", "*.so*"))
    found += glob.glob(os.path.join(os.path.dirname(pkg_dir), "nvidia", "*", "lib", "*.so*"))
    files = {os.path.realpath(p) for p in found if os.path.isfile(p)}

    def size(path: str) -> int:
        try:
            return os.path.getsize(path)
        except OSError:
            return 0
    return sorted(files, key=size)


def resolve(pkg_dir: str, cuda_build: bool) -> List[str]:
    """Every file `import torch` would map, in load order: this python's own, _load_global_deps' files, the torch._C
    extension and its dependencies, then (for a CUDA build) the libcuda.so.1 the CUDA runtime would open by name,
    unless a libcuda is mapped already (then the runtime's dlopen returns that one)."""
    require_local_scope()
    c_extension = extension(pkg_dir)
    reader = start_read_ahead(torch_libraries(pkg_dir) + [c_extension])
    try:
        loader = Loader()
        global_deps(pkg_dir, loader)
        loader.open(c_extension)
        if cuda_build and not any(os.path.basename(p).startswith("libcuda.so") for p in loader.mapped):
            loader.open(DRIVER_SONAME)
    finally:
        stop_read_ahead(reader)
    return loader.mapped


def built_nccl(pkg_dir: str) -> Optional[Tuple[str, str]]:
    """(version, suffix) of the NCCL torch was built with, read from libtorch_cuda.so's code: what
    torch.cuda.nccl.version() reports. None when the file or its code does not tell (checks/_elf.py)."""
    path = os.path.join(pkg_dir, "lib", "libtorch_cuda.so")
    try:
        code = returned_integer(path, CUDA_BUILD_NCCL_VERSION)
        suffix = returned_string(path, CUDA_BUILD_NCCL_SUFFIX) if code else None
    except (OSError, ValueError, struct.error):  # struct.error: a short read of a cut file
        return None
    if not code:
        return None
    return "%d.%d.%d" % (code >> 32, (code >> 16) & 0xFFFF, code & 0xFFFF), suffix or ""


def torch_facts(spec: object, enter: Callable[[str], None]) -> Tuple[Dict[str, object], List[str]]:
    """(torch facts, the real paths of every file `import torch` would map), nothing loaded; NativeUnavailable when
    the trace cannot stand in for loading (the module's docstring), or when a CUDA build's libtorch_cuda does not
    tell its NCCL from the file (another architecture, a compiler's other code): loading then asks the library, so
    torch.nccl_version is never silently missing."""
    pkg_dir, t = package_facts(spec, METHOD)
    enter("resolve torch libraries")
    paths = resolve(pkg_dir, bool(t.get("cuda")))
    nccl = built_nccl(pkg_dir)
    if nccl is None and t.get("cuda"):
        raise NativeUnavailable("libtorch_cuda.so's code does not tell the NCCL torch was built with")
    if nccl is not None:
        t["nccl_version"] = nccl[0]
        if nccl[1]:
            t["nccl_version_suffix"] = nccl[1]
    return t, paths
