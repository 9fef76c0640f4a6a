# A trainer whose input batches are copied to the GPU through the CUDA driver API (cuMemcpyHtoD into a preallocated
# torch buffer, as a custom loader library does). A self-test on the main thread copies one batch and checks it.
# Then, to overlap the copies with compute, staging moves to a ThreadPoolExecutor thread that makes no CUDA runtime
# call and never makes the context current (no cuCtxSetCurrent / torch.cuda.set_device in the thread): the driver
# refuses the copy with CUDA_ERROR_INVALID_CONTEXT, and the trainer's future.result() raises it.
#   STEPS
import concurrent.futures
import ctypes
import time

import torch

cuda = ctypes.CDLL("libcuda.so.1")


class CudaError(RuntimeError):
    pass


def check(res, what):
    if res != 0:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        cuda.cuGetErrorName(res, ctypes.byref(name))
        cuda.cuGetErrorString(res, ctypes.byref(text))
        raise CudaError(f"{what} failed: {(name.value or b'?').decode()} ({res}): {(text.value or b'?').decode()}")


class Stager:
    """Copies a host batch into a fixed device buffer with cuMemcpyHtoD_v2."""

    def __init__(self, shape):
        self.dev_buf = torch.empty(shape, device="cuda")
        self.host = torch.empty(shape).pin_memory()
        self.nbytes = self.host.numel() * self.host.element_size()

    def stage(self, batch):
        self.host.copy_(batch)
        check(cuda.cuMemcpyHtoD_v2(ctypes.c_uint64(self.dev_buf.data_ptr()), ctypes.c_void_p(self.host.data_ptr()),
                                   ctypes.c_size_t(self.nbytes)), "cuMemcpyHtoD_v2")
        return self.dev_buf


ctx = ctypes.c_void_p()
torch.cuda.init()
torch.zeros(1, device="cuda")
check(cuda.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}; main thread context 0x{ctx.value or 0:x}", flush=True)
stagers = [Stager((512, 1024)) for _ in range(2)]
g = torch.Generator().manual_seed(0)
probe = torch.randn(512, 1024, generator=g)
ok = torch.equal(stagers[0].stage(probe).cpu(), probe)
print(f"staging self-test on the main thread: {'ok' if ok else 'MISMATCH'} ({stagers[0].nbytes >> 20} MiB)", flush=True)

model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="h2d-stager")
print("staging moved to a background thread (overlap H2D with compute)", flush=True)
nxt = pool.submit(stagers[0].stage, torch.randn(512, 1024, generator=g))
t0 = time.time()
for step in range(20):
    x = nxt.result()
    nxt = pool.submit(stagers[(step + 1) % 2].stage, torch.randn(512, 1024, generator=g))
    loss = torch.nn.functional.mse_loss(model(x), x)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.5f}", flush=True)
pool.shutdown()
print(f"training finished in {time.time() - t0:.1f} s", flush=True)
