# A custom fused kernel (CUDA C++ compiled with NVRTC, loaded with the driver API) run on a torch tensor.
#   ARCH: the architecture the kernel is built for (default: this GPU's); SHARD_OFFSET: element offset of the shard
import ctypes
import glob
import os
import sys

import torch

SRC = rb"""
extern "C" __global__ void fused_scale(float *x, long long offset, unsigned n, float a) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[offset + i] = a * x[offset + i];
}
"""


def find_lib(pattern):
    for d in sys.path:
        hits = sorted(glob.glob(os.path.join(d, "nvidia", "**", pattern), recursive=True))
        if hits:
            return hits[0]
    return pattern.replace("*", "")


cuda = ctypes.CDLL("libcuda.so.1")
builtins = find_lib("libnvrtc-builtins.so.1*")
if os.path.isabs(builtins):
    ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
nvrtc = ctypes.CDLL(find_lib("libnvrtc.so.1*"))


def check(res, what):
    if res != 0:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        cuda.cuGetErrorName(res, ctypes.byref(name))
        cuda.cuGetErrorString(res, ctypes.byref(text))
        raise RuntimeError(f"{what} failed: {name.value.decode()}: {text.value.decode()}")


x = torch.ones(1 << 20, device="cuda")
torch.cuda.synchronize()
major, minor = torch.cuda.get_device_capability()
arch = os.environ.get("ARCH", f"sm_{major}{minor}")
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}; building fused_scale for {arch}", flush=True)
prog = ctypes.c_void_p()
assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), SRC, b"fused_scale.cu", 0, None, None) == 0
opts = (ctypes.c_char_p * 1)(f"-arch={arch}".encode())
res = nvrtc.nvrtcCompileProgram(prog, 1, opts)
if res != 0:
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    raise RuntimeError(f"nvrtc: {log.value.decode()}")
size = ctypes.c_size_t()
nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
cubin = ctypes.create_string_buffer(size.value)
nvrtc.nvrtcGetCUBIN(prog, cubin)
print(f"fused_scale: {size.value} bytes of cubin", flush=True)
mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
check(cuda.cuModuleLoadData(ctypes.byref(mod), cubin), "cuModuleLoadData(fused_scale)")
check(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"fused_scale"), "cuModuleGetFunction")
shards = [0, int(os.environ.get("SHARD_OFFSET", str(1 << 19)))]
n = 1 << 19
for k, off in enumerate(shards):
    args = [ctypes.c_void_p(x.data_ptr()), ctypes.c_longlong(off), ctypes.c_uint(n), ctypes.c_float(2.0)]
    params = (ctypes.c_void_p * 4)(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    check(cuda.cuLaunchKernel(fn, n // 256, 1, 1, 256, 1, 1, 0, stream, params, None), "cuLaunchKernel")
    print(f"fused_scale shard {k} launched", flush=True)
print("sum", x.sum().item(), flush=True)
