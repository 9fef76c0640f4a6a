# A sample cache of many mid-size GPU buffers (6 MiB each) of which a third are kept, then one large workspace:
# the caching allocator's segments each keep a live buffer, so the memory they reserve cannot be given back.
import torch

free, total = torch.cuda.mem_get_info()
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}: {free / 2**30:.1f} of {total / 2**30:.1f} GiB free", flush=True)
n = int(0.8 * free) // (6 << 20)
cache = [torch.empty(6 << 20, dtype=torch.uint8, device="cuda") for _ in range(n)]
print(f"cached {n} samples: allocated {torch.cuda.memory_allocated() / 2**30:.1f} GiB, "
      f"reserved {torch.cuda.memory_reserved() / 2**30:.1f} GiB", flush=True)
cache = [t for i, t in enumerate(cache) if i % 3 == 1]
free, _ = torch.cuda.mem_get_info()
unalloc = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
print(f"evicted 2/3 of the cache: allocated {torch.cuda.memory_allocated() / 2**30:.1f} GiB, "
      f"reserved {torch.cuda.memory_reserved() / 2**30:.1f} GiB, device free {free / 2**30:.1f} GiB", flush=True)
need = free + unalloc // 2
print(f"allocating a {need / 2**30:.1f} GiB workspace", flush=True)
ws = torch.empty(need, dtype=torch.uint8, device="cuda")
print("workspace ok", flush=True)
