"""Reading NCCL_DEBUG=INFO output: version, driver version, the transport of every channel, env overrides.

Why parse logs: NCCL exposes none of this through an API torch reaches, and the log is what a user
already has from a failed run (what to extract: "NCCL version, cudaDriverVersion, the
transport lines (via P2P/CUMEM / P2P/IPC / SHM / NVLS) and the first NCCL WARN file.cc:LINE").

Line shapes handled (NCCL 2.1x-2.28, as printed with NCCL_DEBUG=INFO):
    host:pid:tid [0] NCCL INFO NCCL version 2.28.9+cuda13.0
    host:pid:tid [0] NCCL INFO cudaDriverVersion 13000
    host:pid:tid [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
    host:pid:tid [1] NCCL INFO Channel 07/0 : 3[1] -> 1[1] [send] via NET/IB/2/GDRDMA
    host:pid:tid [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1
    host:pid:tid [0] NCCL WARN Cuda failure 999 'unknown error' (file.cc:123 prefix in some versions)
"""
from __future__ import annotations

import glob
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional

# NCCL_DEBUG=INFO with the subsystems whose lines parse() reads.
DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,P2P,SHM,NET"}


def rank_log_env(run_dir: str, rank: int) -> Dict[str, str]:
    """The variables that make rank `rank` of a probe log to its own file in the run directory; %p (the pid,
    expanded by NCCL) keeps apart the logs of any helper process the rank starts."""
    return dict(DEBUG_ENV, NCCL_DEBUG_FILE=os.path.join(run_dir, f"nccl.rank{rank}.%p.log"))


def rank_log_paths(run_dir: str, rank: int) -> List[str]:
    """The files rank_log_env(run_dir, rank) made NCCL write (none when the rank died before NCCL started)."""
    return sorted(glob.glob(os.path.join(glob.escape(run_dir), f"nccl.rank{rank}.*.log")))


_VERSION = re.compile(r"NCCL INFO NCCL version (\S+)")
_DRIVER = re.compile(r"NCCL INFO cudaDriverVersion (\d+)")
_CHANNEL = re.compile(r"NCCL INFO Channel (\d+)(?:/\d+)? : (\d+)\[[^\]]*\] -> (\d+)\[[^\]]*\]"
                      r"(?: \[(send|receive)\])? via (\S+)")
_ENV = re.compile(r"NCCL INFO (NCCL_\w+) set by environment to (.*?)\.?\s*$")
_WARN = re.compile(r"NCCL WARN (.*)$")


def transport_kind(via: str) -> str:
    """The transport family of a `via` string: P2P/CUMEM, P2P/IPC, P2P/direct, SHM, NET, COLLNET, ...

    P2P keeps its second part because CUMEM vs IPC is what the NCCL_CUMEM_ENABLE setting decides."""
    parts = via.split("/")
    head = parts[0].upper()
    if head == "P2P" and len(parts) > 1:
        second = parts[1]
        return "P2P/" + ("direct" if second.lower().startswith("direct") else second.upper())
    return head


@dataclass
class NcclLog:
    """What the NCCL_DEBUG=INFO logs of a run said; lists keep every distinct value so a mismatch between
    ranks (two NCCL versions) stays visible."""

    versions: List[str] = field(default_factory=list)
    cuda_driver_versions: List[int] = field(default_factory=list)
    transports: Counter = field(default_factory=Counter)  # kind -> number of channel connections
    env_overrides: Dict[str, str] = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)

    @property
    def version(self) -> Optional[str]:
        return self.versions[0] if self.versions else None

    @property
    def cuda_driver_version(self) -> Optional[int]:
        return self.cuda_driver_versions[0] if self.cuda_driver_versions else None

    def merge(self, other: "NcclLog") -> "NcclLog":
        for v in other.versions:
            if v not in self.versions:
                self.versions.append(v)
        for v in other.cuda_driver_versions:
            if v not in self.cuda_driver_versions:
                self.cuda_driver_versions.append(v)
        self.transports.update(other.transports)
        self.env_overrides.update(other.env_overrides)
        self.warnings.extend(other.warnings)
        return self

    def summary(self) -> Dict[str, object]:
        """JSON-able digest for a Result's evidence."""
        return {
            "nccl_version": self.version if len(self.versions) <= 1 else self.versions,
            "cuda_driver_version": self.cuda_driver_version if len(self.cuda_driver_versions) <= 1
            else self.cuda_driver_versions,
            "transports": dict(sorted(self.transports.items())),
            "env_overrides": dict(sorted(self.env_overrides.items())),
            "warnings": self.warnings[:10],
        }


def parse(lines: Iterable[str]) -> NcclLog:
    """One rank's log, line by line (a file object works), so a large NCCL_DEBUG=INFO log is never held whole."""
    log = NcclLog()
    seen_channels = set()
    for line in lines:
        if "NCCL" not in line:
            continue
        m = _VERSION.search(line)
        if m:
            if m.group(1) not in log.versions:
                log.versions.append(m.group(1))
            continue
        m = _DRIVER.search(line)
        if m:
            v = int(m.group(1))
            if v not in log.cuda_driver_versions:
                log.cuda_driver_versions.append(v)
            continue
        m = _CHANNEL.search(line)
        if m:
            chan, src, dst, direction, via = m.groups()
            key = (chan, src, dst, direction, via)
            if key in seen_channels:  # the same connection printed again (e.g. a reconnect)
                continue
            seen_channels.add(key)
            log.transports[transport_kind(via)] += 1
            continue
        m = _ENV.search(line)
        if m:
            log.env_overrides[m.group(1)] = m.group(2).strip()
            continue
        m = _WARN.search(line)
        if m:
            log.warnings.append(m.group(1).strip())
    return log


def parse_text(text: str) -> NcclLog:
    """parse() of a log already in memory (a pasted log, a test's sample)."""
    return parse(text.splitlines())


def parse_files(paths: Iterable[str]) -> NcclLog:
    """Parse and merge several per-rank logs (missing files are skipped: a rank may die before NCCL logs)."""
    total = NcclLog()
    for p in paths:
        try:
            with open(p, "r", encoding="utf-8", errors="replace") as fh:
                total.merge(parse(fh))
        except OSError:
            continue
    return total


# Transports that mean "not over NVLink/PCIe peer-to-peer" when both GPUs share a node.
FALLBACK_KINDS = ("SHM", "NET", "COLLNET")


def fallback_kinds(log: NcclLog) -> List[str]:
    """The host-memory or network transports NCCL used, sorted: on an NVLink pair each one is a lost link
    or an environment that steered NCCL away from P2P."""
    return sorted(k for k in log.transports if k in FALLBACK_KINDS)
