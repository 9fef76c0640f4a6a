"""What one probe process can say about itself: mapped CUDA/NCCL libraries, NCCL env, IPC privileges.

Why in the payload: which libnccl a process runs is only knowable from inside that process
(/proc/self/maps). The envbuild side compares the ranks; it also reads NCCL's own log (which transport
NCCL picked), from the NCCL_DEBUG_FILE it gave each rank, with envbuild/doctor/nccl_log.py.
Causes (envbuild/knowledge/causes.toml, with their sources): C3 (two libnccl copies, ranks on different NCCL builds), C5 (NCCL_CUMEM_ENABLE
differing inside one communicator: "via P2P/CUMEM" on one side, "P2P/IPC" on the other), M3/O3
(ptrace_scope, seccomp, CapEff gate pidfd_getfd).

Stdlib only; the parsing functions are pure and tested in CI on recorded text.
"""
from __future__ import annotations

import ctypes
import os
import re
from typing import Dict, List, Optional

from _common import library_name, mapped_paths, nccl_version_string

# Real libraries only: libnccl.so, libnccl.so.2, libnccl.so.2.28.3 (not libnccl-net plugins).
_LIB_PATTERNS = {
    "libnccl": re.compile(r"^libnccl\.so(\.\d+)*$"),
    "libcuda": re.compile(r"^libcuda\.so(\.\d+)*$"),
    "libcudart": re.compile(r"^libcudart\.so(\.\d+)*$"),
}

# Variables that must agree across every process of one communicator (envbuild/knowledge/causes.toml C4/C5).
COMM_ENV = ("NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
            "NCCL_CUMEM_HOST_ENABLE", "NCCL_P2P_LEVEL", "NCCL_PROTO", "NCCL_ALGO")


def mapped_libs(maps_text: str) -> Dict[str, List[str]]:
    """{"libnccl": [paths], "libcuda": [...], "libcudart": [...]} from /proc/<pid>/maps text, each path once.

    Paths are compared as the kernel prints them; the same file mapped in several segments counts once.
    A "(deleted)" suffix is kept, because a library replaced on disk while mapped is worth seeing.
    """
    out: Dict[str, List[str]] = {k: [] for k in _LIB_PATTERNS}
    for path in mapped_paths(maps_text):
        for key, pat in _LIB_PATTERNS.items():
            if pat.match(library_name(path)):
                out[key].append(path)
    return out


def nccl_version_of(path: str) -> Optional[str]:
    """ncclGetVersion() of the library at `path` (already mapped: dlopen returns that copy), e.g. "2.28.9"."""
    try:
        lib = ctypes.CDLL(path)
        v = ctypes.c_int()
        if lib.ncclGetVersion(ctypes.byref(v)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return nccl_version_string(v.value)


def comm_env(environ: Optional[Dict[str, str]] = None) -> Dict[str, Optional[str]]:
    """The communicator-relevant NCCL variables of this process (None = unset)."""
    env = os.environ if environ is None else environ
    return {k: env.get(k) for k in COMM_ENV}


def process_privileges(status_text: str, ptrace_scope_text: Optional[str]) -> Dict[str, object]:
    """uid, Seccomp mode, CAP_SYS_PTRACE and yama ptrace_scope from /proc/self/status and the sysctl."""
    fields: Dict[str, str] = {}
    for line in status_text.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            fields[k.strip()] = v.strip()
    cap_eff = int(fields.get("CapEff", "0"), 16)
    scope = None
    if ptrace_scope_text is not None and ptrace_scope_text.strip().isdigit():
        scope = int(ptrace_scope_text.strip())
    return {
        "uid": int(fields.get("Uid", "-1").split()[0]),
        "seccomp": {"0": "disabled", "1": "strict", "2": "filter"}.get(fields.get("Seccomp", ""), None),
        "cap_sys_ptrace": bool(cap_eff & (1 << 19)),
        "ptrace_scope": scope,
    }


def read_text(path: str) -> Optional[str]:
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def self_facts() -> Dict[str, object]:
    """This process's mapped libraries (with NCCL versions), comm env and IPC privileges."""
    libs = mapped_libs(read_text("/proc/self/maps") or "")
    return {
        "pid": os.getpid(),
        "libs": libs,
        "libnccl_versions": {p: nccl_version_of(p.replace(" (deleted)", "")) for p in libs["libnccl"]},
        "comm_env": comm_env(),
        "ld_preload": os.environ.get("LD_PRELOAD"),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF"),
        "privileges": process_privileges(read_text("/proc/self/status") or "",
                                         read_text("/proc/sys/kernel/yama/ptrace_scope")),
    }


def expandable_segments_on(alloc_conf: Optional[str]) -> bool:
    """Whether a PYTORCH_CUDA_ALLOC_CONF string turns expandable segments on."""
    if not alloc_conf:
        return False
    for item in alloc_conf.split(","):
        if ":" in item:
            k, v = item.split(":", 1)
            if k.strip() == "expandable_segments":
                return v.strip().lower() in ("true", "1")
    return False
