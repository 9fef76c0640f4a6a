"""node.ptrace: ptrace_scope, seccomp and CAP_SYS_PTRACE must let CUDA IPC of VMM memory import file descriptors.

Causes (envbuild/knowledge/causes.toml, with their sources): O3 (ptrace/seccomp), B M3 (pidfd_getfd for expandable-segment IPC needs ptrace rights).
"""
from __future__ import annotations

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.report.model import Result, Status

CAT = "node"


@check("node.ptrace", CAT, "ptrace_scope, seccomp and CAP_SYS_PTRACE allow CUDA IPC of VMM memory", causes=("O3", "M3"))
def ptrace(ctx) -> Result:
    """PyTorch IPC of expandable-segment memory imports FDs with pidfd_getfd, which needs ptrace rights over the
    peer process: yama ptrace_scope 3 forbids it for everyone; 1-2 forbid it without CAP_SYS_PTRACE."""
    status = F.self_status(ctx.facts)
    raw = F.read_optional(ctx.facts, "/proc/sys/kernel/yama/ptrace_scope")
    scope = int(raw.strip()) if raw and raw.strip().isdigit() else None
    cap = F.has_capability(status, F.CAP_SYS_PTRACE)
    seccomp = status.get("Seccomp")
    user = F.uid(status)
    ev = {"ptrace_scope": scope, "Seccomp": seccomp, "CapEff": status.get("CapEff"), "cap_sys_ptrace": cap, "uid": user}
    fix = ("set kernel.yama.ptrace_scope=0 (sysctl), or give the job CAP_SYS_PTRACE (--cap-add SYS_PTRACE), or "
           "keep IPC'd tensors out of expandable segments (PYTORCH_CUDA_ALLOC_CONF without expandable_segments)")
    if scope == 3:
        return verdict(Status.FAIL,
                      "yama ptrace_scope=3: no process may attach to another, so pidfd_getfd-based CUDA IPC fails "
                      "(EPERM) even as root; only a reboot lowers it", evidence=ev, causes=["O3", "M3"],
                      remediation="boot with kernel.yama.ptrace_scope set to 0 or 1 (a sysctl.d file), then reboot")
    if scope in (1, 2) and not cap:
        return verdict(Status.WARN,
                      f"yama ptrace_scope={scope} without CAP_SYS_PTRACE (uid {user}): CUDA IPC of expandable-segment "
                      "or VMM memory between sibling processes fails with 'pidfd_getfd: Operation not permitted'",
                      evidence=ev, causes=["O3", "M3"], remediation=fix)
    if seccomp == "2" and not cap:
        return verdict(Status.WARN,
                      "a seccomp filter is active without CAP_SYS_PTRACE: container default profiles block pidfd_getfd",
                      evidence=ev, causes=["O3", "M3"],
                      remediation="run the container with --cap-add SYS_PTRACE or --security-opt seccomp=unconfined")
    what = "no yama" if scope is None else f"ptrace_scope={scope}"
    return verdict(Status.PASS,
                  f"{what}, seccomp mode {seccomp}, CAP_SYS_PTRACE {'yes' if cap else 'no'}: CUDA IPC may import FDs",
                  evidence=ev)
