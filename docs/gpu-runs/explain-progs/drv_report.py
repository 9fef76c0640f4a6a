"""Node report of a GPU job's prolog: driver-API device attributes read through ctypes (the attribute table was
generated from a newer cuda.h than this driver knows, so a few ids are refused), then a bf16 GEMM timing with torch.
LIBCUDA names the driver library to load (default libcuda.so.1); DEVICE=cpu runs the torch part on the CPU."""
import ctypes, json, os, sys, time
import torch

ERR = {0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 3: "CUDA_ERROR_NOT_INITIALIZED",
       34: "CUDA_ERROR_STUB_LIBRARY", 35: "CUDA_ERROR_INSUFFICIENT_DRIVER", 100: "CUDA_ERROR_NO_DEVICE",
       101: "CUDA_ERROR_INVALID_DEVICE", 803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 999: "CUDA_ERROR_UNKNOWN"}
ATTRS = [("MAX_THREADS_PER_BLOCK", 1), ("MULTIPROCESSOR_COUNT", 16), ("L2_CACHE_SIZE", 38),
         ("GLOBAL_MEMORY_BUS_WIDTH", 37), ("COMPUTE_CAPABILITY_MAJOR", 75), ("COMPUTE_CAPABILITY_MINOR", 76),
         ("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", 97), ("VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED", 102),
         ("GPU_DIRECT_RDMA_SUPPORTED", 116), ("HANDLE_TYPE_FABRIC_SUPPORTED", 128), ("MULTICAST_SUPPORTED", 132),
         # ids past this driver's cuda.h: the table came from a newer toolkit's header
         ("attribute 190 (newer header)", 190), ("attribute 191 (newer header)", 191), ("attribute 205 (newer header)", 205)]


def name(rc):
    return ERR.get(rc, f"CUresult {rc}")


def driver_report(lib):
    print(f"[prolog] driver library: {lib}")
    drv = ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    rows, problems = {}, []
    rc = drv.cuInit(0)
    if rc != 0:
        print(f"[prolog] ERROR cuInit(0) returned {rc} ({name(rc)}); no driver attributes")
        return rows, [f"cuInit: {name(rc)}"]
    ver = ctypes.c_int()
    drv.cuDriverGetVersion(ctypes.byref(ver))
    dev = ctypes.c_int()
    rc = drv.cuDeviceGet(ctypes.byref(dev), 0)
    if rc != 0:
        print(f"[prolog] ERROR cuDeviceGet(0) returned {rc} ({name(rc)})")
        return rows, [f"cuDeviceGet: {name(rc)}"]
    buf = ctypes.create_string_buffer(128)
    drv.cuDeviceGetName(buf, 128, dev)
    total = ctypes.c_size_t()
    drv.cuDeviceTotalMem_v2(ctypes.byref(total), dev)
    rows["name"] = buf.value.decode()
    rows["driver API version"] = f"{ver.value // 1000}.{ver.value % 1000 // 10}"
    rows["total memory GiB"] = round(total.value / 2**30, 1)
    for attr, aid in ATTRS:
        v = ctypes.c_int(-1)
        rc = drv.cuDeviceGetAttribute(ctypes.byref(v), aid, dev)
        if rc != 0:
            print(f"[prolog] WARNING cuDeviceGetAttribute({attr}, id={aid}) failed: {rc} ({name(rc)}); "
                  f"left out of the report")
            rows[attr] = "n/a"
            continue
        rows[attr] = v.value
    return rows, problems


def main():
    t0 = time.time()
    lib = os.environ.get("LIBCUDA", "libcuda.so.1")
    if os.environ.get("DEVICE") == "cpu" and "LIBCUDA" not in os.environ:
        rows, problems = {"name": "cpu (no driver report)"}, []
    else:
        rows, problems = driver_report(lib)
    dev = torch.device(os.environ.get("DEVICE", "cuda"), 0) if os.environ.get("DEVICE", "cuda") == "cuda" \
        else torch.device("cpu")
    print(f"[prolog] torch {torch.__version__} cuda {torch.version.cuda}: is_available={torch.cuda.is_available()}")
    n = 4096 if dev.type == "cuda" else 512
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    it = 50 if dev.type == "cuda" else 5
    t = time.time()
    for _ in range(it):
        c = a @ b
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    dt = (time.time() - t) / it
    rows["bf16 GEMM TFLOP/s"] = round(2 * n ** 3 / dt / 1e12, 1)
    rows["GEMM checksum"] = round(float(c.float().abs().mean()), 3)
    print("\n node report")
    print(" " + "-" * 58)
    for k, v in rows.items():
        print(f" {k:<40} {v}")
    print(" " + "-" * 58)
    with open("device_report.json", "w") as f:
        json.dump(rows, f, indent=1)
    if problems:
        print(f"[prolog] driver report incomplete: {'; '.join(problems)}")
        sys.exit(1)
    print(f"[prolog] report written to device_report.json in {time.time() - t0:.1f} s; node accepted")


if __name__ == "__main__":
    main()
