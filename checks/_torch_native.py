"""The stack probe's fast path: what `import torch` maps and whether CUDA and NCCL initialise, through torch's own
native libraries, without running torch's Python package.

Why: on the lent H200 node `import torch` takes 3.4-5.5 s, of which loading torch's native libraries is 0.28 s
and cuInit 0.21 s (docs/gpu-runs/s5-summary-call1.txt); the rest is torch's Python modules, which decide none of
the facts the stack checks judge. The libraries are loaded the way torch's package loads them: by the
release's own `_load_global_deps` (libtorch_global_deps into the global scope, then whatever that release preloads
from the CUDA wheels), then the `torch._C` extension, whose RPATHs and dependencies pull in libtorch_cuda,
libcudart, libnccl and libcudnn exactly as the real import does (the same loader, the same LD_PRELOAD,
LD_LIBRARY_PATH and ld.so cache). CUDA and NCCL are then initialised through the
copies the dynamic linker bound for libtorch_cuda: NCCL's (unversioned) symbols from the global scope first
(LD_PRELOAD, RTLD_GLOBAL libraries), then libtorch_cuda's own dependencies; the CUDA runtime's (versioned:
cudaMalloc@libcudart.so.13) from libtorch_cuda's dependencies, which hold the libcudart it was linked against, so
a libcudart of another major in LD_PRELOAD is not taken for it.

Anything this path cannot stand in for (no version.py, no `_load_global_deps`, a library that does not load, a
missing CUDA or NCCL symbol, any error running torch's loader) raises NativeUnavailable before the first CUDA call
(every symbol is resolved first), and the probe imports torch instead (checks/stack_probe.py), with every
`torch.*` module the attempt left behind removed from sys.modules. An error
of the CUDA or NCCL initialisation itself is a finding, raised as InitError with CUDA's or NCCL's own name and text
(the strings envbuild/knowledge/causes.toml matches). Standard library only.
"""
import ast
import contextlib
import ctypes
import glob
import os
import re
import shutil
import tempfile
import time
from typing import Optional

from _common import running

NCCL_FLOAT32, NCCL_SUM = 7, 0
CUDA_BUILD_NCCL_VERSION = "_ZN5torch4cuda4nccl7versionEv"  # torch::cuda::nccl::version(): NCCL torch was built with
CUDA_BUILD_NCCL_SUFFIX = "_ZN5torch4cuda4nccl14version_suffixEv"


class NativeUnavailable(Exception):
    """This torch cannot be probed without importing it; the reason is kept in the probe's init facts."""


def wait_for_gate(path, timeout_s=30.0):
    """Hold the first CUDA call until `path` exists: the doctor takes NVML's process snapshot meanwhile, so
    node.gpu_processes never sees this probe's CUDA context while the library loading still overlaps it.
    Returns the seconds waited (None without a gate)."""
    if not path:
        return None
    t0 = time.monotonic()
    while not os.path.exists(path) and time.monotonic() - t0 < timeout_s:
        time.sleep(0.005)
    return round(time.monotonic() - t0, 3)


class InitError(RuntimeError):
    """CUDA or NCCL refused to initialise through torch's libraries: a finding, not a reason to import torch."""


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def version_facts(path):
    """__version__, cuda and git_version from torch/version.py, read as literals (the file torch generates at
    build time; torch.__version__ and torch.version.cuda are these values)."""
    try:
        with open(path) as fh:
            tree = ast.parse(fh.read(), path)
    except (OSError, SyntaxError, ValueError) as exc:
        raise NativeUnavailable("cannot read %s: %s" % (path, exc))
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name, value = node.target.id, node.value
        else:
            continue
        try:
            values[name] = ast.literal_eval(value)
        except ValueError:
            continue
    if not isinstance(values.get("__version__"), str):
        raise NativeUnavailable("%s sets no __version__" % path)
    if values.get("hip"):  # HIP, not the CUDA runtime this path calls
        raise NativeUnavailable("a ROCm build (torch.version.hip %s)" % values["hip"])
    return {"version": values["__version__"], "cuda": values.get("cuda"), "git_version": values.get("git_version")}


def package_loader(pkg_dir, stand_ins=None):
    """torch's own `_load_global_deps` (with the helpers it calls) from torch/__init__.py, compiled on its own.

    What `import torch` maps is decided there, and it changes between releases: torch 2.11 loads
    libtorch_global_deps into the global scope and then, whenever libcudart got mapped, preloads the CUDA wheels'
    libraries (cuBLAS, cuDNN, NCCL, ...) by path from the first sys.path entry holding them, so a process can map
    a pip libnccl and a preloaded one at once. Running the release's own function keeps that exact, whatever the
    release; of the rest of the module only the literals they read are run (not its imports, not torch._C).
    Their `from torch.version import ...` is served a stand-in package holding only torch/version.py. `stand_ins`
    replace names of the functions' globals (the loader trace's recording `ctypes` and `open`, checks/_loader_trace.py)."""
    path = os.path.join(pkg_dir, "__init__.py")
    try:
        with open(path) as fh:
            tree = ast.parse(fh.read(), path)
    except (OSError, SyntaxError, ValueError) as exc:
        raise NativeUnavailable("cannot read %s: %s" % (path, exc))
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    if "_load_global_deps" not in functions:  # how this release loads its libraries is unknown: import it instead
        raise NativeUnavailable("%s defines no _load_global_deps" % path)
    wanted, todo = set(), ["_load_global_deps"]
    while todo:  # the function and every module-level function it reaches
        name = todo.pop()
        if name in wanted:
            continue
        wanted.add(name)
        todo += [n.id for n in ast.walk(functions[name]) if isinstance(n, ast.Name) and n.id in functions]
    used = {n.id for name in wanted for n in ast.walk(functions[name]) if isinstance(n, ast.Name)}
    constants = [node for node in tree.body if isinstance(node, ast.Assign) and len(node.targets) == 1
                 and isinstance(node.targets[0], ast.Name) and node.targets[0].id in used and _literal(node.value)]
    future = [node for node in tree.body if isinstance(node, ast.ImportFrom) and node.module == "__future__"]
    module = ast.Module(body=future + constants + [functions[n] for n in sorted(wanted, key=list(functions).index)],
                        type_ignores=[])
    namespace = {"__file__": path, "__name__": "torch", "ctypes": ctypes, "glob": glob, "os": os,
                 "platform": __import__("platform"), "sys": __import__("sys")}
    namespace.update(stand_ins or {})
    try:
        exec(compile(module, path, "exec"), namespace)
    except Exception as exc:  # e.g. an annotation naming what only the whole module defines
        raise NativeUnavailable("torch's _load_global_deps cannot be run on its own: %s: %s" % (type(exc).__name__, exc))
    return namespace["_load_global_deps"]


def _literal(node):
    """Whether a module-level value is a plain literal (a constant those functions may read)."""
    try:
        ast.literal_eval(node)
        return True
    except ValueError:
        return False


def _version_stand_in(pkg_dir):
    """sys.modules entries for `torch` (a bare package) and `torch.version` (torch/version.py run alone)."""
    import types

    package = types.ModuleType("torch")
    package.__path__ = [pkg_dir]
    version = types.ModuleType("torch.version")
    version.__file__ = os.path.join(pkg_dir, "version.py")
    try:
        with open(version.__file__) as fh:
            exec(compile(fh.read(), version.__file__, "exec"), version.__dict__)
    except Exception as exc:
        raise NativeUnavailable("cannot run %s on its own: %s: %s" % (version.__file__, type(exc).__name__, exc))
    package.version = version
    return {"torch": package, "torch.version": version}


def require_local_scope():
    """NativeUnavailable under TORCH_USE_RTLD_GLOBAL: torch then loads torch._C into the global scope, which neither
    the loading path nor the loader's trace stands in for."""
    if os.environ.get("TORCH_USE_RTLD_GLOBAL"):
        raise NativeUnavailable("TORCH_USE_RTLD_GLOBAL is set: torch then loads torch._C into the global scope")


@contextlib.contextmanager
def stand_in_package(pkg_dir):
    """While the release's `_load_global_deps` runs: its `from torch.version import ...` is served the stand-in
    package (_version_stand_in); after it, every torch module that appeared is removed, so a fallback `import torch`
    finds the real package and none of the stand-in's modules."""
    import sys

    before = set(sys.modules)
    sys.modules.update(_version_stand_in(pkg_dir))
    try:
        yield
    finally:
        for name in set(sys.modules) - before:
            if name == "torch" or name.startswith("torch."):
                del sys.modules[name]


def extension(pkg_dir: str) -> str:
    """The torch._C file `import torch` loads: the first of this python's extension suffixes that exists, in the
    order its import system tries them (the probe runs in the env's own python); NativeUnavailable when none does."""
    import importlib.machinery

    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(pkg_dir, "_C" + suffix)
        if os.path.isfile(path):
            return path
    raise NativeUnavailable("no _C extension under %s" % pkg_dir)


def load_libraries(pkg_dir):
    """Load torch's native libraries as its package does (its own _load_global_deps, then the torch._C
    extension); returns the lookup scopes for CUDA/NCCL calls: the global scope, then libtorch_cuda's own."""
    import sys

    require_local_scope()
    c_extension = extension(pkg_dir)
    if not os.path.isfile(os.path.join(pkg_dir, "lib", "libtorch_global_deps.so")):
        raise NativeUnavailable("no lib/libtorch_global_deps.so under %s" % pkg_dir)
    if any(name == "torch" or name.startswith("torch.") for name in sys.modules):
        raise NativeUnavailable("torch is already imported in this process")
    load_global_deps = package_loader(pkg_dir)
    try:
        with stand_in_package(pkg_dir):
            load_global_deps()
            ctypes.CDLL(c_extension)
    except Exception as exc:  # OSError of a library, or the release's function needing what we did not give it
        raise NativeUnavailable("torch's native libraries did not load: %s: %s" % (type(exc).__name__, exc))
    scopes = [ctypes.CDLL(None)]
    torch_cuda = os.path.join(pkg_dir, "lib", "libtorch_cuda.so")
    if os.path.isfile(torch_cuda):
        try:
            scopes.append(ctypes.CDLL(torch_cuda, mode=getattr(os, "RTLD_NOLOAD", 4)))
        except OSError:
            pass
    return scopes


def function(scopes, name, restype=ctypes.c_int):
    """`name` as the dynamic linker binds it for libtorch_cuda: the first scope that defines it."""
    for scope in scopes:
        try:
            fn = getattr(scope, name)
        except AttributeError:
            continue
        fn.restype = restype
        return fn
    raise NativeUnavailable("%s is not defined by torch's libraries" % name)


def built_nccl(scopes):
    """(version, suffix) of the NCCL torch was built with, what torch.cuda.nccl.version() reports; None if absent."""
    try:
        code = function(scopes[1:], CUDA_BUILD_NCCL_VERSION, ctypes.c_uint64)()
    except NativeUnavailable:
        return None
    if not code:
        return None
    version = "%d.%d.%d" % (code >> 32, (code >> 16) & 0xFFFF, code & 0xFFFF)
    try:
        suffix = function(scopes[1:], CUDA_BUILD_NCCL_SUFFIX, ctypes.c_char_p)()
    except NativeUnavailable:
        suffix = None
    return version, (suffix or b"").decode("utf-8", "replace")


NCCL_CALLS = ("ncclGetUniqueId", "ncclCommInitRank", "ncclAllReduce")


class Runtime:
    """The CUDA runtime and NCCL calls of the probe, every one resolved before the first is made: CUDA's from
    libtorch_cuda's own dependencies first (its versioned references bind there), NCCL's global scope first."""

    def __init__(self, scopes):
        cuda_scopes = scopes[1:] + scopes[:1]
        self.fn = {name: function(cuda_scopes, name) for name in (
            "cudaGetDeviceCount", "cudaSetDevice", "cudaMalloc", "cudaMemset", "cudaDeviceSynchronize", "cudaFree")}
        self.name = function(cuda_scopes, "cudaGetErrorName", ctypes.c_char_p)
        self.text = function(cuda_scopes, "cudaGetErrorString", ctypes.c_char_p)
        self.nccl = {name: function(scopes, name) for name in NCCL_CALLS}
        self.nccl_text = function(scopes, "ncclGetErrorString", ctypes.c_char_p)

    def describe(self, call, rc):
        """'cudaMalloc: Error 2 cudaErrorMemoryAllocation: out of memory' (CUDA's own name and text)."""
        return "%s: Error %d %s: %s" % (call, rc, (self.name(rc) or b"?").decode(), (self.text(rc) or b"?").decode())

    def call(self, name, *args):
        rc = self.fn[name](*args)
        if rc != 0:
            raise InitError(self.describe(name, rc))


def package_facts(spec, method):
    """(torch's package directory, its facts from version.py: version, cuda, git_version, cuda_tag), read without
    running the package; NativeUnavailable when it is not a package or version.py does not tell."""
    pkg_dir = (spec.submodule_search_locations or [None])[0]
    if not pkg_dir:
        raise NativeUnavailable("torch is not a package here")
    t = {"present": True, "file": spec.origin, "method": method}
    t.update(version_facts(os.path.join(pkg_dir, "version.py")))
    m = re.search(r"\+(cu\d+|cpu|rocm[\d.]+)$", t["version"])
    t["cuda_tag"] = m.group(1) if m else None
    return pkg_dir, t


def torch_facts(spec, enter):
    """(torch facts, the Runtime for a CUDA build or None) with torch's libraries loaded and every CUDA/NCCL symbol
    resolved; NativeUnavailable, before any CUDA call, when this path cannot tell."""
    pkg_dir, t = package_facts(spec, "torch's native libraries, without `import torch`")
    enter("load torch libraries")
    scopes = load_libraries(pkg_dir)
    nccl = built_nccl(scopes)
    if nccl is not None:
        t["nccl_version"] = nccl[0]
        if nccl[1]:
            t["nccl_version_suffix"] = nccl[1]
    return t, (Runtime(scopes) if t.get("cuda") else None)


def initialise(t, rt, init, enter):
    """CUDA device count, a device buffer, then a 1-rank NCCL communicator with one all_reduce, as a training
    process's first steps would; fills `t` and `init`. InitError when CUDA or NCCL refuses."""
    if rt is None:  # a CPU build
        t.update(cuda_available=False, device_count=0)
        init["method"] = "no GPU: CUDA and NCCL not initialised (libraries are those mapped by `import torch`)"
        return
    enter("torch.cuda.is_available")
    count = ctypes.c_int(0)
    rc = rt.fn["cudaGetDeviceCount"](ctypes.byref(count))
    if rc != 0 or count.value == 0:  # torch.cuda.is_available() is False then, with this as its warning
        t.update(cuda_available=False, device_count=0)
        if rc != 0:
            t["cuda_error"] = rt.describe("cudaGetDeviceCount", rc)
        init["method"] = "no GPU: CUDA and NCCL not initialised (libraries are those mapped by `import torch`)"
        return
    t.update(cuda_available=True, device_count=count.value)
    enter("cuda tensor")
    nbytes = 4 * 1024
    buf = ctypes.c_void_p()
    rt.call("cudaSetDevice", 0)
    rt.call("cudaMalloc", ctypes.byref(buf), ctypes.c_size_t(nbytes))
    try:
        rt.call("cudaMemset", buf, 0, ctypes.c_size_t(nbytes))
        rt.call("cudaDeviceSynchronize")
        init["cuda_tensor"] = True
        enter("nccl process group")
        nccl_group(rt, buf, nbytes // 4, init)
    finally:
        rt.fn["cudaFree"](buf)


def nccl_group(rt, buf, count, init):
    """One rank, one communicator, one all_reduce, with NCCL's banner read (NcclBanner)."""
    with NcclBanner() as banner:
        def nccl(name, *args):
            rc = rt.nccl[name](*args)
            if rc != 0:
                raise InitError("%s: NCCL error %d '%s'" % (name, rc, (rt.nccl_text(rc) or b"?").decode()))

        uid = NcclUniqueId()
        comm = ctypes.c_void_p()
        nccl("ncclGetUniqueId", ctypes.byref(uid))
        with banner.init_output():
            nccl("ncclCommInitRank", ctypes.byref(comm), 1, uid, 0)
        nccl("ncclAllReduce", buf, buf, ctypes.c_size_t(count), NCCL_FLOAT32, NCCL_SUM, comm, ctypes.c_void_p(0))
        rt.call("cudaDeviceSynchronize")
        init["nccl_group"] = True
        init.update(banner.found())
        init["method"] = "1-rank NCCL communicator + all_reduce through torch's libnccl (no `import torch`)"
        # Not destroyed: the probe exits right after reading its maps, and ncclCommDestroy alone took 0.5 s of a
        # 1.4 s probe on the H200 (docs/gpu-runs/s5-summary-call3.txt); teardown is comm.nccl_churn's to judge.


BANNER_DIR_PREFIX = "envbuild-stackprobe-nccl-"  # NcclBanner's directories: <prefix><owner pid>-<random>
_BANNER_DIR = re.compile(re.escape(BANNER_DIR_PREFIX) + r"(\d+)-")
BANNER_DIR_MIN_AGE_S = 600.0  # far past any probe's life (the doctor's longest mode gives it a few minutes)


def sweep_banner_dirs(tmpdir: Optional[str] = None, min_age_s: float = BANNER_DIR_MIN_AGE_S) -> None:
    """Remove NcclBanner's directories (in `tmpdir`, else the temporary directory) whose owner is gone.

    Why: a process SIGKILLed inside its NCCL init (the init beside the trace stopped or killed by the probe's
    watchdog, the probe killed at the launcher's deadline) cannot remove its directory, so each one carries its
    owner's pid and the next probe removes those of dead owners (this user's only; a live owner's never). Only those
    untouched for `min_age_s`: a probe in another pid namespace sharing this directory (a container) has a pid that
    does not run here, but it lives seconds, not minutes."""
    base = tmpdir or tempfile.gettempdir()
    try:
        names = os.listdir(base)
    except OSError:
        return
    now = time.time()
    for name in names:
        m = _BANNER_DIR.match(name)
        if m is None or running(int(m.group(1))):
            continue
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
            if st.st_uid != os.getuid() or now - st.st_mtime < min_age_s:
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)


class NcclBanner:
    """The probe's 1-rank NCCL group set up to say which NCCL really ran, on both paths (this one and
    `import torch`): a preloaded or path-first libnccl shows in NCCL's own VERSION banner while torch keeps
    reporting the NCCL it was built with (seen on the lent H200: banner 2.28.3, torch 2.28.9).

    Inside the block NVLS is off (one rank anyway; set after the env was recorded) and NCCL_DEBUG=VERSION writes
    into a directory of ours, whatever NCCL_DEBUG the user set; `init_output()` points fd 1 there around the
    communicator's init, since NCCL 2.28 prints the banner to stdout, not to NCCL_DEBUG_FILE, and the probe's own
    stdout is its JSON. `found()` reads the banner; the directory is removed on the way out, or, when its process was
    killed first, by the next probe (sweep_banner_dirs)."""

    def __enter__(self):
        os.environ["NCCL_NVLS_ENABLE"] = "0"
        os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
        self.dir = tempfile.mkdtemp(prefix="%s%d-" % (BANNER_DIR_PREFIX, os.getpid()))  # swept once its owner is gone
        os.environ["NCCL_DEBUG"] = "VERSION"
        os.environ["NCCL_DEBUG_FILE"] = os.path.join(self.dir, "nccl.%p.log")
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.dir, ignore_errors=True)
        return False

    def init_output(self):
        return _stdout_to(os.path.join(self.dir, "stdout.log"))

    def found(self):
        return nccl_banner(self.dir)


class _stdout_to:
    """Point file descriptor 1 at `path` for a block, flushing C stdio before it is pointed back."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self.saved = os.dup(1)
        os.dup2(fd, 1)
        os.close(fd)
        return self

    def __exit__(self, *exc):
        ctypes.CDLL(None).fflush(None)  # C stdio's buffer goes to the file, not to whatever fd 1 is next
        os.dup2(self.saved, 1)
        os.close(self.saved)
        return False


NCCL_BANNER = re.compile(r"NCCL version (\d+\.\d+\.\d+)\S*")


def nccl_banner(directory):
    """{"nccl_banner": the line, "nccl_banner_version": "2.28.3"} from NCCL's VERSION output in `directory`."""
    for name in sorted(os.listdir(directory)):
        try:
            with open(os.path.join(directory, name), "r", errors="replace") as fh:
                m = NCCL_BANNER.search(fh.read(65536))
        except OSError:
            continue
        if m:
            return {"nccl_banner": m.group(0), "nccl_banner_version": m.group(1)}
    return {}
