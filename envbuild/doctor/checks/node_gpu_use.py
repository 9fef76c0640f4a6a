"""Who may use the GPUs: leftover compute processes, MIG and compute modes, CUDA_VISIBLE_DEVICES.

Research: error999.md §2 D7 (stale processes from a crashed run), D8 (sharing / partitioning layers),
C4 (the shell's CUDA_VISIBLE_DEVICES leaking into Ray workers). Colocated RL (slime) runs the trainer and the
rollout engine on the same GPU, so a GPU in EXCLUSIVE_PROCESS or PROHIBITED mode cannot host it.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts.source import FactUnavailable
from envbuild.report.model import Metric, Result, Status

CAT = "node"


@check("node.gpu_processes", CAT, "No compute processes already holding the GPUs", causes=("D7",))
def gpu_processes(ctx) -> Result:
    """Compute processes NVML lists before a job starts: leftovers of a crashed run hold memory and contexts."""
    devs = F.devices(ctx.facts)
    if all(d.get("processes") is None for d in devs):
        raise FactUnavailable("NVML did not list compute processes: "
                              + str(devs[0].get("errors", {}).get("processes", "unknown")))
    held: Dict[str, Any] = {}
    total_mib = 0
    for d in devs:
        procs = d.get("processes") or []
        if procs:
            held[f"gpu{d['index']}"] = procs
            total_mib += sum(p.get("used_memory_mib") or 0 for p in procs)
    metrics = [Metric("gpu_compute_processes", sum(len(v) for v in held.values()), "processes", "0 before a job",
                      "research/error999.md D7")]
    if not held:
        return verdict(Status.PASS, f"no compute process on {len(devs)} GPU(s)", metrics=metrics)
    pids = sorted({p["pid"] for v in held.values() for p in v})
    return verdict(Status.WARN,
                  f"{len(pids)} process(es) hold {total_mib} MiB on {', '.join(held)} (pids {pids[:8]}): "
                  "leftovers of a crashed run if no job should be running", evidence={"processes": held},
                  metrics=metrics, causes=["D7"],
                  remediation="if no job should run: `ray stop`, then kill those pids; check with "
                              "nvidia-smi --query-compute-apps=pid,used_memory --format=csv")


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
                      "rollout) gets 'CUDA-capable device(s) is/are busy or unavailable'", evidence=ev,
                      causes=["D7"], remediation="nvidia-smi -c DEFAULT -i N (needs root)")
    if mig:
        return verdict(Status.WARN,
                      f"MIG enabled on GPU {mig}: NCCL has no P2P between MIG instances and slime expects whole GPUs",
                      evidence=ev, causes=["D8"], remediation="disable MIG (nvidia-smi -mig 0 -i N, then reset)")
    virt = sorted({str(d.get("virtualization_mode")) for d in devs})
    return verdict(Status.PASS, f"compute mode default, MIG off on {len(devs)} GPU(s); virtualization "
                  f"{'/'.join(virt)}", evidence=ev)


_UUID = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]+$")


@check("node.cuda_visible_devices", CAT, "CUDA_VISIBLE_DEVICES names GPUs that exist, once each", causes=("C4",))
def cuda_visible_devices(ctx) -> Result:
    """A CUDA_VISIBLE_DEVICES inherited from the shell or a scheduler can hide GPUs, repeat one, or name one that
    does not exist; Ray workers inherit it (C4). CUDA stops parsing at the first invalid entry."""
    env = F.self_environ(ctx.facts)
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return verdict(Status.PASS, "CUDA_VISIBLE_DEVICES is not set: every GPU is visible")
    ev: Dict[str, Any] = {"CUDA_VISIBLE_DEVICES": value, "CUDA_DEVICE_ORDER": env.get("CUDA_DEVICE_ORDER")}
    try:
        devs = ctx.facts.nvml().get("devices", [])
    except FactUnavailable:
        devs = []
    if value.strip() == "" or value.strip() in ("-1", "none", "NoDevFiles"):
        # on a node without GPUs hiding them changes nothing: a warning, not a failure
        return verdict(Status.FAIL if devs else Status.WARN,
                      f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU" + ("" if devs else " (none visible anyway)"),
                      evidence=ev, causes=["C4"],
                      remediation="unset CUDA_VISIBLE_DEVICES (or list the GPUs) before starting Ray")
    entries = [e.strip() for e in value.split(",")]
    uuids = {d.get("uuid") for d in devs if d.get("uuid")}
    problems: List[str] = []
    if len(set(entries)) != len(entries):
        problems.append("an entry repeats")
    for e in entries:
        if e.isdigit():
            if devs and int(e) >= len(devs):
                problems.append(f"index {e} >= {len(devs)} GPUs")
        elif _UUID.match(e):
            if devs and not any(u.startswith(e) for u in uuids):
                problems.append(f"{e} is no GPU on this node")
        else:
            problems.append(f"{e!r} is neither an index nor a GPU UUID")
    kinds = {"index" if e.isdigit() else "uuid" for e in entries if e}
    if problems:
        return verdict(Status.FAIL, f"CUDA_VISIBLE_DEVICES={value}: " + "; ".join(problems), evidence=ev,
                      causes=["C4"], remediation="fix or unset CUDA_VISIBLE_DEVICES in the shell that starts Ray")
    if len(kinds) > 1:
        return verdict(Status.WARN, f"CUDA_VISIBLE_DEVICES={value} mixes indices and UUIDs", evidence=ev,
                      causes=["C4"], remediation="use one form (UUIDs are stable across reboots)")
    note = "" if devs else " (no NVML to check them against)"
    return verdict(Status.PASS, f"CUDA_VISIBLE_DEVICES={value}: {len(entries)} GPU(s){note}", evidence=ev)
