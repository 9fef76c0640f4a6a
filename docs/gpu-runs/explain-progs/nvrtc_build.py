# Shared by kernel_autotune.py and dp_grid_sync.py: CUDA C++ compiled with NVRTC (the wheel torch installs) to a
# cubin for this GPU, loaded and launched with the driver API on torch's current context (as custom_kernel.py does).
import ctypes
import glob
import os
import sys


def _find(pattern):
    for d in sys.path:
        hits = sorted(glob.glob(os.path.join(d, "nvidia", "**", pattern), recursive=True))
        hits = [h for h in hits if ".alt." not in h]
        if hits:
            return hits[0]
    return pattern.replace("*", "")


cuda = ctypes.CDLL("libcuda.so.1")
_builtins = _find("libnvrtc-builtins.so.1*")
if os.path.isabs(_builtins):
    ctypes.CDLL(_builtins, mode=ctypes.RTLD_GLOBAL)
nvrtc = ctypes.CDLL(_find("libnvrtc.so.1*"))


class CudaError(RuntimeError):
    def __init__(self, what, res):
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        cuda.cuGetErrorName(res, ctypes.byref(name))
        cuda.cuGetErrorString(res, ctypes.byref(text))
        self.code, self.name = res, (name.value or b"?").decode()
        super().__init__(f"{what} failed: {self.name}: {(text.value or b'?').decode()}")


def check(res, what):
    if res != 0:
        raise CudaError(what, res)


def build(src, name, arch):
    """Compile src (bytes) for arch (e.g. 'sm_90') and return the CUfunction called name."""
    prog = ctypes.c_void_p()
    res = nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, (name + ".cu").encode(), 0, None, None)
    if res != 0:
        raise RuntimeError(f"nvrtcCreateProgram: error {res}")
    opts = (ctypes.c_char_p * 2)(f"-arch={arch}".encode(), b"-lineinfo")
    res = nvrtc.nvrtcCompileProgram(prog, 2, opts)
    if res != 0:
        size = ctypes.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(f"nvrtc compile of {name} failed:\n{log.value.decode()}")
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cuModuleLoadData(ctypes.byref(mod), cubin), f"cuModuleLoadData({name})")
    check(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), f"cuModuleGetFunction({name})")
    return fn, size.value


def launch(fn, grid, block, smem, args, stream):
    """args: ctypes values; returns the CUresult of cuLaunchKernel (launch errors come back here, synchronously)."""
    params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
    return cuda.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, smem, ctypes.c_void_p(stream), params, None)


def set_max_dynamic_smem(fn, nbytes):
    check(cuda.cuFuncSetAttribute(fn, 8, nbytes),  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
          f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={nbytes})")
