"""node.cuda_visible_devices: CUDA_VISIBLE_DEVICES names GPUs that exist, once each.

Causes (envbuild/knowledge/causes.toml, with their sources): C4 (the shell's CUDA_VISIBLE_DEVICES leaking into Ray workers).
"""
from __future__ import annotations

import re
from typing import Any, Dict, List

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts.source import FactUnavailable
from envbuild.report.model import Result, Status

CAT = "node"
_UUID = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]+$")
# What CUDA reports in this run's other processes when the variable hides the GPUs (doctor/fold.py folds
# those failures under this check): no device, an invalid ordinal (CUDA runtime API enum cudaError 100, 101).
EXPLAINS = [r"cudaErrorNoDevice", r"no CUDA-capable device", r"cudaErrorInvalidDevice", r"invalid device ordinal",
            r"Error 10[01]\b"]


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
                      evidence={**ev, "explains": EXPLAINS} if devs else ev, causes=["C4"],
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
        return verdict(Status.FAIL, f"CUDA_VISIBLE_DEVICES={value}: " + "; ".join(problems),
                      evidence={**ev, "explains": EXPLAINS},
                      causes=["C4"], remediation="fix or unset CUDA_VISIBLE_DEVICES in the shell that starts Ray")
    if len(kinds) > 1:
        return verdict(Status.WARN, f"CUDA_VISIBLE_DEVICES={value} mixes indices and UUIDs", evidence=ev,
                      causes=["C4"], remediation="use one form (UUIDs are stable across reboots)")
    note = "" if devs else " (no NVML to check them against)"
    return verdict(Status.PASS, f"CUDA_VISIBLE_DEVICES={value}: {len(entries)} GPU(s){note}", evidence=ev)
