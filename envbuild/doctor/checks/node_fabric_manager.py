"""Fabric manager on NVSwitch systems: running, at the driver's exact version, and the GPUs registered.

Causes (envbuild/knowledge/causes.toml, with their sources): N2 (FM missing or at another version: error 802 'system not yet initialized'),
N1 (NVLS needs a healthy fabric). NVIDIA Fabric Manager user guide: FM's version must equal the driver's.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from envbuild.doctor.registry import check, verdict
from envbuild.facts import node_facts as F
from envbuild.facts.source import FactUnavailable
from envbuild.report.model import Result, Status

CAT = "node"
CID = "node.fabric_manager"


def _nvswitch_evidence(ctx) -> List[str]:
    """Signs that NVSwitches are managed from this OS: their device nodes, or NVSwitch bridges in lspci."""
    found: List[str] = []
    dev = F.listdir_optional(ctx.facts, "/dev") or []
    found += [f"/dev/{n}" for n in dev if n.startswith("nvidia-nvswitch")]
    try:
        res = ctx.facts.command("lspci-nvidia-vvv")
        found += [ln.strip() for ln in res.stdout.splitlines()
                  if ln and not ln[0].isspace() and ("NVSwitch" in ln or "Bridge: NVIDIA" in ln)]
    except FactUnavailable:
        pass
    return found


def _fm_version(ctx) -> Optional[str]:
    try:
        res = ctx.facts.command("nv-fabricmanager-version")
    except FactUnavailable:
        return None
    m = re.search(r"(\d{3,4}\.\d+(?:\.\d+)?)", res.stdout + res.stderr)
    return m.group(1) if m else None


def _fm_active(ctx) -> Optional[str]:
    try:
        res = ctx.facts.command("systemctl-fabricmanager")
    except FactUnavailable as exc:
        return f"unknown ({exc})"
    return (res.stdout.strip() or res.stderr.strip() or f"exit {res.returncode}")


@check(CID, CAT, "Fabric manager active at the driver's version; GPU fabric registration completed",
       causes=("N2", "N1"))
def fabric_manager(ctx) -> Result:
    """On NVSwitch systems the fabric manager must run at exactly the driver's version, and NVML must show each
    GPU's fabric state Completed/Success; otherwise CUDA init fails with 802 and NVLS with 401/999."""
    devs = F.devices(ctx.facts)
    module = F.driver_module(ctx.facts)
    driver = (module.version if module else None) or ctx.facts.nvml().get("driver_version")
    fabric = {f"gpu{d['index']}": d.get("fabric") for d in devs}
    switches = _nvswitch_evidence(ctx)
    evidence: Dict[str, Any] = {"nvml_fabric": fabric, "nvswitch": switches, "driver": driver}
    supported = {k: v for k, v in fabric.items() if v and v.get("state") != "not_supported"}
    bad = {k: v for k, v in supported.items() if v.get("state") != "completed" or v.get("status") != "success"}
    if bad:
        listing = ", ".join(f"{k} {v['state']}/{v['status']}" for k, v in bad.items())
        return verdict(Status.FAIL, f"GPU fabric registration not complete: {listing}", evidence=evidence,
                      causes=["N2", "N1"],
                      remediation="start nvidia-fabricmanager at the driver's version (on VMs: the host's FM); "
                                  "if FM was restarted while GPUs were in use, reset the GPUs or reboot")
    if not switches:
        if supported:
            return verdict(Status.PASS,
                          f"GPU fabric registered (Completed/Success on {len(supported)} GPU(s)); no NVSwitch managed "
                          "from this OS, so the fabric manager runs elsewhere (host or hypervisor)", evidence=evidence)
        raise FactUnavailable("no NVSwitch on this node (no /dev/nvidia-nvswitch*, no NVSwitch in lspci, NVML fabric "
                              "not supported): fabric manager not needed")
    active = _fm_active(ctx)
    fm_version = _fm_version(ctx)
    evidence.update({"fabricmanager_service": active, "fabricmanager_version": fm_version})
    if active != "active":
        return verdict(Status.FAIL, f"NVSwitch system but nvidia-fabricmanager is {active}",
                      evidence=evidence, causes=["N2"],
                      remediation=f"install nvidia-fabricmanager {driver} (exactly the driver's version), "
                                  "`systemctl enable --now nvidia-fabricmanager`, then reboot")
    if fm_version is None or fm_version != driver:
        return verdict(Status.FAIL,
                      f"fabric manager version {fm_version or 'unknown'} != driver {driver}", evidence=evidence,
                      causes=["N2"],
                      remediation=f"install nvidia-fabricmanager {driver} to match the driver, restart it, reboot")
    return verdict(Status.PASS, f"nvidia-fabricmanager {fm_version} active, matches the driver; "
                  f"fabric Completed on {len(supported)} GPU(s)", evidence=evidence)
