"""Fake nodes for tests: fake /proc + /sys trees, bundles derived from a real captured bundle, a fake pynvml.

CI has no GPU and no driver. What it cannot have is replayed from the real H200 bundle
(tests/fixtures/bundles/h200x2, captured with `envbuild capture --node`), and fault variants are derived
from it with ONE edit each, so a test shows that exactly that fault is caught:

    derive_bundle(H200X2, tmp_path / "b", lambda b: b.write("/proc/sys/kernel/yama/ptrace_scope", "3\\n"))

Edits get a BundleEditor: node files (write/append/remove/unreadable), directory listings, links, command
outputs, and the NVML and stack JSON (engineer H2's stack faults use `b.stack(fn)`).
"""
from __future__ import annotations

import json
import shutil
import types
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Union

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "bundles"
H200X2 = FIXTURES / "h200x2"

Edit = Callable[["BundleEditor"], None]


def write_tree(root: Path, files: Dict[str, Union[str, bytes]]) -> Path:
    """Write {'/proc/self/limits': text, ...} under root (a fake / for LiveSource(root))."""
    root = Path(root)
    for path, data in files.items():
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            dest.write_bytes(data)
        else:
            dest.write_text(data)
    return root


class BundleEditor:
    """Edits a bundle in place, keeping its index consistent (a written file is no longer 'absent', ...)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.meta = self.root / ".envbuild"
        self.index = self._load("index.json")
        self.commands = self._load("commands.json")
        self.nvml_doc = self._load("nvml.json")
        self.stack_doc = self._load("stack.json")

    def _load(self, name: str) -> Dict[str, Any]:
        return json.loads((self.meta / name).read_text())

    def _forget(self, path: str) -> None:
        if path in self.index["absent"]:
            self.index["absent"].remove(path)
        self.index["unreadable"].pop(path, None)

    # node files
    def read(self, path: str) -> str:
        return (self.root / path.lstrip("/")).read_text()

    def write(self, path: str, text: str) -> None:
        self._forget(path)
        dest = self.root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
        self._add_to_parent(path)

    def _add_to_parent(self, path: str) -> None:
        """List `path` in its parent; a parent recorded as absent comes into existence (and so on upwards)."""
        parent, _, name = path.rpartition("/")
        parent = parent or "/"
        if parent in self.index["absent"]:
            self.index["absent"].remove(parent)
            self.index["dirs"][parent] = []
            if parent != "/":
                self._add_to_parent(parent)
        listing = self.index["dirs"].get(parent)
        if listing is not None and name not in listing:
            listing.append(name)
            listing.sort()

    def replace(self, path: str, old: str, new: str) -> None:
        text = self.read(path)
        if old not in text:
            raise AssertionError(f"{old!r} not in {path} of the bundle")
        self.write(path, text.replace(old, new))

    def remove(self, path: str) -> None:
        """Make a file or a directory (and all below it) absent: FileNotFoundError when read or listed."""
        self._forget(path)
        local = self.root / path.lstrip("/")
        if local.is_dir():
            shutil.rmtree(local)
        else:
            local.unlink(missing_ok=True)
        for d in [d for d in self.index["dirs"] if d == path or d.startswith(path + "/")]:
            del self.index["dirs"][d]
        self.index["absent"] = sorted(set(self.index["absent"]) | {path})

    def unreadable(self, path: str, reason: str) -> None:
        """Mark a file or directory as unreadable when captured (non-root)."""
        (self.root / path.lstrip("/")).unlink(missing_ok=True)
        if path in self.index["absent"]:
            self.index["absent"].remove(path)
        self.index["dirs"].pop(path, None)
        self.index["unreadable"][path] = reason

    def listdir(self, path: str, names: Iterable[str]) -> None:
        self._forget(path)
        self.index["dirs"][path] = sorted(names)

    def link(self, path: str, target: str) -> None:
        self.index["links"][path] = target

    # commands, NVML, stack
    def command(self, name: str, stdout: Optional[str] = None, returncode: int = 0, stderr: str = "",
                unavailable: Optional[str] = None) -> None:
        self.commands[name] = ({"unavailable": unavailable} if unavailable is not None
                               else {"returncode": returncode, "stdout": stdout or "", "stderr": stderr})

    def command_stdout(self, name: str) -> str:
        return self.commands[name]["stdout"]

    def nvml(self, fn: Callable[[Dict[str, Any]], None]) -> None:
        fn(self.nvml_doc["data"])

    def nvml_unavailable(self, reason: str) -> None:
        self.nvml_doc = {"data": None, "unavailable": reason}

    def device(self, index: int, fn: Callable[[Dict[str, Any]], None]) -> None:
        fn(self.nvml_doc["data"]["devices"][index])

    def stack(self, fn: Callable[[Dict[str, Any]], None]) -> None:
        fn(self.stack_doc["data"])

    def flush(self) -> None:
        for name, doc in (("index.json", self.index), ("commands.json", self.commands),
                          ("nvml.json", self.nvml_doc), ("stack.json", self.stack_doc)):
            (self.meta / name).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        report = self.meta / "report.json"  # the node's own verdicts no longer describe a derived bundle
        if report.exists():
            report.unlink()


def derive_bundle(src: Path, dst: Path, *edits: Edit) -> Path:
    """Copy a bundle to dst and apply the edits, in order."""
    shutil.copytree(src, dst)
    editor = BundleEditor(dst)
    for edit in edits:
        edit(editor)
    editor.flush()
    return Path(dst)


# A fake pynvml for envbuild.facts.nvml.take_snapshot: CI has no libnvidia-ml. Each device is a dict of
# NVML function name -> return value, or an NVMLError code to raise.
NOT_SUPPORTED, NO_PERMISSION, LIBRARY_NOT_FOUND, DRIVER_NOT_LOADED, RM_MISMATCH = 3, 4, 12, 9, 18
_MESSAGES = {3: "Not Supported", 4: "Insufficient Permissions", 12: "NVML Shared Library Not Found",
             9: "Driver Not Loaded", 18: "RM has detected an NVML/RM version mismatch.", 2: "Invalid Argument"}


class Raise:
    def __init__(self, code: int):
        self.code = code


def fake_pynvml(devices: List[Dict[str, Any]], init_error: Optional[int] = None,
                system: Optional[Dict[str, Any]] = None, p2p: Any = 0) -> types.ModuleType:
    """A module with pynvml's names, answering from `devices` (per-device {function name: value | Raise})."""
    nv = types.ModuleType("pynvml")

    class NVMLError(Exception):
        def __init__(self, value: int):
            self.value = value

        def __str__(self) -> str:
            return _MESSAGES.get(self.value, f"error {self.value}")

    nv.NVMLError = NVMLError
    for name, value in dict(NVML_ERROR_LIBRARY_NOT_FOUND=12, NVML_ERROR_DRIVER_NOT_LOADED=9,
                            NVML_ERROR_LIB_RM_VERSION_MISMATCH=18, NVML_ERROR_NO_PERMISSION=4,
                            NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1, NVML_VOLATILE_ECC=0, NVML_AGGREGATE_ECC=1,
                            NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS=0,
                            NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR=1, NVML_NVLINK_MAX_LINKS=36).items():
        setattr(nv, name, value)
    sysvals = {"nvmlSystemGetNVMLVersion": "13.580.159.04", "nvmlSystemGetDriverVersion": "580.159.04",
               "nvmlSystemGetCudaDriverVersion_v2": 13000}
    sysvals.update(system or {})

    def answer(value: Any) -> Any:
        if isinstance(value, Raise):
            raise NVMLError(value.code)
        return value

    def nvmlInit() -> None:
        if init_error is not None:
            raise NVMLError(init_error)

    nv.nvmlInit = nvmlInit
    nv.nvmlShutdown = lambda: None
    for name, value in sysvals.items():
        setattr(nv, name, (lambda v: (lambda: answer(v)))(value))
    nv.nvmlDeviceGetCount = lambda: len(devices)
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    names = {n for d in devices for n in d}
    for name in names:
        def fn(handle, *args, _name=name):
            value = devices[handle].get(_name, Raise(NOT_SUPPORTED))
            if callable(value) and not isinstance(value, Raise):
                value = value(*args)  # may itself return a Raise
            return answer(value)
        setattr(nv, name, fn)
    nv.nvmlDeviceGetP2PStatus = lambda a, b, idx: answer(p2p)
    return nv


def h200_like_device(index: int) -> Dict[str, Any]:
    """Answers of one healthy H200 as NVML gives them (values as read on the lent machine)."""
    pci = types.SimpleNamespace(busId=f"00000000:{0x18 + index:02X}:00.0".encode())
    mem = types.SimpleNamespace(total=143771 * 1024 * 1024, used=512 * 1024 * 1024)
    return {
        "nvmlDeviceGetName": "NVIDIA H200", "nvmlDeviceGetUUID": f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd",
        "nvmlDeviceGetSerial": Raise(NO_PERMISSION), "nvmlDeviceGetPciInfo": pci, "nvmlDeviceGetMemoryInfo": mem,
        "nvmlDeviceGetCudaComputeCapability": (9, 0), "nvmlDeviceGetPersistenceMode": 1,
        "nvmlDeviceGetComputeMode": 0, "nvmlDeviceGetMigMode": (0, 0), "nvmlDeviceGetEccMode": (1, 1),
        "nvmlDeviceGetTotalEccErrors": 0, "nvmlDeviceGetRetiredPages": [],
        "nvmlDeviceGetRetiredPagesPendingStatus": 0, "nvmlDeviceGetRemappedRows": (0, 0, 0, 0),
        "nvmlDeviceGetCurrPcieLinkGeneration": 1, "nvmlDeviceGetMaxPcieLinkGeneration": 5,
        "nvmlDeviceGetGpuMaxPcieLinkGeneration": 5, "nvmlDeviceGetCurrPcieLinkWidth": 16,
        "nvmlDeviceGetMaxPcieLinkWidth": 16, "nvmlDeviceGetPcieReplayCounter": 0,
        "nvmlDeviceGetNvLinkState": lambda link: 1 if link < 18 else Raise(2),  # H200: 18 links
        "nvmlDeviceGetNvLinkVersion": 4,
        "nvmlDeviceGetNvLinkRemotePciInfo": types.SimpleNamespace(busId=b"00000000:00:00.0"),
        "nvmlDeviceGetNvLinkErrorCounter": 0, "nvmlDeviceGetComputeRunningProcesses": [],
        "nvmlDeviceGetVirtualizationMode": 1,
    }
