# A fused row-softmax kernel (NVRTC) autotuned at start-up, as kernel libraries do: every (threads, row cached in
# shared memory) config is launched and timed; configs the device refuses (2048 threads per block, more dynamic
# shared memory than the default 48 KiB without the opt-in, more than the opt-in maximum) come back from
# cuLaunchKernel / cuFuncSetAttribute as CUDA_ERROR_INVALID_VALUE, are logged and skipped (a config needing the
# opt-in is retried with it). The winner is checked against torch.softmax and the tuning cache written. Healthy.
# Knobs: ROWS, COLS (comma list of row lengths), ITERS.
import json
import logging
import os

import torch

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s [autotune] %(message)s")
log = logging.getLogger("autotune")

SRC = rb"""
extern "C" __global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int cols, int cache) {
  extern __shared__ float smem[];
  float* red = smem;
  float* row = smem + blockDim.x;
  const float* xr = x + (long long)blockIdx.x * cols;
  float* yr = y + (long long)blockIdx.x * cols;
  float m = __int_as_float(0xff800000);
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    float v = xr[i];
    if (cache) row[i] = v;
    m = v > m ? v : m;
  }
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = red[threadIdx.x + s] > red[threadIdx.x] ? red[threadIdx.x + s] : red[threadIdx.x];
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) sum += __expf((cache ? row[i] : xr[i]) - m);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  float inv = 1.f / red[0];
  for (int i = threadIdx.x; i < cols; i += blockDim.x) yr[i] = __expf((cache ? row[i] : xr[i]) - m) * inv;
}
"""

if __name__ == "__main__":
    import ctypes

    rows, iters = int(os.environ.get("ROWS", "4096")), int(os.environ.get("ITERS", "20"))
    props = torch.cuda.get_device_properties(0)
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    optin = getattr(props, "shared_memory_per_block_optin", 0)
    log.info("torch %s, %s (%s, %d SMs), opt-in shared memory per block %s B", torch.__version__, props.name, arch,
             props.multi_processor_count, optin or "?")
    results, cache_file = {}, "softmax_rows.autotune.json"
    try:
        import nvrtc_build as nb
        fn, nbytes = nb.build(SRC, "softmax_rows", arch)
        log.info("softmax_rows: %d bytes of cubin for %s", nbytes, arch)
    except Exception:
        log.exception("could not build the fused softmax; every shape will use torch.softmax")
        fn = None
    stream = torch.cuda.current_stream().cuda_stream
    for cols in [int(c) for c in os.environ.get("COLS", "16384,65536").split(",")]:
        x = torch.randn(rows, cols, device="cuda")
        y = torch.empty_like(x)
        ref = torch.softmax(x, dim=1)
        print(f"\nsoftmax_rows autotune, {rows} x {cols} fp32 on {props.name}", flush=True)
        print(f"{'threads':>8} {'cache':>6} {'smem(B)':>9} {'time(ms)':>9} {'GB/s':>8}  status", flush=True)
        best = None
        for cache in (0, 1):
            for threads in (128, 256, 512, 1024, 2048):
                smem = 4 * threads + (4 * cols if cache else 0)
                args = [ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), ctypes.c_int(cols), ctypes.c_int(cache)]
                status, ms = "ok", None
                if fn is None:
                    status = "no kernel"
                else:
                    res = nb.launch(fn, rows, threads, smem, args, stream)
                    if res != 0 and smem > 48 * 1024 and threads <= 1024:
                        log.warning("config threads=%d cache=%d: %s; retrying with the dynamic shared memory opt-in",
                                    threads, cache, nb.CudaError("cuLaunchKernel", res))
                        try:
                            nb.set_max_dynamic_smem(fn, smem)
                            res = nb.launch(fn, rows, threads, smem, args, stream)
                        except nb.CudaError as e:
                            log.warning("config threads=%d cache=%d skipped: %s", threads, cache, e)
                            res, status = e.code, e.name
                    if res != 0:
                        if status == "ok":
                            e = nb.CudaError(f"cuLaunchKernel(grid={rows}, block={threads}, smem={smem})", res)
                            log.warning("config threads=%d cache=%d skipped: %s", threads, cache, e)
                            status = e.name
                    else:
                        torch.cuda.synchronize()
                        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        t0.record()
                        for _ in range(iters):
                            nb.launch(fn, rows, threads, smem, args, stream)
                        t1.record()
                        torch.cuda.synchronize()
                        ms = t0.elapsed_time(t1) / iters
                        err = (y - ref).abs().max().item()
                        if err > 1e-5:
                            status = f"wrong (max err {err:.2e})"
                            ms = None
                        elif best is None or ms < best[0]:
                            best = (ms, threads, cache, smem, err)
                t = f"{ms:9.3f}" if ms else "        -"
                gbs = f"{2 * x.numel() * 4 / (ms * 1e6):8.1f}" if ms else "       -"
                print(f"{threads:>8} {cache:>6} {smem:>9} {t} {gbs}  {status}", flush=True)
        if best:
            results[str(cols)] = {"threads": best[1], "cache": best[2], "smem": best[3], "ms": round(best[0], 4)}
            print(f"best for cols={cols}: threads={best[1]} cache={best[2]} ({best[0]:.3f} ms); "
                  f"max |y - torch.softmax| = {best[4]:.2e}", flush=True)
        else:
            results[str(cols)] = {"fallback": "torch.softmax"}
            print(f"no config ran for cols={cols}: using torch.softmax", flush=True)
        del x, y, ref
    with open(cache_file, "w") as f:
        json.dump({"device": props.name, "arch": arch, "softmax_rows": results}, f, indent=1)
    print(f"\nautotune cache written to {cache_file} ({len(results)} shapes)", flush=True)
