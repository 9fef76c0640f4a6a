"""One read-only NVML snapshot of the node, as plain JSON-able data.

Why a snapshot and not live calls from each check: the doctor must give the same verdicts on a captured
bundle as on the node, so every NVML reading a check uses is taken here once, saved by RecordingSource and
replayed by BundleSource. Checks only ever see this dict.

Shape (all keys always present; a value NVML could not give is None and the reason sits in `errors`):

    {"nvml_version", "driver_version", "cuda_driver_version" (int, e.g. 13000), "device_count",
     "devices": [{"index", "name", "uuid", "serial", "pci_bus_id", "memory_total_mib", "memory_used_mib",
                  "cuda_capability", "persistence_mode" (bool), "compute_mode" (str), "mig_mode" {current, pending},
                  "ecc_mode" {current, pending}, "ecc_uncorrected" {volatile, aggregate},
                  "retired_pages" {single_bit, double_bit, pending}, "remapped_rows" {correctable,
                  uncorrectable, pending, failure}, "pcie" {gen_current, gen_max, gen_gpu_max, width_current,
                  width_max, replay_counter}, "nvlink": [{link, active, version, remote_pci, errors{...}}],
                  "fabric" {state, status, clique_id} | None, "processes": [{pid, used_memory_mib}],
                  "virtualization_mode", "errors": {field: "Not Supported" | "Insufficient Permissions" | ...}}],
     "p2p": {"0-1": {"read": "ok", "write": "ok", "nvlink": "ok"}, ...},   # every ordered pair
     "errors": {field: reason}}

NotSupported / NoPermission (and any other NVML error) on one call is recorded for that field only; the
snapshot never fails because one reading is missing. No driver or no libnvidia-ml raises FactUnavailable
with NVML's own reason, which becomes the `skip` reason of every check that needs NVML. A driver that does not
answer at all (take_snapshot_within) raises FactHung: an error of every check that asked, never a skip.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional

from envbuild.facts.errors import FactHung, FactUnavailable

MIB = 1024 * 1024

_COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
_VIRT_MODES = {0: "none", 1: "passthrough", 2: "vgpu", 3: "host_vgpu", 4: "host_vsga"}
_FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
_P2P_STATUS = {0: "ok", 1: "chipset_not_supported", 2: "gpu_not_supported", 3: "ioh_topology_not_supported",
               4: "disabled_by_regkey", 5: "not_supported", 6: "unknown"}
_NVLINK_COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class _Reader:
    """Calls NVML functions and files each failure under the field it was reading."""

    def __init__(self, nv: Any):
        self.nv = nv

    def get(self, errors: Dict[str, str], key: str, fn_name: str, *args: Any,
            convert: Optional[Callable[[Any], Any]] = None) -> Any:
        fn = getattr(self.nv, fn_name, None)
        if fn is None:
            errors[key] = f"{fn_name} is not in this nvidia-ml-py"
            return None
        try:
            value = fn(*args)
        except self.nv.NVMLError as exc:
            errors[key] = str(exc)
            return None
        return convert(value) if convert else value


def _init_error(nv: Any, exc: Exception) -> FactUnavailable:
    codes = {
        getattr(nv, "NVML_ERROR_LIBRARY_NOT_FOUND", 12): "libnvidia-ml.so.1 is not installed or not on the loader path",
        getattr(nv, "NVML_ERROR_DRIVER_NOT_LOADED", 9): "the nvidia kernel module is not loaded",
        getattr(nv, "NVML_ERROR_LIB_RM_VERSION_MISMATCH", 18):
            "Driver/library version mismatch: the kernel module and libnvidia-ml differ (driver upgraded without a reboot?)",
        getattr(nv, "NVML_ERROR_NO_PERMISSION", 4): "no permission to open /dev/nvidiactl",
    }
    value = getattr(exc, "value", None)
    why = codes.get(value, "NVML could not start")
    return FactUnavailable(f"no NVIDIA driver: {why} (NVML: {exc})")


# How long a snapshot may take before the driver is called wedged. nvmlInit on a node without persistence mode
# initialises every GPU first (seconds on an 8-GPU node); one that has not answered in minutes is blocked in the
# kernel, as nvidia-smi then is (a GPU fallen off the bus, a driver in a bad state).
NVML_ANSWER_S = 120.0


def hung(seconds: float) -> FactHung:
    """The error of a snapshot that did not answer in `seconds`: the node's trouble, not a fact to skip."""
    return FactHung(f"NVML gave no answer in {seconds:.0f} s: nvmlInit or a device query is blocked in the driver "
                    "(does `nvidia-smi` return? look for `NVRM: Xid` or a GPU fallen off the bus in `dmesg`)")


def take_snapshot_within(seconds: Optional[float] = None) -> Dict[str, Any]:
    """take_snapshot, given up after `seconds` (NVML_ANSWER_S): a call into a wedged driver never returns and cannot
    be interrupted, so it runs in a daemon thread and the caller gets FactHung instead of waiting with it for ever."""
    seconds = NVML_ANSWER_S if seconds is None else seconds
    answer: Dict[str, Any] = {}
    done = threading.Event()

    def read() -> None:
        try:
            answer["snapshot"] = take_snapshot()
        except BaseException as exc:  # handed to the caller as if it had read NVML itself
            answer["error"] = exc
        finally:
            done.set()

    threading.Thread(target=read, name="envbuild-nvml", daemon=True).start()
    if not done.wait(seconds):
        raise hung(seconds)
    if "error" in answer:
        raise answer["error"]
    return answer["snapshot"]


def take_snapshot() -> Dict[str, Any]:
    """Read everything the node checks use from NVML. Raises FactUnavailable when NVML cannot start."""
    try:
        import pynvml as nv  # nvidia-ml-py
    except ImportError as exc:  # pragma: no cover - a dependency of envbuild
        raise FactUnavailable(f"no NVIDIA driver reading possible: nvidia-ml-py is not installed ({exc})") from exc
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        raise _init_error(nv, exc) from exc
    try:
        return _snapshot(nv)
    finally:
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass


def _snapshot(nv: Any) -> Dict[str, Any]:
    r = _Reader(nv)
    errors: Dict[str, str] = {}
    snap: Dict[str, Any] = {
        "nvml_version": r.get(errors, "nvml_version", "nvmlSystemGetNVMLVersion", convert=_text),
        "driver_version": r.get(errors, "driver_version", "nvmlSystemGetDriverVersion", convert=_text),
        "cuda_driver_version": r.get(errors, "cuda_driver_version", "nvmlSystemGetCudaDriverVersion_v2", convert=int),
        "device_count": 0,
        "devices": [],
        "p2p": {},
        "errors": errors,
    }
    count = r.get(errors, "device_count", "nvmlDeviceGetCount", convert=int) or 0
    snap["device_count"] = count
    handles = []
    for i in range(count):
        h = r.get(errors, f"handle[{i}]", "nvmlDeviceGetHandleByIndex", i)
        handles.append(h)
        snap["devices"].append(_device(r, nv, i, h) if h is not None else {"index": i, "errors": dict(
            handle=errors[f"handle[{i}]"])})
    snap["p2p"] = _p2p(r, nv, handles, errors)
    return snap


def _device(r: _Reader, nv: Any, index: int, h: Any) -> Dict[str, Any]:
    e: Dict[str, str] = {}
    d: Dict[str, Any] = {"index": index}
    d["name"] = r.get(e, "name", "nvmlDeviceGetName", h, convert=_text)
    d["uuid"] = r.get(e, "uuid", "nvmlDeviceGetUUID", h, convert=_text)
    d["serial"] = r.get(e, "serial", "nvmlDeviceGetSerial", h, convert=_text)
    pci = r.get(e, "pci_bus_id", "nvmlDeviceGetPciInfo", h)
    d["pci_bus_id"] = _text(pci.busId) if pci is not None else None
    mem = r.get(e, "memory", "nvmlDeviceGetMemoryInfo", h)
    d["memory_total_mib"] = int(mem.total // MIB) if mem is not None else None
    d["memory_used_mib"] = int(mem.used // MIB) if mem is not None else None
    cc = r.get(e, "cuda_capability", "nvmlDeviceGetCudaComputeCapability", h)
    d["cuda_capability"] = f"{cc[0]}.{cc[1]}" if cc is not None else None
    d["persistence_mode"] = r.get(e, "persistence_mode", "nvmlDeviceGetPersistenceMode", h, convert=lambda v: v == 1)
    d["compute_mode"] = r.get(e, "compute_mode", "nvmlDeviceGetComputeMode", h,
                              convert=lambda v: _COMPUTE_MODES.get(v, f"mode {v}"))
    d["mig_mode"] = r.get(e, "mig_mode", "nvmlDeviceGetMigMode", h,
                          convert=lambda v: {"current": v[0] == 1, "pending": v[1] == 1})
    d["ecc_mode"] = r.get(e, "ecc_mode", "nvmlDeviceGetEccMode", h,
                          convert=lambda v: {"current": v[0] == 1, "pending": v[1] == 1})
    unc = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    d["ecc_uncorrected"] = {
        "volatile": r.get(e, "ecc_uncorrected.volatile", "nvmlDeviceGetTotalEccErrors", h, unc,
                          nv.NVML_VOLATILE_ECC, convert=int),
        "aggregate": r.get(e, "ecc_uncorrected.aggregate", "nvmlDeviceGetTotalEccErrors", h, unc,
                           nv.NVML_AGGREGATE_ECC, convert=int),
    }
    d["retired_pages"] = {
        "single_bit": r.get(e, "retired_pages.single_bit", "nvmlDeviceGetRetiredPages", h,
                            nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, convert=len),
        "double_bit": r.get(e, "retired_pages.double_bit", "nvmlDeviceGetRetiredPages", h,
                            nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, convert=len),
        "pending": r.get(e, "retired_pages.pending", "nvmlDeviceGetRetiredPagesPendingStatus", h,
                         convert=lambda v: v == 1),
    }
    d["remapped_rows"] = r.get(e, "remapped_rows", "nvmlDeviceGetRemappedRows", h, convert=lambda v: {
        "correctable": int(v[0]), "uncorrectable": int(v[1]), "pending": bool(v[2]), "failure": bool(v[3])})
    d["pcie"] = {
        "gen_current": r.get(e, "pcie.gen_current", "nvmlDeviceGetCurrPcieLinkGeneration", h, convert=int),
        "gen_max": r.get(e, "pcie.gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", h, convert=int),
        "gen_gpu_max": r.get(e, "pcie.gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration", h, convert=int),
        "width_current": r.get(e, "pcie.width_current", "nvmlDeviceGetCurrPcieLinkWidth", h, convert=int),
        "width_max": r.get(e, "pcie.width_max", "nvmlDeviceGetMaxPcieLinkWidth", h, convert=int),
        "replay_counter": r.get(e, "pcie.replay_counter", "nvmlDeviceGetPcieReplayCounter", h, convert=int),
    }
    d["nvlink"] = _nvlinks(r, nv, h, e)
    d["fabric"] = _fabric(r, nv, h, e)
    procs = r.get(e, "processes", "nvmlDeviceGetComputeRunningProcesses", h)
    d["processes"] = None if procs is None else [
        {"pid": int(p.pid),
         "used_memory_mib": (int(p.usedGpuMemory // MIB) if isinstance(p.usedGpuMemory, int) else None)}
        for p in procs]
    d["virtualization_mode"] = r.get(e, "virtualization_mode", "nvmlDeviceGetVirtualizationMode", h,
                                     convert=lambda v: _VIRT_MODES.get(v, f"mode {v}"))
    d["errors"] = e
    return d


def _nvlinks(r: _Reader, nv: Any, h: Any, e: Dict[str, str]) -> List[Dict[str, Any]]:
    """Every NVLink the GPU reports. Links past the GPU's count answer an error: the loop stops there."""
    links: List[Dict[str, Any]] = []
    for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
        le: Dict[str, str] = {}
        state = r.get(le, "state", "nvmlDeviceGetNvLinkState", h, link)
        if state is None:
            if not links:
                e["nvlink"] = le["state"]
            break
        entry: Dict[str, Any] = {"link": link, "active": state == 1}
        entry["version"] = r.get(le, "version", "nvmlDeviceGetNvLinkVersion", h, link, convert=int)
        remote = r.get(le, "remote_pci", "nvmlDeviceGetNvLinkRemotePciInfo", h, link)
        entry["remote_pci"] = _text(remote.busId) if remote is not None else None
        entry["errors"] = {name: r.get(le, f"errors.{name}", "nvmlDeviceGetNvLinkErrorCounter", h, link, code,
                                       convert=int)
                           for name, code in _NVLINK_COUNTERS.items()}
        if le:
            entry["read_errors"] = le
        links.append(entry)
    return links


def _fabric(r: _Reader, nv: Any, h: Any, e: Dict[str, str]) -> Optional[Dict[str, Any]]:
    """GPU fabric (NVSwitch / fabric manager) registration; None when the driver has no such notion here.

    The versioned call (V, struct v2) is tried first, the deprecated v1 call where V is missing."""
    import ctypes

    variants = [("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfo_v2_t"),
                ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t")]
    for fn_name, struct_name in variants:
        struct = getattr(nv, struct_name, None)
        if struct is None or not hasattr(nv, fn_name):
            continue
        info = struct()
        fe: Dict[str, str] = {}
        r.get(fe, "fabric", fn_name, h, ctypes.byref(info))
        if fe and "Function Not Found" in fe["fabric"]:
            continue
        if fe:
            e.update(fe)
            return None
        status = int(info.status)
        return {
            "state": _FABRIC_STATES.get(int(info.state), f"state {int(info.state)}"),
            "status": "success" if status == 0 else f"nvml error {status}",
            "clique_id": int(info.cliqueId),
        }
    e["fabric"] = "no GPU fabric call in this nvidia-ml-py / driver"
    return None


def _p2p(r: _Reader, nv: Any, handles: List[Any], errors: Dict[str, str]) -> Dict[str, Dict[str, Optional[str]]]:
    # NVML's nvmlGpuP2PCapsIndex_t values (READ=0, WRITE=1, NVLINK=2). Spelled out because nvidia-ml-py
    # 13.x defines NVML_P2P_CAPS_INDEX_READ with a stray trailing comma, i.e. as the tuple (0,).
    caps = {"read": 0, "write": 1, "nvlink": 2}
    out: Dict[str, Dict[str, Optional[str]]] = {}
    for i, hi in enumerate(handles):
        for j, hj in enumerate(handles):
            if i == j or hi is None or hj is None:
                continue
            out[f"{i}-{j}"] = {name: r.get(errors, f"p2p.{i}-{j}.{name}", "nvmlDeviceGetP2PStatus", hi, hj, idx,
                                           convert=lambda v: _P2P_STATUS.get(v, f"status {v}"))
                               for name, idx in caps.items()}
    return out
