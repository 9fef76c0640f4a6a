"""The CUDA driver calls the IPC, offload and P2P probes make, through ctypes on the libcuda the process maps.

Why ctypes and not cuda-python: the probes must call exactly the driver that torch and NCCL in this
process use (a second binding could resolve another libcuda), and the virtual-memory (cuMem*) and IPC
calls are few and have fixed C signatures. cuda-python's version is still recorded as evidence by the
payloads when it is importable.

Only allocation, mapping, sharing and copies live here. Multicast objects (cuMulticast*) are
deliberately absent: creating them on a shared NVSwitch machine can take its GPUs down.
Stdlib only; the library is opened on first use, so importing this module never needs a GPU.
"""
from __future__ import annotations

import ctypes
from typing import Dict, List, Optional, Tuple

CUDA_SUCCESS = 0
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704

# cuda.h enums (values checked against cuda-python 13's CUdevice_attribute / CUmemAllocationHandleType).
ATTR = {
    "pci_bus_id": 33,
    "pci_domain_id": 50,
    "virtual_memory_management": 102,
    "handle_type_posix_fd": 103,
    "gpu_direct_rdma_with_vmm": 110,
    "ipc_event": 125,
    "handle_type_fabric": 128,
}
HANDLE_POSIX_FD = 1
HANDLE_FABRIC = 8
MEM_ALLOCATION_TYPE_PINNED = 1
MEM_LOCATION_TYPE_DEVICE = 1
MEM_ACCESS_FLAGS_PROT_READWRITE = 3
GRANULARITY_RECOMMENDED = 1
IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1

CUdeviceptr = ctypes.c_ulonglong
CUmemGenericAllocationHandle = ctypes.c_ulonglong


class CUmemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class CUmemAllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", CUmemLocation),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class CUmemAccessDesc(ctypes.Structure):
    _fields_ = [("location", CUmemLocation), ("flags", ctypes.c_int)]


class CUipcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


class CUmemFabricHandle(ctypes.Structure):
    _fields_ = [("data", ctypes.c_ubyte * 64)]


class CudaError(RuntimeError):
    """A driver call returned an error; `code` and `name` are the driver's (e.g. 999, CUDA_ERROR_UNKNOWN)."""

    def __init__(self, call: str, code: int, name: str):
        super().__init__(f"{call} failed: {code} {name}")
        self.call = call
        self.code = code
        self.name = name


class Driver:
    """Thin checked wrappers over libcuda. Every method raises CudaError with the call's name."""

    def __init__(self, lib: Optional[ctypes.CDLL] = None):
        self.lib = lib or ctypes.CDLL("libcuda.so.1")
        self._check("cuInit", self.lib.cuInit(0))

    # --- basics -------------------------------------------------------------------------------------
    def error_name(self, code: int) -> str:
        p = ctypes.c_char_p()
        if self.lib.cuGetErrorName(code, ctypes.byref(p)) == 0 and p.value:
            return p.value.decode()
        return f"CUresult {code}"

    def _check(self, call: str, code: int) -> None:
        if code != CUDA_SUCCESS:
            raise CudaError(call, code, self.error_name(code) if hasattr(self, "lib") else str(code))

    def driver_version(self) -> int:
        v = ctypes.c_int()
        self._check("cuDriverGetVersion", self.lib.cuDriverGetVersion(ctypes.byref(v)))
        return v.value

    def device(self, ordinal: int) -> int:
        d = ctypes.c_int()
        self._check("cuDeviceGet", self.lib.cuDeviceGet(ctypes.byref(d), ordinal))
        return d.value

    def attribute(self, name: str, ordinal: int) -> int:
        v = ctypes.c_int()
        self._check(f"cuDeviceGetAttribute({name})",
                    self.lib.cuDeviceGetAttribute(ctypes.byref(v), ATTR[name], self.device(ordinal)))
        return v.value

    def mem_info(self) -> Tuple[int, int]:
        """(free, total) bytes of the current context's device."""
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._check("cuMemGetInfo", self.lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)))
        return free.value, total.value

    def synchronize(self) -> None:
        self._check("cuCtxSynchronize", self.lib.cuCtxSynchronize())

    def memcpy(self, dst: int, src: int, nbytes: int) -> None:
        """Unified-addressing copy between any two device pointers this process can access."""
        self._check("cuMemcpy", self.lib.cuMemcpy(CUdeviceptr(dst), CUdeviceptr(src), ctypes.c_size_t(nbytes)))
        self.synchronize()

    def enable_peer_access(self, ordinal: int, peer: int) -> str:
        """Enable access from the current context (device `ordinal`) to `peer`'s primary context.

        Returns "enabled" or "already enabled"; raises CudaError otherwise (e.g. 217 peer access unsupported).
        """
        ctx = ctypes.c_void_p()
        self._check("cuDevicePrimaryCtxRetain", self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx),
                                                                                   self.device(peer)))
        try:
            code = self.lib.cuCtxEnablePeerAccess(ctx, 0)
        finally:
            self.lib.cuDevicePrimaryCtxRelease_v2(self.device(peer))
        if code == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
            return "already enabled"
        self._check(f"cuCtxEnablePeerAccess({ordinal}->{peer})", code)
        return "enabled"

    # --- virtual memory management (what NCCL's cuMem mode, expandable segments and TMS use) ---------
    def _prop(self, ordinal: int, handle_types: int) -> CUmemAllocationProp:
        prop = CUmemAllocationProp()
        prop.type = MEM_ALLOCATION_TYPE_PINNED
        prop.requestedHandleTypes = handle_types
        prop.location.type = MEM_LOCATION_TYPE_DEVICE
        prop.location.id = ordinal
        return prop

    def granularity(self, ordinal: int, handle_types: int = HANDLE_POSIX_FD) -> int:
        g = ctypes.c_size_t()
        prop = self._prop(ordinal, handle_types)
        self._check("cuMemGetAllocationGranularity",
                    self.lib.cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(prop),
                                                           GRANULARITY_RECOMMENDED))
        return g.value

    def create(self, ordinal: int, nbytes: int, handle_types: int = HANDLE_POSIX_FD) -> int:
        h = CUmemGenericAllocationHandle()
        prop = self._prop(ordinal, handle_types)
        self._check("cuMemCreate", self.lib.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(nbytes),
                                                        ctypes.byref(prop), ctypes.c_ulonglong(0)))
        return h.value

    def reserve(self, nbytes: int, alignment: int = 0, hint: int = 0) -> int:
        p = CUdeviceptr()
        self._check("cuMemAddressReserve", self.lib.cuMemAddressReserve(
            ctypes.byref(p), ctypes.c_size_t(nbytes), ctypes.c_size_t(alignment), CUdeviceptr(hint),
            ctypes.c_ulonglong(0)))
        return p.value

    def map(self, ptr: int, nbytes: int, handle: int) -> None:
        self._check("cuMemMap", self.lib.cuMemMap(CUdeviceptr(ptr), ctypes.c_size_t(nbytes), ctypes.c_size_t(0),
                                                  CUmemGenericAllocationHandle(handle), ctypes.c_ulonglong(0)))

    def set_access(self, ptr: int, nbytes: int, ordinals: List[int]) -> None:
        descs = (CUmemAccessDesc * len(ordinals))()
        for k, o in enumerate(ordinals):
            descs[k].location.type = MEM_LOCATION_TYPE_DEVICE
            descs[k].location.id = o
            descs[k].flags = MEM_ACCESS_FLAGS_PROT_READWRITE
        self._check("cuMemSetAccess", self.lib.cuMemSetAccess(CUdeviceptr(ptr), ctypes.c_size_t(nbytes), descs,
                                                              ctypes.c_size_t(len(ordinals))))

    def unmap(self, ptr: int, nbytes: int) -> None:
        self._check("cuMemUnmap", self.lib.cuMemUnmap(CUdeviceptr(ptr), ctypes.c_size_t(nbytes)))

    def address_free(self, ptr: int, nbytes: int) -> None:
        self._check("cuMemAddressFree", self.lib.cuMemAddressFree(CUdeviceptr(ptr), ctypes.c_size_t(nbytes)))

    def release(self, handle: int) -> None:
        self._check("cuMemRelease", self.lib.cuMemRelease(CUmemGenericAllocationHandle(handle)))

    def export_fd(self, handle: int) -> int:
        fd = ctypes.c_int(-1)
        self._check("cuMemExportToShareableHandle(POSIX_FD)", self.lib.cuMemExportToShareableHandle(
            ctypes.byref(fd), CUmemGenericAllocationHandle(handle), HANDLE_POSIX_FD, ctypes.c_ulonglong(0)))
        return fd.value

    def import_fd(self, fd: int) -> int:
        h = CUmemGenericAllocationHandle()
        self._check("cuMemImportFromShareableHandle(POSIX_FD)", self.lib.cuMemImportFromShareableHandle(
            ctypes.byref(h), ctypes.c_void_p(fd), HANDLE_POSIX_FD))
        return h.value

    def export_fabric(self, handle: int) -> bytes:
        fh = CUmemFabricHandle()
        self._check("cuMemExportToShareableHandle(FABRIC)", self.lib.cuMemExportToShareableHandle(
            ctypes.byref(fh), CUmemGenericAllocationHandle(handle), HANDLE_FABRIC, ctypes.c_ulonglong(0)))
        return bytes(fh.data)

    def import_fabric(self, data: bytes) -> int:
        fh = CUmemFabricHandle()
        ctypes.memmove(fh.data, data, 64)
        h = CUmemGenericAllocationHandle()
        self._check("cuMemImportFromShareableHandle(FABRIC)", self.lib.cuMemImportFromShareableHandle(
            ctypes.byref(h), ctypes.byref(fh), HANDLE_FABRIC))
        return h.value

    def map_handle(self, handle: int, nbytes: int, access: List[int]) -> int:
        """Reserve a VA range, map `handle` into it and grant read/write to the `access` devices."""
        ptr = self.reserve(nbytes)
        try:
            self.map(ptr, nbytes, handle)
        except CudaError:
            self.address_free(ptr, nbytes)
            raise
        self.set_access(ptr, nbytes, access)
        return ptr

    def unmap_free(self, ptr: int, nbytes: int) -> None:
        self.unmap(ptr, nbytes)
        self.address_free(ptr, nbytes)

    # --- plain allocations and legacy IPC (cudaIpc*, what torch.multiprocessing uses by default) ---
    def mem_alloc(self, nbytes: int) -> int:
        p = CUdeviceptr()
        self._check("cuMemAlloc", self.lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(nbytes)))
        return p.value

    def mem_free(self, ptr: int) -> None:
        self._check("cuMemFree", self.lib.cuMemFree_v2(CUdeviceptr(ptr)))

    def ipc_get(self, ptr: int) -> bytes:
        h = CUipcMemHandle()
        self._check("cuIpcGetMemHandle", self.lib.cuIpcGetMemHandle(ctypes.byref(h), CUdeviceptr(ptr)))
        return ctypes.string_at(ctypes.addressof(h), 64)

    def ipc_open(self, data: bytes) -> int:
        h = CUipcMemHandle()
        ctypes.memmove(ctypes.addressof(h), data, 64)
        p = CUdeviceptr()
        self._check("cuIpcOpenMemHandle", self.lib.cuIpcOpenMemHandle_v2(ctypes.byref(p), h,
                                                                         IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return p.value

    def ipc_close(self, ptr: int) -> None:
        self._check("cuIpcCloseMemHandle", self.lib.cuIpcCloseMemHandle(CUdeviceptr(ptr)))


def describe_error(exc: BaseException) -> Dict[str, object]:
    """A JSON-able record of a failed call: the driver's code and name when it is a CudaError."""
    if isinstance(exc, CudaError):
        return {"call": exc.call, "code": exc.code, "error": exc.name}
    return {"error": f"{type(exc).__name__}: {exc}"}
