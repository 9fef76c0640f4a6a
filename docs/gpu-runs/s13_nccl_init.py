"""Session 13 (issue 26): where a 1-rank NCCL group's seconds go, outside the doctor. Loads the libcudart and libnccl
of the torch that `python3` imports (by path, as the static probe's --resolve-init does), then times each call in
this fresh process: cudaGetDeviceCount (cuInit), cudaSetDevice + cudaMalloc (the primary context),
ncclGetUniqueId, ncclCommInitRank, one all_reduce; prints one JSON line with `done_at` (time.time()) so the parent
can time the process's own exit. Usage: python3 s13_nccl_init.py  (variant settings come from the environment)."""
import ctypes, glob, importlib.util, json, os, sys, time

t0 = time.monotonic()
marks = {}


def mark(name):
    marks[name] = round(time.monotonic() - t0, 4)


spec = importlib.util.find_spec("torch")
site = os.path.dirname(spec.submodule_search_locations[0])
libs = sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib", "libcudart.so.1*")))
nccl_libs = sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib", "libnccl.so.2")))
cudart = ctypes.CDLL(libs[0], mode=ctypes.RTLD_GLOBAL)
nccl = ctypes.CDLL(nccl_libs[0], mode=ctypes.RTLD_GLOBAL)
mark("load")
n = ctypes.c_int()
rc = cudart.cudaGetDeviceCount(ctypes.byref(n))
mark("cuInit (cudaGetDeviceCount)")
buf = ctypes.c_void_p()
cudart.cudaSetDevice(0)
cudart.cudaMalloc(ctypes.byref(buf), ctypes.c_size_t(4096))
cudart.cudaMemset(buf, 0, ctypes.c_size_t(4096))
cudart.cudaDeviceSynchronize()
mark("context + malloc")
class UniqueId(ctypes.Structure):  # ncclUniqueId: 128 bytes, passed by value to ncclCommInitRank
    _fields_ = [("internal", ctypes.c_char * 128)]


uid = UniqueId()
r1 = nccl.ncclGetUniqueId(ctypes.byref(uid))
mark("ncclGetUniqueId")
comm = ctypes.c_void_p()
r2 = nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0)
mark("ncclCommInitRank")
r3 = nccl.ncclAllReduce(buf, buf, ctypes.c_size_t(1024), 7, 0, comm, ctypes.c_void_p(0))
cudart.cudaDeviceSynchronize()
mark("all_reduce")
print(json.dumps({"variant": os.environ.get("VARIANT", "default"), "libs": [libs[0], nccl_libs[0]],
                  "rc": [rc, r1, r2, r3], "marks": marks, "done_at": time.time()}), flush=True)
os._exit(0)
