"""Fault fixtures: the real 2xH200 bundle (tests/fixtures/bundles/h200x2) with ONE fault each, replayed
through the CLI. Each fault must be caught by its check with the right cause id, and every other node check
must give the same verdict as on the untouched bundle."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, Tuple

import pytest

from fakenode import H200X2, BundleEditor, derive_bundle

Key = Tuple[str, str]


def doctor(root: Path, tmp_path: Path, *extra: str) -> Tuple[int, Dict[Key, dict], str]:
    out = tmp_path / f"report-{root.name}.json"
    proc = subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--root", str(root), "--check", "node.*",
                           "-q", "--json", str(out), *extra], capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(out.read_text())
    return proc.returncode, {(r["check_id"], r.get("subject") or ""): r for r in data["results"]}, proc.stdout


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    rc, results, _ = doctor(H200X2, tmp_path_factory.mktemp("healthy"))
    return rc, results


def test_healthy_real_bundle_has_no_fail(healthy):
    rc, results = healthy
    bad = {k: r["summary"] for k, r in results.items() if r["status"] in ("fail", "error")}
    assert rc == 0 and not bad
    # the real node's known findings: HMM on the open module (D1) and a 20000 hard nofile (O2) are warnings
    warns = {k[0] for k, r in results.items() if r["status"] == "warn"}
    assert warns == {"node.uvm_hmm", "node.ulimits"}


XID79 = "[Sun Nov 29 19:30:02 2026] NVRM: Xid (PCI:0000:00:06): 79, pid=4242, name=python3, GPU has fallen off the bus.\n"
FM_DRIVER = "580.159.04"


def nvswitch_node(b: BundleEditor) -> None:
    """Setup, not the fault: make the bundle an NVSwitch system (switch device nodes visible to this OS)."""
    b.listdir("/dev", b.index["dirs"]["/dev"] + ["nvidia-nvswitch0", "nvidia-nvswitch1", "nvidia-nvswitchctl"])


def fm(active: str, version: str) -> Callable[[BundleEditor], None]:
    def edit(b: BundleEditor) -> None:
        nvswitch_node(b)
        b.command("systemctl-fabricmanager", f"{active}\n", returncode=0 if active == "active" else 3)
        b.command("nv-fabricmanager-version", f"Fabric Manager version is : {version}\n")
    return edit


def stale_shm_nearly_full(b: BundleEditor) -> None:
    b.listdir("/dev/shm", [f"nccl-{i:06x}" for i in range(40)])
    size = 274877906944
    used = int(size * 0.97)
    b.command("df-dev-shm", "Filesystem 1-blocks Used Available Capacity Mounted on\n"
                            f"tmpfs {size} {used} {size - used} 97% /dev/shm\n")


def limits_line(name: str, soft: str, hard: str) -> Callable[[BundleEditor], None]:
    def edit(b: BundleEditor) -> None:
        lines = b.read("/proc/self/limits").splitlines(keepends=True)
        for i, ln in enumerate(lines):
            if ln.startswith(name):
                unit = ln.split()[-1]
                lines[i] = f"{name:<26}{soft:<21}{hard:<21}{unit:<10}\n"
        b.write("/proc/self/limits", "".join(lines))
    return edit


def environ_set(name: str, value: str) -> Callable[[BundleEditor], None]:
    def edit(b: BundleEditor) -> None:
        env = b.read("/proc/self/environ")
        b.write("/proc/self/environ", env + f"{name}={value}\0")
    return edit


def gpu0(fn) -> Callable[[BundleEditor], None]:
    return lambda b: b.device(0, fn)


def set_path(d: dict, dotted: str, value) -> None:
    *head, last = dotted.split(".")
    for k in head:
        d = d[k]
    d[last] = value


# name: (edit, check id, subject, expected statuses, cause id)
FAULTS = {
    "fabric_not_registered": (gpu0(lambda d: set_path(d, "fabric.state", "in_progress")),
                              "node.fabric_manager", "", {"fail"}, "N2"),
    "fabric_manager_down": (fm("inactive", FM_DRIVER), "node.fabric_manager", "", {"fail"}, "N2"),
    "fabric_manager_other_version": (fm("active", "570.133.20"), "node.fabric_manager", "", {"fail"}, "N2"),
    "xid79": (lambda b: b.command("dmesg", b.command_stdout("dmesg") + XID79), "node.kernel_log", "", {"fail"}, "D3"),
    "remap_pending": (gpu0(lambda d: set_path(d, "remapped_rows.pending", True)), "node.ecc", "gpu0", {"fail"}, "D3"),
    "ecc_uncorrectable": (gpu0(lambda d: set_path(d, "ecc_uncorrected.volatile", 3)), "node.ecc", "gpu0", {"fail"}, "D3"),
    "stale_nccl_shm_nearly_full": (stale_shm_nearly_full, "node.dev_shm", "", {"fail"}, "O1"),
    "ptrace_scope_3": (lambda b: b.write("/proc/sys/kernel/yama/ptrace_scope", "3\n"), "node.ptrace", "", {"fail"}, "O3"),
    "memlock_64k_rdma_node": (lambda b: (limits_line("Max locked memory", "65536", "65536")(b),
                                         b.listdir("/sys/class/infiniband", ["mlx5_0"])),
                              "node.ulimits", "", {"fail"}, "O2"),
    # single-node NCCL registers nothing with an RDMA device: without one the low limit is a warning (issue 26)
    "memlock_64k_no_rdma": (lambda b: (limits_line("Max locked memory", "65536", "65536")(b),
                                       b.listdir("/sys/class/infiniband", [])),
                            "node.ulimits", "", {"warn"}, "O2"),
    "memlock_64k_not_captured": (limits_line("Max locked memory", "65536", "65536"), "node.ulimits", "", {"fail"},
                                 "O2"),
    # more faults the node checks name
    "libnvidia_ml_other_version": (lambda b: b.write("/proc/self/maps", b.read("/proc/self/maps").replace(
        "libnvidia-ml.so.580.159.04", "libnvidia-ml.so.580.126.09")), "node.driver_version", "", {"fail"}, "D2"),
    "uvm_not_loaded": (lambda b: b.remove("/sys/module/nvidia_uvm"), "node.uvm_hmm", "", {"fail"}, "D4"),
    "persistence_off": (gpu0(lambda d: set_path(d, "persistence_mode", False)), "node.persistence_mode", "",
                        {"warn"}, "D6"),
    "exclusive_process": (gpu0(lambda d: set_path(d, "compute_mode", "exclusive_process")), "node.compute_mode", "",
                          {"fail"}, "D7"),
    "mig_on": (gpu0(lambda d: set_path(d, "mig_mode.current", True)), "node.compute_mode", "", {"warn"}, "D8"),
    "stale_gpu_process": (gpu0(lambda d: set_path(d, "processes", [{"pid": 31337, "used_memory_mib": 70000}])),
                          "node.gpu_processes", "", {"warn"}, "D7"),
    "cuda_visible_devices_missing_gpu": (environ_set("CUDA_VISIBLE_DEVICES", "0,2"), "node.cuda_visible_devices", "",
                                         {"fail"}, "C4"),
    "pcie_x8": (gpu0(lambda d: set_path(d, "pcie.width_current", 8)), "node.pcie_link", "gpu0", {"warn"}, "D3"),
    "nvlink_down": (gpu0(lambda d: set_path(d, "nvlink", [dict(lk, active=lk["link"] != 5) for lk in d["nvlink"]])),
                    "node.nvlink", "gpu0", {"warn"}, "D3"),
    "p2p_disabled": (lambda b: b.nvml(lambda n: set_path(n, "p2p.0-1.read", "chipset_not_supported")),
                     "node.p2p", "", {"warn"}, "N3"),
    "ld_so_preload": (lambda b: b.write("/etc/ld.so.preload", "/usr/local/vgpu/libvgpu.so\n"), "node.ld_preload", "",
                      {"warn"}, "D8"),
    "wsl": (lambda b: b.write("/proc/sys/kernel/osrelease", "5.15.167.4-microsoft-standard-WSL2\n"), "node.wsl", "",
            {"warn"}, "M1"),
}


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_one_fault_is_caught_and_nothing_else_changes(name, healthy, tmp_path):
    edit, check_id, subject, statuses, cause = FAULTS[name]
    root = derive_bundle(H200X2, tmp_path / name, edit)
    rc, results, stdout = doctor(root, tmp_path)
    _, base = healthy
    hit = results[(check_id, subject)]
    assert hit["status"] in statuses, hit["summary"]
    assert cause in hit["causes"], hit["causes"]
    assert hit["remediation"], "a finding must say how to fix it"
    changed = {k: (base[k]["status"], r["status"]) for k, r in results.items()
               if k != (check_id, subject) and (k not in base or base[k]["status"] != r["status"])}
    assert not changed, f"{name} also changed {changed}"
    assert rc == (1 if "fail" in statuses else 0)
    assert check_id in stdout or "FAIL" in stdout or "OK" in stdout


def test_hmm_on_the_open_module_is_the_real_nodes_own_finding(healthy, tmp_path):
    """The lent H200 runs the open module with uvm_disable_hmm=N: the real bundle IS the HMM fault (D1).
    One change each clears it: HMM disabled, or the proprietary module."""
    _, base = healthy
    assert base[("node.uvm_hmm", "")]["status"] == "warn" and base[("node.uvm_hmm", "")]["causes"] == ["D1"]
    off = derive_bundle(H200X2, tmp_path / "hmm_off",
                        lambda b: b.write("/sys/module/nvidia_uvm/parameters/uvm_disable_hmm", "Y\n"))
    prop = derive_bundle(H200X2, tmp_path / "proprietary", lambda b: b.replace(
        "/proc/driver/nvidia/version", "Open Kernel Module", "Kernel Module"))
    for root in (off, prop):
        _, results, _ = doctor(root, tmp_path)
        assert results[("node.uvm_hmm", "")]["status"] == "pass", results[("node.uvm_hmm", "")]["summary"]


def test_fabric_manager_at_the_driver_version_passes_on_an_nvswitch_node(tmp_path):
    root = derive_bundle(H200X2, tmp_path / "fm_ok", fm("active", FM_DRIVER))
    _, results, _ = doctor(root, tmp_path)
    assert results[("node.fabric_manager", "")]["status"] == "pass"


def test_with_the_profile_limits_are_held_against_the_images_docker_run(tmp_path):
    """slime's docker run uses --ulimit stack=67108864 and --shm-size 16g: the H200's 8 MiB stack now warns."""
    _, results, _ = doctor(H200X2, tmp_path, "--profile", "slime-v0.3.1-cu129")
    ul = results[("node.ulimits", "")]
    assert ul["status"] == "warn" and "stack 8 MiB, the image runs with 64 MiB" in ul["summary"]
    assert any(m["name"] == "stack_soft" and m["expect"] == "== 67108864" and "slime" in m["source"]
               for m in ul["metrics"])
    shm = results[("node.dev_shm", "")]
    assert shm["status"] == "pass" and shm["metrics"][0]["expect"] == f">= {16 * 1024 ** 3}"


def test_remove_ipc_warns_for_a_regular_user_only(tmp_path):
    def regular_user(b: BundleEditor) -> None:
        status = b.read("/proc/self/status")
        uid_line = next(ln for ln in status.splitlines() if ln.startswith("Uid:"))
        b.replace("/proc/self/status", uid_line, "Uid:\t1000\t1000\t1000\t1000")
        b.write("/etc/systemd/logind.conf", "[Login]\n#RemoveIPC=yes\n")

    root = derive_bundle(H200X2, tmp_path / "user", regular_user)
    _, results, _ = doctor(root, tmp_path)
    r = results[("node.remove_ipc", "")]
    assert r["status"] == "warn" and r["causes"] == ["O1"] and "systemd's default" in r["summary"]
    fixed = derive_bundle(root, tmp_path / "user_fixed",
                          lambda b: b.write("/etc/systemd/logind.conf.d/10-ipc.conf", "[Login]\nRemoveIPC=no\n"))
    _, results, _ = doctor(fixed, tmp_path)
    assert results[("node.remove_ipc", "")]["status"] == "pass"


def test_a_fault_shows_in_junit_and_prometheus(tmp_path):
    from xml.etree import ElementTree

    root = derive_bundle(H200X2, tmp_path / "xid", FAULTS["xid79"][0])
    junit, prom = tmp_path / "r.xml", tmp_path / "r.prom"
    rc, _, _ = doctor(root, tmp_path, "--junit", str(junit), "--prometheus", str(prom))
    assert rc == 1
    failed = [tc.get("name") for tc in ElementTree.parse(junit).getroot().iter("testcase")
              if tc.find("failure") is not None]
    assert failed == ["node.kernel_log"]
    text = prom.read_text()
    assert 'envbuild_check_status{check="node.kernel_log",category="node",subject="",status="fail"} 1' in text


def pcie_p2p_box(b: BundleEditor) -> None:
    """Setup: GPU pairs talk P2P over PCIe (no NVLink), each GPU below a PCIe switch port."""
    b.nvml(lambda n: [st.update(nvlink="not_supported") for st in n["p2p"].values()])
    for dev, port in (("0000:00:06.0", "0000:00:02.0"), ("0000:00:07.0", "0000:00:03.0")):
        b.link(f"/sys/bus/pci/devices/{dev}", f"../../../devices/pci0000:00/{port}/{dev}")
    b.command("lspci-vvv", "00:02.0 PCI bridge: PLX Technology PEX 88096\n"
                           "\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-\n"
                           "00:03.0 PCI bridge: PLX Technology PEX 88096\n"
                           "\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-\n")


def test_acs_redirect_above_a_gpu_breaks_pcie_p2p(tmp_path):
    box = derive_bundle(H200X2, tmp_path / "box", pcie_p2p_box)
    _, results, _ = doctor(box, tmp_path)
    assert results[("node.iommu_acs", "")]["status"] == "pass"
    acs = derive_bundle(box, tmp_path / "acs", lambda b: b.command("lspci-vvv", b.command_stdout("lspci-vvv").replace(
        "ACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd-",
        "ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+", 1)))
    _, results, _ = doctor(acs, tmp_path)
    r = results[("node.iommu_acs", "")]
    assert r["status"] == "fail" and r["causes"] == ["N3"] and "0000:00:02.0" in r["summary"]


def test_empty_cuda_visible_devices_fails_on_a_gpu_node_only(tmp_path):
    gpu = derive_bundle(H200X2, tmp_path / "cvd", environ_set("CUDA_VISIBLE_DEVICES", ""))
    _, results, _ = doctor(gpu, tmp_path)
    assert results[("node.cuda_visible_devices", "")]["status"] == "fail"
    cpu = derive_bundle(gpu, tmp_path / "cvd_nodriver", lambda b: b.nvml_unavailable("no NVIDIA driver: test"))
    _, results, _ = doctor(cpu, tmp_path)
    assert results[("node.cuda_visible_devices", "")]["status"] == "warn"


def test_low_memlock_without_rdma_fails_when_the_profiles_image_sets_memlock(tmp_path):
    """The image's docker run sets memlock (slime: unlimited): below the floor is a failure even without RDMA."""
    edit = lambda b: (limits_line("Max locked memory", "65536", "65536")(b), b.listdir("/sys/class/infiniband", []))
    root = derive_bundle(H200X2, tmp_path / "memlock", edit)
    _, results, _ = doctor(root, tmp_path, "--profile", "slime-v0.3.1-cu129")
    ul = results[("node.ulimits", "")]
    assert ul["status"] == "fail" and "the image runs with memlock unlimited" in ul["summary"], ul["summary"]
    assert ul["evidence"]["explains"]  # what RDMA registration failures of the run fold under


# What a GPU probe of the same run reports because of the node fault (NCCL's, CUDA's and NVML's own messages): the
# fold (envbuild/doctor/fold.py) must put it under the node check that found the fault.
CONSEQUENCES = {
    "stale_nccl_shm_nearly_full": "include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
    "exclusive_process": "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
    "uvm_not_loaded": "Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
                      "NumCudaDevices() that might have already set an error? Error 999: unknown error",
    "libnvidia_ml_other_version": "pynvml.NVMLError_LibRmVersionMismatch: RM has detected an NVML/RM version mismatch.",
    "memlock_64k_rdma_node": "transport/net_ib.cc:1310 NCCL WARN NET/IB : ibv_reg_mr failed: Cannot allocate memory",
    "cuda_visible_devices_missing_gpu": "torch.AcceleratorError: CUDA error: invalid device ordinal",
}


@pytest.mark.parametrize("name", sorted(CONSEQUENCES))
def test_a_probe_failure_the_node_fault_explains_folds_under_it(name, tmp_path):
    from envbuild.doctor.fold import fold_consequences
    from envbuild.report.json_report import report_from_dict
    from envbuild.report.model import Result, Status

    edit, check_id, subject, _, cause = FAULTS[name]
    out = tmp_path / "r.json"
    subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--root", str(derive_bundle(H200X2, tmp_path / name,
                    edit)), "--check", check_id, "-q", "--json", str(out)], capture_output=True, timeout=120)
    [root] = [r for r in report_from_dict(json.loads(out.read_text())).results if (r.subject or "") == subject]
    assert root.status == Status.FAIL and root.evidence.get("explains"), root.summary
    probe = Result("gpu.basic", "gpu", Status.FAIL, f"the basic GPU probe failed on rank 0: {CONSEQUENCES[name]}",
                   causes=["D3"])
    fold_consequences([root, probe])
    assert probe.evidence["consequence_of"]["check"] == check_id and cause in probe.causes, probe.summary
