"""OS limits and privileges a bare-metal run does not get from `docker run`: ptrace/seccomp, ulimits, /dev/shm,
systemd RemoveIPC and /etc/ld.so.preload.

Research: error999.md §2 E (O1 /dev/shm and RemoveIPC, O2 ulimits, O3 ptrace/seccomp), B M3 (pidfd_getfd for
expandable-segment IPC needs ptrace rights), D8 (interposers in /etc/ld.so.preload).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from envbuild.data.checks._common import human_bytes
from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts import node_parse as P
from envbuild.facts.source import FactUnavailable
from envbuild.report.model import Metric, Result, Status

CAT = "node"
KIB, MIB, GIB = 1024, 1024 ** 2, 1024 ** 3

# Linux's default RLIMIT_MEMLOCK since 5.16 (MLOCK_LIMIT raised from 64 KiB to 8 MiB). Below it, someone set a
# restriction on purpose (old Docker / kernel default 64 KiB): pinned and IB-registered memory then fails.
MEMLOCK_FLOOR = 8 * MIB
MEMLOCK_SRC = "Linux 5.16 default MLOCK_LIMIT 8 MiB; NCCL docs: memlock unlimited (--ulimit memlock=-1)"
STACK_FLOOR = 8 * MIB
STACK_SRC = "glibc/Linux default 8 MiB (ulimit -s 8192); research O2: unlimited makes glibc give threads 2 MiB"
NOFILE_FLOOR = 65536
NOFILE_SRC = ("Ray's cluster launcher starts `ulimit -n 65536; ray start`; NCCL raises the soft nofile to the hard "
              "one (NCCL docs runtime_and_mpi_issues.rst)")
SHM_FLOOR = 1 * GIB
SHM_SRC = "Docker's 64 MiB default /dev/shm is what fails NCCL (research O1); slime runs with --shm-size 16g"
SHM_FULL = 0.90


def _fmt_bytes(n: Optional[int]) -> str:
    return "unlimited" if n is None else human_bytes(n)


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


def _docker_limits(ctx) -> Tuple[Optional[str], Optional[int], Optional[str]]:
    """(memlock, stack_bytes, source) the profile's image is run with, or Nones."""
    prof = ctx.profile
    if prof is None or prof.docker_run is None:
        return None, None, None
    d = prof.docker_run
    return d.memlock, d.stack_bytes, f"profile {prof.name} docker_run ({d.source})"


@check("node.ulimits", CAT, "memlock, stack and nofile limits as the image's docker run sets them", causes=("O2",))
def ulimits(ctx) -> Result:
    """/proc/self/limits against the profile's `docker run --ulimit` flags, or against sane floors without one."""
    limits = P.parse_limits(ctx.facts.read_text("/proc/self/limits"))
    memlock = limits.get("Max locked memory")
    stack = limits.get("Max stack size")
    nofile = limits.get("Max open files")
    if memlock is None or stack is None or nofile is None:
        raise FactUnavailable("/proc/self/limits lacks memlock/stack/nofile lines")
    want_memlock, want_stack, psrc = _docker_limits(ctx)
    ev: Dict[str, Any] = {"memlock": memlock[:2], "stack": stack[:2], "nofile": nofile[:2], "profile_limits": psrc}
    fails: List[str] = []
    warns: List[str] = []
    ml = memlock[0]
    if ml is not None and ml < MEMLOCK_FLOOR:
        fails.append(f"memlock {_fmt_bytes(ml)} < {_fmt_bytes(MEMLOCK_FLOOR)}: pinned / RDMA-registered memory fails")
    elif ml is not None and want_memlock == "unlimited":
        warns.append(f"memlock {_fmt_bytes(ml)}, the image runs with unlimited")
    st = stack[0]
    if st is None:
        warns.append("stack unlimited: glibc then gives threads (NCCL's included) 2 MiB stacks")
    elif want_stack is not None and st != want_stack:
        warns.append(f"stack {_fmt_bytes(st)}, the image runs with {_fmt_bytes(want_stack)}")
    elif st < STACK_FLOOR:
        warns.append(f"stack {_fmt_bytes(st)} < {_fmt_bytes(STACK_FLOOR)}")
    nf = nofile[1]
    if nf is not None and nf < NOFILE_FLOOR:
        warns.append(f"hard nofile {nf} < {NOFILE_FLOOR} (Ray starts under ulimit -n 65536): Ray, NCCL proxies "
                     "and cuMem handles use many FDs")
    metrics = [
        Metric("memlock_soft", -1 if ml is None else ml, "bytes (-1 = unlimited)",
               "unlimited" if want_memlock == "unlimited" else f">= {MEMLOCK_FLOOR}", psrc or MEMLOCK_SRC),
        Metric("stack_soft", -1 if st is None else st, "bytes (-1 = unlimited)",
               f"== {want_stack}" if want_stack else f">= {STACK_FLOOR}, not unlimited", psrc or STACK_SRC),
        Metric("nofile_hard", -1 if nf is None else nf, "files (-1 = unlimited)", f">= {NOFILE_FLOOR}", NOFILE_SRC),
    ]
    fix = ("raise the limits for the job's user (limits.conf / systemd LimitMEMLOCK=infinity, LimitSTACK=64M) or "
           "launch with `ulimit -l unlimited -s 65536`, as `docker run --ulimit memlock=-1 --ulimit stack=67108864`")
    if fails:
        return verdict(Status.FAIL, "; ".join(fails + warns), evidence=ev, metrics=metrics, causes=["O2"],
                      remediation=fix)
    if warns:
        return verdict(Status.WARN, "; ".join(warns), evidence=ev, metrics=metrics, causes=["O2"],
                      remediation=fix)
    return verdict(Status.PASS, f"memlock {_fmt_bytes(ml)}, stack {_fmt_bytes(st)}, hard nofile {nf}",
                  evidence=ev, metrics=metrics)


def _gpu_process_count(ctx) -> Optional[int]:
    try:
        devs = ctx.facts.nvml().get("devices", [])
    except FactUnavailable:
        return None
    if any(d.get("processes") is None for d in devs):
        return None
    return sum(len(d["processes"]) for d in devs)


@check("node.dev_shm", CAT, "/dev/shm large enough, not full, no stale nccl-* segments", causes=("O1",))
def dev_shm(ctx) -> Result:
    """NCCL's proxy puts its buffers in /dev/shm/nccl-* at every communicator init (always with
    NCCL_CUMEM_ENABLE=0, as slime sets). Runs killed with SIGKILL leave them behind until /dev/shm fills."""
    mounts = P.parse_mounts(ctx.facts.read_text("/proc/mounts"))
    shm = [m for m in mounts if m["mountpoint"] == "/dev/shm"]
    if not shm:
        return verdict(Status.FAIL, "/dev/shm is not mounted: NCCL cannot create its shared segments",
                      evidence={"mounts": len(mounts)}, causes=["O1"],
                      remediation="mount a tmpfs on /dev/shm (docker: --shm-size 16g or --ipc=host)")
    opts = dict(o.split("=", 1) if "=" in o else (o, "") for o in shm[-1]["options"].split(","))
    size = P.parse_size(opts["size"]) if "size" in opts else None
    usage = None
    try:
        usage = P.parse_df(ctx.facts.command("df-dev-shm").stdout)
    except FactUnavailable:
        pass
    if usage and usage.get("size"):
        size = usage["size"]
    names = F.listdir_optional(ctx.facts, "/dev/shm") or []
    nccl = [n for n in names if n.startswith("nccl-")]
    gpu_procs = _gpu_process_count(ctx)
    want = ctx.profile.docker_run.shm_size_bytes if ctx.profile and ctx.profile.docker_run else None
    floor, src = (want, f"profile {ctx.profile.name} docker_run") if want else (SHM_FLOOR, SHM_SRC)
    used_frac = (usage["used"] / usage["size"]) if usage and usage.get("size") else None
    ev = {"mount": shm[-1], "size_bytes": size, "df": usage, "nccl_files": len(nccl), "nccl_examples": nccl[:5],
          "gpu_compute_processes": gpu_procs}
    metrics = [Metric("dev_shm_size", size or 0, "bytes", f">= {floor}", src),
               Metric("dev_shm_nccl_files", len(nccl), "files", "0 when no job runs", "research/error999.md O1")]
    if used_frac is not None:
        metrics.append(Metric("dev_shm_used", round(used_frac, 4), "fraction", f"< {SHM_FULL}",
                              "NCCL 'posix_fallocate failed: No space left on device' (research O1)"))
    stale = bool(nccl) and gpu_procs == 0
    problems, warns = [], []
    if used_frac is not None and used_frac >= SHM_FULL:
        problems.append(f"/dev/shm {used_frac:.0%} full ({_fmt_bytes(usage['avail'])} free)")
    if size is not None and size < floor:
        warns.append(f"/dev/shm is {_fmt_bytes(size)} < {_fmt_bytes(floor)}")
    if stale:
        warns.append(f"{len(nccl)} stale nccl-* segment(s) with no GPU process running")
    elif nccl:
        warns.append(f"{len(nccl)} nccl-* segment(s) present ({'GPU processes running' if gpu_procs else 'GPU use unknown'})")
    fix = "remove stale segments (rm /dev/shm/nccl-* when no job runs); give /dev/shm >= 16 GiB (--shm-size 16g / --ipc=host)"
    if problems:
        return verdict(Status.FAIL, "; ".join(problems + warns), evidence=ev, metrics=metrics,
                      causes=["O1"], remediation=fix)
    if warns:
        return verdict(Status.WARN, "; ".join(warns), evidence=ev, metrics=metrics, causes=["O1"],
                      remediation=fix)
    used = f", {used_frac:.0%} used" if used_frac is not None else ""
    return verdict(Status.PASS, f"/dev/shm {_fmt_bytes(size) if size else 'size unknown'}{used}, "
                  "no nccl-* segments", evidence=ev, metrics=metrics)


@check("node.remove_ipc", CAT, "systemd-logind RemoveIPC does not delete a user's shared memory at logout",
       causes=("O1",))
def remove_ipc(ctx) -> Result:
    """logind's RemoveIPC=yes (systemd's default) removes a regular user's /dev/shm segments and SysV IPC when
    their last session ends: a job started from ssh and left running loses NCCL's segments."""
    files = ["/etc/systemd/logind.conf"]
    for d in ("/usr/lib/systemd/logind.conf.d", "/etc/systemd/logind.conf.d", "/run/systemd/logind.conf.d"):
        files += [f"{d}/{n}" for n in sorted(F.listdir_optional(ctx.facts, d) or []) if n.endswith(".conf")]
    texts = [(f, t) for f in files for t in [F.read_optional(ctx.facts, f)] if t is not None]
    value, where = P.parse_logind_remove_ipc(texts)
    status = F.self_status(ctx.facts)
    user = F.uid(status)
    has_logind = bool(texts) or F.listdir_optional(ctx.facts, "/run/systemd/system") is not None
    ev = {"files_read": [f for f, _ in texts], "RemoveIPC": value, "set_in": where, "uid": user}
    if not has_logind:
        return verdict(Status.PASS, "no systemd-logind configuration: RemoveIPC does not apply", evidence=ev)
    effective = True if value is None else value
    if not effective:
        return verdict(Status.PASS, f"RemoveIPC=no ({where})", evidence=ev)
    origin = f"set in {where}" if where else "systemd's default"
    if user is not None and user < 1000:
        return verdict(Status.PASS,
                      f"RemoveIPC=yes ({origin}) but this runs as system uid {user}, which logind leaves alone",
                      evidence=ev)
    return verdict(Status.WARN,
                  f"RemoveIPC=yes ({origin}): logging out removes uid {user}'s /dev/shm segments under running jobs",
                  evidence=ev, causes=["O1"],
                  remediation="set RemoveIPC=no in /etc/systemd/logind.conf.d/ (then systemctl restart systemd-logind), "
                              "or keep a session open (loginctl enable-linger)")


@check("node.ld_preload", CAT, "/etc/ld.so.preload injects nothing into CUDA processes", causes=("D8",))
def ld_preload(ctx) -> Result:
    """A global preload (GPU-sharing interposers such as HAMi's libvgpu.so) wraps driver calls in every process."""
    text = F.read_optional(ctx.facts, "/etc/ld.so.preload")
    if text is None:
        return verdict(Status.PASS, "no /etc/ld.so.preload")
    entries = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if not entries:
        return verdict(Status.PASS, "/etc/ld.so.preload is empty", evidence={"text": text[:200]})
    return verdict(Status.WARN, f"/etc/ld.so.preload loads {', '.join(entries)} into every process",
                  evidence={"entries": entries}, causes=["D8"],
                  remediation="remove GPU interposers from /etc/ld.so.preload on training nodes "
                              "(HAMi: CUDA_DISABLE_CONTROL=true); see research D8")
