"""Bad input and missing facts: unreadable files skip with the reason, no driver skips the GPU checks (exit 0,
or 1 with --require-gpu), a --root that is not a bundle exits 2 with one clear line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from envbuild.doctor.context import DoctorContext
from envbuild.doctor.registry import select
from envbuild.doctor.runner import run_checks
from envbuild.facts.source import FactUnavailable, LiveSource
from fakenode import H200X2, derive_bundle, write_tree

NVML_CHECKS = {"node.compute_mode", "node.ecc", "node.fabric_manager", "node.gpu_processes", "node.iommu_acs",
               "node.nvlink", "node.p2p", "node.pcie_link", "node.persistence_mode"}


def envbuild(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True, timeout=300)


def report(path: Path) -> dict:
    data = json.loads(path.read_text())
    return {r["check_id"]: r for r in data["results"]}


def no_driver(b) -> None:
    b.nvml_unavailable("no NVIDIA driver: libnvidia-ml.so.1 is not installed or not on the loader path "
                       "(NVML: NVML Shared Library Not Found)")
    b.remove("/proc/driver/nvidia/version")


def test_no_driver_bundle_skips_gpu_checks_with_the_reason_and_exits_0(tmp_path):
    root = derive_bundle(H200X2, tmp_path / "nodriver", no_driver)
    out = tmp_path / "r.json"
    proc = envbuild("doctor", "--root", str(root), "--check", "node.*", "-q", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = report(out)
    for cid in NVML_CHECKS | {"node.driver_version", "node.uvm_hmm"}:
        assert results[cid]["status"] == "skip", cid
        assert "no NVIDIA driver" in results[cid]["summary"], results[cid]["summary"]
    assert "(when captured)" in results["node.ecc"]["summary"]


def test_no_driver_with_require_gpu_fails(tmp_path):
    root = derive_bundle(H200X2, tmp_path / "nodriver", no_driver)
    out = tmp_path / "r.json"
    proc = envbuild("doctor", "--root", str(root), "--check", "node.*", "--require-gpu", "-q", "--json", str(out))
    assert proc.returncode == 1
    assert report(out)["node.driver_version"]["status"] == "fail"


def test_this_cpu_machine_doctor_exits_0_and_says_why_gpu_checks_skip(tmp_path):
    try:
        LiveSource("/").nvml()
        pytest.skip("this machine has an NVIDIA driver")
    except FactUnavailable:
        pass
    out, junit, prom = tmp_path / "live.json", tmp_path / "live.xml", tmp_path / "live.prom"
    proc = envbuild("doctor", "--json", str(out), "--junit", str(junit), "--prometheus", str(prom))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    suites = ElementTree.parse(junit).getroot()
    assert suites.tag == "testsuites" and suites.get("failures") == "0"
    skipped = {tc.get("name"): tc.find("skipped") for tc in suites.iter("testcase")}
    assert all(skipped[cid] is not None for cid in NVML_CHECKS)
    assert 'envbuild_check_status{check="node.ecc",category="node",subject="",status="skip"} 1' in prom.read_text()
    data = json.loads(out.read_text())
    assert data["schema"] == "envbuild.report" and data["exit_code"] == 0
    results = {r["check_id"]: r for r in data["results"]}
    for cid in NVML_CHECKS:
        assert results[cid]["status"] == "skip" and results[cid]["summary"].startswith("no NVIDIA driver: ")
    assert envbuild("doctor", "-q", "--require-gpu").returncode == 1


def test_unreadable_file_in_a_bundle_skips_with_the_capture_reason(tmp_path):
    root = derive_bundle(H200X2, tmp_path / "nonroot", lambda b: b.unreadable(
        "/proc/self/limits", "permission denied reading /proc/self/limits (run as root to read it)"))
    out = tmp_path / "r.json"
    proc = envbuild("doctor", "--root", str(root), "--check", "node.ulimits", "-q", "--json", str(out))
    assert proc.returncode == 0
    r = report(out)["node.ulimits"]
    assert r["status"] == "skip" and "permission denied reading /proc/self/limits" in r["summary"]
    assert "(when captured)" in r["summary"]


def test_unreadable_kernel_log_skips_with_both_reasons(tmp_path):
    def edit(b):
        b.command("dmesg", "", returncode=1, stderr="dmesg: read kernel buffer failed: Operation not permitted\n")
    root = derive_bundle(H200X2, tmp_path / "nodmesg", edit)
    out = tmp_path / "r.json"
    envbuild("doctor", "--root", str(root), "--check", "node.kernel_log", "-q", "--json", str(out))
    r = report(out)["node.kernel_log"]
    assert r["status"] == "skip"
    assert "Operation not permitted" in r["summary"] and "journalctl-kernel" in r["summary"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads chmod-000 files; the bundle test above covers CI (root)")
def test_live_source_turns_permission_denied_into_a_skip(tmp_path):
    write_tree(tmp_path, {"/proc/sys/kernel/yama/ptrace_scope": "1\n", "/proc/self/status": "Uid:\t1000\t1000\n"})
    (tmp_path / "proc/self/status").chmod(0)
    ctx = DoctorContext(facts=LiveSource(str(tmp_path)))
    [r] = run_checks(select(["node.ptrace"]), ctx)
    assert r.status.value == "skip" and "permission denied reading /proc/self/status" in r.summary


def test_live_source_on_a_fake_tree(tmp_path):
    """LiveSource(root) reads a fake /proc: ptrace_scope 3 fails even for root."""
    write_tree(tmp_path, {
        "/proc/sys/kernel/yama/ptrace_scope": "3\n",
        "/proc/self/status": "Name:\tpython\nUid:\t0\t0\t0\t0\nSeccomp:\t0\nCapEff:\t000001ffffffffff\n",
    })
    ctx = DoctorContext(facts=LiveSource(str(tmp_path)))
    [r] = run_checks(select(["node.ptrace"]), ctx)
    assert r.status.value == "fail" and r.causes == ["O3", "M3"] and r.evidence["cap_sys_ptrace"] is True


@pytest.mark.parametrize("make", ["missing", "plain_dir", "damaged"])
def test_root_that_is_not_a_bundle_exits_2(tmp_path, make):
    root = tmp_path / "x"
    if make != "missing":
        root.mkdir()
        (root / "proc").mkdir()
    if make == "damaged":
        (root / ".envbuild").mkdir()
        (root / ".envbuild" / "bundle.json").write_text("{not json")
    proc = envbuild("doctor", "--root", str(root))
    assert proc.returncode == 2
    assert proc.stderr.startswith("envbuild: error: --root ") and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr
