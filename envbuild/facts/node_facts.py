"""Small readers shared by the node checks, all going through a FactSource (so bundles replay them).

Each returns parsed data or raises FactUnavailable with a reason a person can act on; "file absent" is
returned as None where absence is a normal answer (no /etc/ld.so.preload, no logind.conf).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from envbuild.facts import node_parse as P
from envbuild.facts.source import FactHung, FactSource, FactUnavailable


def read_optional(facts: FactSource, path: str) -> Optional[str]:
    """File text, or None when the file does not exist (FactUnavailable still propagates)."""
    try:
        return facts.read_text(path)
    except (FileNotFoundError, IsADirectoryError):
        return None


def listdir_optional(facts: FactSource, path: str) -> Optional[List[str]]:
    try:
        return facts.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def devices(facts: FactSource) -> List[Dict[str, Any]]:
    """NVML devices; FactUnavailable when NVML is unavailable or reports no GPU."""
    devs = facts.nvml().get("devices", [])
    if not devs:
        raise FactUnavailable("NVML reports no GPU on this node")
    return devs


def driver_module(facts: FactSource) -> Optional[P.DriverModule]:
    """The loaded nvidia kernel module, or None when /proc/driver/nvidia/version is absent (not loaded)."""
    text = read_optional(facts, "/proc/driver/nvidia/version")
    return P.parse_driver_version(text) if text is not None else None


def kernel_release(facts: FactSource) -> Optional[str]:
    text = read_optional(facts, "/proc/sys/kernel/osrelease")
    return text.strip() if text else None


def self_status(facts: FactSource) -> Dict[str, str]:
    text = facts.read_text("/proc/self/status")
    return P.parse_status(text)


def self_environ(facts: FactSource) -> Dict[str, str]:
    return P.parse_environ(facts.read_text("/proc/self/environ"))


def uid(status: Dict[str, str]) -> Optional[int]:
    try:
        return int(status.get("Uid", "").split()[1])  # effective uid
    except (IndexError, ValueError):
        return None


def has_capability(status: Dict[str, str], bit: int) -> Optional[bool]:
    cap = status.get("CapEff")
    if cap is None:
        return None
    return bool(int(cap, 16) >> bit & 1)


CAP_SYS_PTRACE = 19  # linux/capability.h


def kernel_log(facts: FactSource) -> Tuple[str, str]:
    """(text, which command) from `journalctl -k -b`, else `dmesg`; FactUnavailable with both reasons."""
    reasons = []
    hung = []
    for name in ("journalctl-kernel", "dmesg"):
        try:
            res = facts.command(name)
        except FactHung as exc:
            hung.append(f"{name}: {exc}")
            continue
        except FactUnavailable as exc:
            reasons.append(f"{name}: {exc}")
            continue
        # an empty journal (no journald in a VM or container) says nothing; an empty dmesg is an answer
        if res.returncode == 0 and (res.stdout.strip() or name == "dmesg"):
            return res.stdout, name
        why = (res.stderr.strip().splitlines() or [f"exit {res.returncode}, no output"])[-1]
        reasons.append(f"{name}: {why}")
    if hung:  # neither answered and one of them hung: the node's trouble, not a missing permission
        raise FactHung("kernel log unreadable: " + "; ".join(hung + reasons)
                       + " (a hung journald, filesystem or driver on this node?)")
    raise FactUnavailable("kernel log not readable here (" + "; ".join(reasons)
                          + "); run as root or grant CAP_SYSLOG / the systemd-journal group")
