"""node.dev_shm: /dev/shm large enough, not full, and no stale nccl-* segments (what `docker run --shm-size` gives a
container and a bare-metal node may not have).

Causes (envbuild/knowledge/causes.toml, with their sources): O1 (/dev/shm).
"""
from __future__ import annotations

from typing import Optional

from envbuild.data.checks._common import human_bytes
from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts import node_parse as P
from envbuild.facts.source import FactUnavailable
from envbuild.report.model import Metric, Result, Status

# What NCCL reports when its shared segments cannot be made (doctor/fold.py folds those failures under this
# check): posix_fallocate/ftruncate of /dev/shm/nccl-* failing with ENOSPC, the shm transport's setup.
EXPLAINS = [r"posix_fallocate", r"No space left on device", r"/dev/shm", r"shmOpen", r"transport/shm"]

CAT = "node"
GIB = 1024 ** 3
SHM_FLOOR = 1 * GIB
SHM_SRC = "Docker's 64 MiB default /dev/shm is what fails NCCL (cause O1); slime runs with --shm-size 16g"
SHM_FULL = 0.90


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
                      evidence={"mounts": len(mounts), "explains": EXPLAINS}, causes=["O1"],
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
               Metric("dev_shm_nccl_files", len(nccl), "files", "0 when no job runs", "envbuild/knowledge/causes.toml O1")]
    if used_frac is not None:
        metrics.append(Metric("dev_shm_used", round(used_frac, 4), "fraction", f"< {SHM_FULL}",
                              "NCCL 'posix_fallocate failed: No space left on device' (cause O1)"))
    stale = bool(nccl) and gpu_procs == 0
    problems, warns = [], []
    if used_frac is not None and used_frac >= SHM_FULL:
        problems.append(f"/dev/shm {used_frac:.0%} full ({human_bytes(usage['avail'])} free)")
    if size is not None and size < floor:
        warns.append(f"/dev/shm is {human_bytes(size)} < {human_bytes(floor)}")
    if stale:
        warns.append(f"{len(nccl)} stale nccl-* segment(s) with no GPU process running")
    elif nccl:
        warns.append(f"{len(nccl)} nccl-* segment(s) present ({'GPU processes running' if gpu_procs else 'GPU use unknown'})")
    fix = "remove stale segments (rm /dev/shm/nccl-* when no job runs); give /dev/shm >= 16 GiB (--shm-size 16g / --ipc=host)"
    if problems:
        return verdict(Status.FAIL, "; ".join(problems + warns), evidence={**ev, "explains": EXPLAINS},
                      metrics=metrics, causes=["O1"], remediation=fix)
    if warns:
        return verdict(Status.WARN, "; ".join(warns), evidence=ev, metrics=metrics, causes=["O1"],
                      remediation=fix)
    used = f", {used_frac:.0%} used" if used_frac is not None else ""
    return verdict(Status.PASS, f"/dev/shm {human_bytes(size) if size else 'size unknown'}{used}, "
                  "no nccl-* segments", evidence=ev, metrics=metrics)
