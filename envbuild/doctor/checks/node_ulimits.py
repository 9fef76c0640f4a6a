"""node.ulimits: memlock, stack and nofile limits as the image's `docker run` sets them (a bare-metal shell does
not get them).

Causes (envbuild/knowledge/causes.toml, with their sources): O2 (ulimits).
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
MIB = 1024 ** 2

# Linux's default RLIMIT_MEMLOCK since 5.16 (MLOCK_LIMIT raised from 64 KiB to 8 MiB). Below it, someone set a
# restriction on purpose (old Docker / kernel default 64 KiB): pinned and IB-registered memory then fails.
MEMLOCK_FLOOR = 8 * MIB
MEMLOCK_SRC = "Linux 5.16 default MLOCK_LIMIT 8 MiB; NCCL docs: memlock unlimited (--ulimit memlock=-1)"
STACK_FLOOR = 8 * MIB
STACK_SRC = "glibc/Linux default 8 MiB (ulimit -s 8192); cause O2: unlimited makes glibc give threads 2 MiB"
NOFILE_FLOOR = 65536
NOFILE_SRC = ("Ray's cluster launcher starts `ulimit -n 65536; ray start`; NCCL raises the soft nofile to the hard "
              "one (NCCL docs runtime_and_mpi_issues.rst)")


def _fmt_bytes(n: Optional[int]) -> str:
    return "unlimited" if n is None else human_bytes(n)


# What a process that registers memory with an RDMA device reports when memlock is too low (folded under this
# check by doctor/fold.py): verbs' registration and queue creation, NCCL's IB transport, the kernel's ENOMEM.
MEMLOCK_EXPLAINS = [r"ibv_reg_mr", r"ibv_create_(?:cq|qp)", r"NET/IB", r"RLIMIT_MEMLOCK", r"[Mm]emlock",
                    r"Cannot allocate memory", r"cudaHostRegister"]


def _rdma_devices(ctx) -> Optional[List[str]]:
    """The node's RDMA devices (/sys/class/infiniband: IB and RoCE HCAs alike), None when it cannot be read (a
    bundle captured before this was read)."""
    try:
        return F.listdir_optional(ctx.facts, "/sys/class/infiniband") or []
    except FactUnavailable:
        return None


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
    rdma = _rdma_devices(ctx) if ml is not None and ml < MEMLOCK_FLOOR else []
    ev["rdma_devices"] = rdma
    if ml is not None and ml < MEMLOCK_FLOOR:
        # memlock bounds what a process may register with an RDMA device (verbs pin it); NCCL over NVLink, PCIe
        # and shared memory on one node does not register any, so there it is a risk, not a failure
        low = f"memlock {_fmt_bytes(ml)} < {_fmt_bytes(MEMLOCK_FLOOR)}"
        if rdma:
            fails.append(f"{low} on a node with RDMA devices ({', '.join(rdma)}): memory NCCL registers with them "
                         "fails (ibv_reg_mr)")
        elif want_memlock is not None:
            fails.append(f"{low}; the image runs with memlock {want_memlock} ({psrc})")
        elif rdma is None:
            fails.append(f"{low}: pinned / RDMA-registered memory fails (whether this node has RDMA devices was "
                         "not captured)")
        else:
            warns.append(f"{low}; no RDMA device on this node (/sys/class/infiniband is empty), so NCCL within "
                         "the node does not need it, but an RDMA NIC or a job across nodes would fail")
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
    fix = _fix(fails + warns)
    if fails:
        if ml is not None and ml < MEMLOCK_FLOOR:
            ev["explains"] = MEMLOCK_EXPLAINS
        return verdict(Status.FAIL, "; ".join(fails + warns), evidence=ev, metrics=metrics, causes=["O2"],
                      remediation=fix)
    if warns:
        return verdict(Status.WARN, "; ".join(warns), evidence=ev, metrics=metrics, causes=["O2"],
                      remediation=fix)
    return verdict(Status.PASS, f"memlock {_fmt_bytes(ml)}, stack {_fmt_bytes(st)}, hard nofile {nf}",
                  evidence=ev, metrics=metrics)


# per limit: (limits.conf / systemd setting, ulimit flag, docker run flag); the fix names only the limits found
_FIXES = {"memlock": ("LimitMEMLOCK=infinity", "-l unlimited", "--ulimit memlock=-1"),
          "stack": ("LimitSTACK=64M", "-s 65536", "--ulimit stack=67108864"),
          "nofile": ("LimitNOFILE=65536", "-n 65536", "--ulimit nofile=65536")}


def _fix(findings: List[str]) -> str:
    """The remediation for the limits these findings name (a nofile finding alone speaks of nofile only)."""
    named = [k for k in _FIXES if any(f.split(" ")[0] == k or f.startswith(f"hard {k}") for f in findings)]
    systemd, ulimit, docker = (" ".join(_FIXES[k][i] for k in named) for i in range(3))
    return (f"raise the limits for the job's user (limits.conf / systemd {systemd}) or launch with `ulimit {ulimit}`, "
            f"as `docker run {docker}`")

