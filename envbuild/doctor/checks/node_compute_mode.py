"""node.compute_mode: MIG off and compute mode Default. Colocated RL (slime) runs the trainer and the rollout engine
on the same GPU, so a GPU in EXCLUSIVE_PROCESS or PROHIBITED mode cannot host it.

Causes (envbuild/knowledge/causes.toml, with their sources): D8 (sharing / partitioning layers).
"""
from __future__ import annotations

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.report.model import Result, Status

CAT = "node"


@check("node.compute_mode", CAT, "MIG off and compute mode Default (colocated train + rollout share a GPU)",
       causes=("D8", "D7"))
def compute_mode(ctx) -> Result:
    devs = F.devices(ctx.facts)
    ev = {f"gpu{d['index']}": {"compute_mode": d.get("compute_mode"), "mig_mode": d.get("mig_mode"),
                               "virtualization_mode": d.get("virtualization_mode")} for d in devs}
    exclusive = [d["index"] for d in devs if d.get("compute_mode") in ("exclusive_process", "prohibited",
                                                                        "exclusive_thread")]
    mig = [d["index"] for d in devs if (d.get("mig_mode") or {}).get("current")]
    if exclusive:
        modes = sorted({d.get("compute_mode") for d in devs if d["index"] in exclusive})
        return verdict(Status.FAIL,
                      f"GPU {exclusive} in compute mode {'/'.join(modes)}: a second process on the GPU (colocated "
                      "rollout) gets 'CUDA-capable device(s) is/are busy or unavailable'",
                      evidence={**ev, "explains": [r"busy or unavailable", r"cudaErrorDevicesUnavailable",
                                                  r"Error 46\b", r"CUDA_ERROR_DEVICE_UNAVAILABLE"]},
                      causes=["D7"], remediation="nvidia-smi -c DEFAULT -i N (needs root)")
    if mig:
        return verdict(Status.WARN,
                      f"MIG enabled on GPU {mig}: NCCL has no P2P between MIG instances and slime expects whole GPUs",
                      evidence=ev, causes=["D8"], remediation="disable MIG (nvidia-smi -mig 0 -i N, then reset)")
    virt = sorted({str(d.get("virtualization_mode")) for d in devs})
    return verdict(Status.PASS, f"compute mode default, MIG off on {len(devs)} GPU(s); virtualization "
                  f"{'/'.join(virt)}", evidence=ev)
