"""Parsers for the node files and command outputs the node checks read.

Pure functions of text, so they are tested on real captured text and shared by checks without each one
re-inventing a regex. Reading goes through FactSource; nothing here touches the filesystem.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from envbuild.data.checks._common import library_name, mapped_paths

UNLIMITED = None  # a limit of "unlimited" is None in parsed limits


@dataclass(frozen=True)
class DriverModule:
    version: Optional[str]
    open_module: bool
    line: str


_DRIVER_VERSION = re.compile(r"\b(\d{3,4}\.\d+(?:\.\d+)?)\b")


def parse_driver_version(text: str) -> DriverModule:
    """/proc/driver/nvidia/version: 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04 ...'."""
    line = next((ln for ln in text.splitlines() if ln.startswith("NVRM")), text.strip().splitlines()[0] if text.strip() else "")
    m = _DRIVER_VERSION.search(line.split("for", 1)[-1]) or _DRIVER_VERSION.search(line)
    return DriverModule(version=m.group(1) if m else None, open_module="Open Kernel Module" in line, line=line.strip())


def version_from_soname(path: str, stem: str) -> Optional[str]:
    """'.../libcuda.so.580.159.04' -> '580.159.04'; None for 'libcuda.so.1' or a path without a version."""
    m = re.search(re.escape(stem) + r"\.so\.(\d{3,4}\.\d+(?:\.\d+)?)$", path)
    return m.group(1) if m else None


def mapped_libraries(maps_text: str, stem: str) -> List[str]:
    """Distinct paths of a library (e.g. 'libnvidia-ml') in a /proc/<pid>/maps text, in load order."""
    return [p for p in mapped_paths(maps_text) if library_name(p).startswith(stem + ".so")]


def parse_limits(text: str) -> Dict[str, Tuple[Optional[int], Optional[int], str]]:
    """/proc/<pid>/limits -> {'Max locked memory': (soft, hard, unit)}, None meaning unlimited."""
    out: Dict[str, Tuple[Optional[int], Optional[int], str]] = {}
    for ln in text.splitlines()[1:]:
        m = re.match(r"^(.*?)\s{2,}(\S+)\s+(\S+)\s*(\S*)\s*$", ln)
        if not m:
            continue
        name, soft, hard, unit = m.groups()

        def num(v: str) -> Optional[int]:
            return None if v == "unlimited" else int(v)

        try:
            out[name.strip()] = (num(soft), num(hard), unit)
        except ValueError:
            continue
    return out


def parse_status(text: str) -> Dict[str, str]:
    """/proc/<pid>/status -> {'Seccomp': '2', 'CapEff': '000001ffffffffff', 'Uid': '0 0 0 0', ...}."""
    out: Dict[str, str] = {}
    for ln in text.splitlines():
        if ":" in ln:
            k, v = ln.split(":", 1)
            out[k.strip()] = v.strip()
    return out


def parse_environ(text: str) -> Dict[str, str]:
    """/proc/<pid>/environ (NUL separated) -> dict."""
    out: Dict[str, str] = {}
    for item in text.split("\0"):
        if "=" in item:
            k, v = item.split("=", 1)
            out[k] = v
    return out


def parse_mounts(text: str) -> List[Dict[str, str]]:
    """/proc/mounts -> [{'device', 'mountpoint', 'fstype', 'options'}] (octal escapes left as they are)."""
    out = []
    for ln in text.splitlines():
        parts = ln.split()
        if len(parts) >= 4:
            out.append({"device": parts[0], "mountpoint": parts[1], "fstype": parts[2], "options": parts[3]})
    return out


_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4}


def parse_size(value: str) -> Optional[int]:
    """A tmpfs size= option ('16g', '8388608k', '64m', '50%') in bytes; None for a percentage."""
    m = re.fullmatch(r"(\d+)([kKmMgGtT]?)", value.strip())
    if not m:
        return None
    return int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]


def parse_df(text: str) -> Optional[Dict[str, int]]:
    """`df -P -B1 PATH` -> {'size', 'used', 'avail'} in bytes (second line), None if unparsable."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2:
        return None
    parts = lines[-1].split()
    try:
        return {"size": int(parts[1]), "used": int(parts[2]), "avail": int(parts[3])}
    except (IndexError, ValueError):
        return None


def parse_bool_param(text: str) -> Optional[bool]:
    """A kernel module parameter ('Y'/'N'/'1'/'0')."""
    v = text.strip().upper()
    if v in ("Y", "1"):
        return True
    if v in ("N", "0"):
        return False
    return None


# Kernel-log events that mean a GPU needs attention. Xid meanings: NVIDIA "Xid Errors" catalog
# (https://docs.nvidia.com/deploy/xid-errors/), envbuild/knowledge/causes.toml D3.
XID_LINE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")
_OTHER_EVENTS = [
    ("fallen_off_bus", re.compile(r"fallen off the bus", re.I)),
    ("gsp_timeout", re.compile(r"Timeout waiting for RPC from GSP|GSP RPC timeout|_kgspRpcRecvPoll|kgspHealthCheck", re.I)),
    ("reset_required", re.compile(r"RESET_REQUIRED|GPU requires a reset|needs to be reset", re.I)),
    ("uvm_hmm", re.compile(r"uvm_hmm_\w+", re.I)),
]


@dataclass(frozen=True)
class KernelEvent:
    kind: str  # "xid" or one of _OTHER_EVENTS
    xid: Optional[int]
    pci: Optional[str]
    line: str


def is_gpu_kernel_line(line: str) -> bool:
    """The cheap filter in front of scan_kernel_log: only these lines can hold an event it reports."""
    return "NVRM" in line or "GSP" in line or "uvm" in line or "nvidia" in line.lower()


def scan_kernel_log(text: str) -> List[KernelEvent]:
    """NVIDIA Xid, fallen-off-the-bus, GSP and reset lines from `journalctl -k` / `dmesg` output."""
    events: List[KernelEvent] = []
    for ln in text.splitlines():
        if not is_gpu_kernel_line(ln):
            continue
        m = XID_LINE.search(ln)
        if m:
            events.append(KernelEvent("xid", int(m.group(2)), m.group(1), ln.strip()))
            continue
        for kind, rx in _OTHER_EVENTS:
            if rx.search(ln):
                events.append(KernelEvent(kind, None, None, ln.strip()))
                break
    return events


def parse_logind_remove_ipc(texts: List[Tuple[str, str]]) -> Tuple[Optional[bool], Optional[str]]:
    """The effective RemoveIPC from logind.conf then logind.conf.d/*.conf (later files win).

    Returns (value, file that set it); (None, None) when no file sets it (systemd's default is yes)."""
    value: Optional[bool] = None
    where: Optional[str] = None
    for path, text in texts:
        section = None
        for ln in text.splitlines():
            s = ln.strip()
            if not s or s.startswith(("#", ";")):
                continue
            if s.startswith("["):
                section = s.strip("[]").strip()
                continue
            if section == "Login" and "=" in s:
                k, v = (x.strip() for x in s.split("=", 1))
                if k == "RemoveIPC":
                    value = v.lower() in ("yes", "true", "1", "on")
                    where = path
    return value, where


def parse_lspci_acs(text: str) -> Dict[str, str]:
    """`lspci -vvv` -> {bdf: ACSCtl line} for devices that show an ACSCtl line."""
    out: Dict[str, str] = {}
    current = None
    for ln in text.splitlines():
        if ln and not ln[0].isspace():
            current = ln.split(" ", 1)[0]
            if current.count(":") == 1:  # 'bb:dd.f' -> '0000:bb:dd.f'
                current = "0000:" + current
            continue
        if current and "ACSCtl:" in ln:
            out[current.lower()] = ln.strip()
    return out


def pci_short(bus_id: str) -> str:
    """NVML bus ids are '00000000:18:00.0'; sysfs and lspci use '0000:18:00.0'."""
    bus_id = bus_id.lower()
    dom, _, rest = bus_id.partition(":")
    return f"{int(dom, 16):04x}:{rest}" if rest else bus_id
