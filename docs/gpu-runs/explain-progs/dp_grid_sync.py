# Data parallelism by hand (gloo, run under torchrun, every rank on the one GPU): each rank computes its gradients
# on the GPU, the flat gradient is all_reduced on the CPU. Each step also runs a custom logit-statistics kernel
# (NVRTC) whose blocks meet at a software grid barrier (an atomic counter they spin on), with the grid sized from
# the batch: 8192 elements a block. That is only correct while every block of the grid is resident at once.
# Knobs: LONG_AT=s: from step s on, rank 1's batches hold LONG_TOKENS tokens (a long-context shard), so its grid
# has more blocks than the GPU can hold: the resident blocks spin waiting for blocks that are never scheduled
# (the kernel gives up after SPIN_S s, a safety bound); STEPS; PG_TIMEOUT (s).
import datetime
import math
import os
import time

import torch
import torch.distributed as dist

import nvrtc_build as nb

SRC = rb"""
extern "C" __global__ void __launch_bounds__(1024) logit_stats(const float* __restrict__ x, unsigned n, float* out,
    unsigned* arrived, unsigned long long* t0, unsigned long long limit_ns, int* gave_up) {
  __shared__ float red[1024];
  float m = __int_as_float(0xff800000);
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float v = x[i];
    m = v > m ? v : m;
  }
  red[threadIdx.x] = m;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s && red[threadIdx.x + s] > red[threadIdx.x]) red[threadIdx.x] = red[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[blockIdx.x] = red[0];
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    atomicCAS(t0, 0ULL, now);
    __threadfence();
    atomicAdd(arrived, 1u);
    while (atomicAdd(arrived, 0u) < gridDim.x) {
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
      if (now - atomicAdd(t0, 0ULL) > limit_ns) { atomicExch(gave_up, 1); break; }
    }
    __threadfence();
  }
  __syncthreads();
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    float g = out[0];
    for (unsigned b = 1; b < gridDim.x; ++b) g = out[b] > g ? out[b] : g;
    out[gridDim.x] = g;
  }
}
"""

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=int(os.environ.get("PG_TIMEOUT", "12"))))
rank, world = dist.get_rank(), dist.get_world_size()
dev = torch.device("cuda:0")
torch.cuda.set_device(dev)
major, minor = torch.cuda.get_device_capability()
fn, _ = nb.build(SRC, "logit_stats", f"sm_{major}{minor}")
long_at, long_tokens = int(os.environ.get("LONG_AT", "-1")), int(os.environ.get("LONG_TOKENS", "32768"))
spin_ns = int(float(os.environ.get("SPIN_S", "40")) * 1e9)
VOCAB = 1024


def logit_stats(logits):
    n = logits.numel()
    blocks = math.ceil(n / 8192)
    out = torch.empty(blocks + 1, device=dev)
    sync = torch.zeros(4, dtype=torch.int64, device=dev)  # [arrived (u32), t0 (u64), gave_up (i32)]
    import ctypes
    base = sync.data_ptr()
    args = [ctypes.c_void_p(logits.data_ptr()), ctypes.c_uint(n), ctypes.c_void_p(out.data_ptr()),
            ctypes.c_void_p(base), ctypes.c_void_p(base + 8), ctypes.c_ulonglong(spin_ns), ctypes.c_void_p(base + 16)]
    nb.check(nb.launch(fn, blocks, 1024, 0, args, torch.cuda.current_stream().cuda_stream), "cuLaunchKernel(logit_stats)")
    if sync[2].item():
        raise RuntimeError(f"logit_stats: grid barrier of {blocks} blocks timed out")
    return out[blocks].item()


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 256), torch.nn.Linear(256, 1024), torch.nn.GELU(),
                            torch.nn.Linear(1024, VOCAB)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
params = [p for p in model.parameters()]
print(f"[rank{rank}] world {world}, pid {os.getpid()}, {torch.cuda.get_device_name(dev)}, "
      f"{sum(p.numel() for p in params) / 1e6:.2f} M params", flush=True)
g = torch.Generator(device=dev).manual_seed(1000 + rank)
for step in range(int(os.environ.get("STEPS", "8"))):
    t0 = time.time()
    tokens = long_tokens if (rank == 1 and 0 <= long_at <= step) else 512
    ids = torch.randint(0, VOCAB, (tokens + 1,), device=dev, generator=g)
    logits = model(ids[:-1])
    loss = torch.nn.functional.cross_entropy(logits, ids[1:])
    loss.backward()
    zmax = logit_stats(logits.detach())
    flat = torch.cat([p.grad.flatten() for p in params]).cpu()
    dist.all_reduce(flat)
    flat /= world
    off = 0
    for p in params:
        p.grad.copy_(flat[off:off + p.numel()].view_as(p), non_blocking=True)
        off += p.numel()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"[rank{rank}] it {step:3d} | tokens {tokens:6d} | loss {loss.item():.4f} | max logit {zmax:.3f} | "
          f"{(time.time() - t0) * 1000:.0f} ms", flush=True)
dist.barrier()
dist.destroy_process_group()
print(f"[rank{rank}] done", flush=True)
