"""gpu.cumem_ipc: cuMem churn, POSIX-FD / legacy / torch.multiprocessing / fabric sharing between processes."""
from __future__ import annotations

from typing import Any, Dict, List

from envbuild.doctor.registry import ProbeSpec, probe_check, verdict
from envbuild.report.model import Result, Status

_REMEDY = {
    "torch_mp.expandable_on": "expandable-segment IPC needs pidfd_getfd: set kernel.yama.ptrace_scope=0 or grant "
                              "CAP_SYS_PTRACE (docker --cap-add SYS_PTRACE / an unconfined seccomp profile), or "
                              "keep expandable_segments off in processes that share CUDA tensors (cause M3/O3)",
    "vmm.churn": "cuMem does not work here (WSL, vGPU or a GPU-sharing layer?): NCCL_CUMEM_ENABLE=0 and no "
                 "torch_memory_saver offload until the driver/platform is fixed (cause M1/D8)",
}


@probe_check("gpu.cumem_ipc", "gpu", "cuMem map/unmap churn at GB sizes; cuMem, legacy and torch IPC between processes",
             needs=("gpu", "live"), causes=("M1", "M3", "O3", "D8"),
             probe=ProbeSpec("gpu_cumem_ipc.py", "the cuMem/IPC probe", deadline_s={"quick": 150, "full": 420},
                             phase_deadlines={"*": 90}, ranks="one", max_gpus=2,
                             hang_causes=("M1", "M3", "D8"), crash_causes=("M1", "D8"), teardown_behind=True,
                             starts_beside_teardown=True))
def cumem_ipc(ctx, run) -> List[Result]:
    """checks/gpu_cumem_ipc.py in one process that sees up to two GPUs (a second for the peer-GPU cases)."""
    outcome = run.launch(["--mode", run.mode])
    return evaluate(outcome.ranks[0].result or {})


def evaluate(data: Dict[str, Any]) -> List[Result]:
    """One Result per sub-test (subject = its name). Pure: tested in CI on hand-written probe output.

    Expandable-segment IPC failing is a `fail` when this environment turns expandable segments on
    (PYTORCH_CUDA_ALLOC_CONF), else a `warn`: the node would break an RL stack that does.
    """
    from envbuild.doctor.probes import status_of

    ev = data.get("evidence") or {}
    subs = ev.get("subtests")
    if not subs:  # the probe stopped before its sub-tests (e.g. no VMM support): its own verdict stands
        return [verdict(status_of(data.get("status")), str(data.get("summary") or "no summary"),
                       evidence=ev, causes=list(data.get("causes") or []))]
    common = {k: ev.get(k) for k in ("privileges", "alloc_conf", "fault_hook", "driver_version", "attributes",
                                     "legacy_ipc_on_cumem_memory", "cuda_python")}
    expandable_env = bool(ev.get("env_enables_expandable_segments"))
    out = []
    for s in subs:
        status = status_of(s.get("status"))
        summary = str(s.get("summary"))
        evidence = {k: v for k, v in s.items() if k not in ("name", "status", "summary", "causes")}
        if s["name"].startswith("torch_mp"):
            evidence.update({k: common[k] for k in ("privileges", "alloc_conf", "fault_hook")})
        if s["name"] == "torch_mp.expandable_on" and status == Status.FAIL and not expandable_env:
            status = Status.WARN
            summary += (" (this environment does not set expandable_segments:True; a stack that does would "
                        "fail here)")
        if s["name"] == "vmm.churn":
            evidence.update(common)
        out.append(verdict(status, summary, evidence=evidence,
                          causes=list(s.get("causes") or []) if status in (Status.FAIL, Status.WARN) else [],
                          subject=s["name"],
                          remediation=_REMEDY.get(s["name"]) if status in (Status.FAIL, Status.WARN) else None))
    return out
