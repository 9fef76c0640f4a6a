"""node.net_interfaces: the interfaces and RDMA ports NCCL_SOCKET_IFNAME, NCCL_IB_HCA, GLOO_SOCKET_IFNAME and
TP_SOCKET_IFNAME name exist and are up, judged with NCCL's rules (prefix, `^` exclusion, `=` exact, `:port`), on
fake /sys/class/net and /sys/class/infiniband trees; and what it finds is the one root cause the run's NCCL
failures fold under (envbuild/doctor/fold.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

import pytest

from envbuild.doctor.context import DoctorContext
from envbuild.doctor.registry import discover
from envbuild.doctor.runner import run_check
from envbuild.doctor.checks.node_net_interfaces import parse_selector
from envbuild.facts.source import LiveSource
from envbuild.doctor.fold import fold_consequences, root_causes
from envbuild.report.model import Result, Status
from fakenode import H200X2, derive_bundle, write_tree

UP, DOWN = ("up", "0x1003"), ("down", "0x1002")
LO = ("unknown", "0x9")  # what the loopback really reports: operstate unknown, IFF_UP set


def node(tmp_path: Path, env: Dict[str, str], nets: Optional[Dict[str, tuple]] = None,
         hcas: Optional[Dict[str, Dict[int, str]]] = None) -> LiveSource:
    files = {"/proc/self/environ": "".join(f"{k}={v}\0" for k, v in {"PATH": "/usr/bin", **env}.items())}
    for name, (operstate, flags) in (nets if nets is not None else {"lo": LO, "eth0": UP}).items():
        files[f"/sys/class/net/{name}/operstate"] = operstate + "\n"
        files[f"/sys/class/net/{name}/flags"] = flags + "\n"
    for hca, ports in (hcas or {}).items():
        for port, state in ports.items():
            files[f"/sys/class/infiniband/{hca}/ports/{port}/state"] = state + "\n"
            files[f"/sys/class/infiniband/{hca}/ports/{port}/phys_state"] = (
                "5: LinkUp\n" if "ACTIVE" in state else "3: Disabled\n")
    root = write_tree(tmp_path / "root", files)
    return LiveSource(str(root))


def judge(tmp_path: Path, env: Dict[str, str], **kw) -> Result:
    check = discover()["node.net_interfaces"]
    [result] = run_check(check, DoctorContext(facts=node(tmp_path, env, **kw)))
    return result


def test_nccl_rules_prefix_exclusion_exact_and_port():
    assert parse_selector("eth", "nccl").selects("eth10")
    assert not parse_selector("=eth", "nccl").selects("eth0")
    assert parse_selector("=eth0,eth1", "nccl").selects("eth1")  # `=` makes every entry exact (NCCL's docs)
    assert not parse_selector("=eth0,eth1", "nccl").selects("eth10")
    assert not parse_selector("^docker", "nccl").selects("docker0")
    assert parse_selector("^docker", "nccl").selects("eth0")
    assert parse_selector("^=docker0", "nccl").selects("docker01")
    assert not parse_selector("^=docker0", "nccl").selects("docker0")
    hca = parse_selector("mlx5_0:1,mlx5_1", "nccl")
    assert hca.selects("mlx5_0", 1) and not hca.selects("mlx5_0", 2) and hca.selects("mlx5_12", 2)
    assert not parse_selector("eth0", "exact").selects("eth01")  # Gloo and TensorPipe take whole names


def test_unset_variables_pass_without_reading_sys(tmp_path):
    r = judge(tmp_path, {}, nets={})
    assert r.status == Status.PASS and "no NCCL_SOCKET_IFNAME" in r.summary


def test_nonexistent_socket_interface_fails_and_names_what_it_explains(tmp_path):
    r = judge(tmp_path, {"NCCL_SOCKET_IFNAME": "nonexistent0"})
    assert r.status == Status.FAIL and r.causes == ["U4", "C4"]
    assert "NCCL_SOCKET_IFNAME=nonexistent0 selects no network interface on this node (it has eth0, lo)" in r.summary
    assert "no socket interface" in r.summary and "bootstrap" in r.summary
    assert any("no socket interface" in p for p in r.evidence["explains"])


@pytest.mark.parametrize("value,status", [
    ("eth", Status.PASS),       # a prefix: eth0
    ("=eth", Status.FAIL),      # exact: there is no interface called "eth"
    ("=eth0", Status.PASS),
    ("^eth", Status.PASS),      # everything but eth*: lo is left
    ("^eth,lo", Status.FAIL),   # nothing left
    ("eth,ib", Status.WARN),    # eth0 used; "ib" matches nothing
])
def test_socket_ifname_follows_nccl_matching(tmp_path, value, status):
    assert judge(tmp_path, {"NCCL_SOCKET_IFNAME": value}).status == status, value


def test_an_interface_that_is_down_fails(tmp_path):
    r = judge(tmp_path, {"NCCL_SOCKET_IFNAME": "=eth1"}, nets={"lo": LO, "eth0": UP, "eth1": DOWN})
    assert r.status == Status.FAIL and "down (eth1 down)" in r.summary


def test_gloo_names_are_exact(tmp_path):
    assert judge(tmp_path, {"GLOO_SOCKET_IFNAME": "eth"}).status == Status.FAIL
    assert judge(tmp_path, {"GLOO_SOCKET_IFNAME": "eth0"}).status == Status.PASS


@pytest.mark.parametrize("value,status,text", [
    ("mlx5_1", Status.PASS, None),          # a prefix: mlx5_10 counts (NCCL's docs warn of exactly this)
    ("=mlx5_1", Status.FAIL, "selects no RDMA port"),
    ("mlx5_0:2", Status.FAIL, "selects no RDMA port"),
    ("=mlx5_2", Status.FAIL, "not ACTIVE (mlx5_2:1 1: DOWN)"),
    ("^=mlx5_2", Status.PASS, None),
])
def test_ib_hca_rules_on_a_fake_infiniband_tree(tmp_path, value, status, text):
    r = judge(tmp_path, {"NCCL_IB_HCA": value},
              hcas={"mlx5_0": {1: "4: ACTIVE"}, "mlx5_10": {1: "4: ACTIVE"}, "mlx5_2": {1: "1: DOWN"}})
    assert r.status == status, r.summary
    assert text is None or text in r.summary


def test_ib_hca_on_a_node_without_rdma_devices_warns(tmp_path):
    r = judge(tmp_path, {"NCCL_IB_HCA": "mlx5"})
    assert r.status == Status.WARN and "no RDMA device" in r.summary


# What the run's probes report when NCCL's bootstrap finds no interface. The texts are NCCL's and torch's own:
# bootstrap.cc returns ncclInvalidUsage after "Bootstrap : no socket interface found"; torch's ProcessGroupNCCL
# appends ncclGetLastError() ("Last error:"); the stack probe's fast path reports ncclGetUniqueId's code
# (checks/_torch_native.py nccl_group).
STACK_INIT_ERROR = "ncclGetUniqueId: NCCL error 5 'invalid usage (run with NCCL_DEBUG=WARN for details)'"
TORCH_NCCL_ERROR = ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3690, invalid usage "
                    "(run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9\nncclInvalidUsage: This usually "
                    "reflects invalid usage of NCCL library.\nLast error:\nBootstrap : no socket interface found")


def _probe_failure(check_id: str, category: str, causes, phase: str) -> Result:
    return Result(check_id, category, Status.FAIL, f"the probe failed on rank 0: DistBackendError in phase {phase!r}",
                  causes=list(causes), evidence={"rank0_stderr_tail": TORCH_NCCL_ERROR})


def bad_iface_bundle(b) -> None:
    env = b.read("/proc/self/environ")
    b.write("/proc/self/environ", env + "NCCL_SOCKET_IFNAME=nonexistent0\0")
    b.listdir("/sys/class/net", ["eth0", "lo"])
    for name, (operstate, flags) in {"lo": LO, "eth0": UP}.items():
        b.write(f"/sys/class/net/{name}/operstate", operstate + "\n")
        b.write(f"/sys/class/net/{name}/flags", flags + "\n")

    def init_fails(stack):
        stack.setdefault("errors", {})["init"] = STACK_INIT_ERROR
        stack["init"] = {"cuda_tensor": True, "nccl_group": False, "method": None}
        stack["env"]["NCCL_SOCKET_IFNAME"] = "nonexistent0"
    b.stack(init_fails)


def test_replayed_bad_interface_is_the_one_root_and_stack_torch_folds_under_it(tmp_path):
    """Through the CLI on the real H200 bundle with one edit (the variable, as the shell had it): the new check
    fails first, stack.torch's NCCL init failure is reported as its consequence, env_policy stays a warning."""
    root = derive_bundle(H200X2, tmp_path / "b", bad_iface_bundle)
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--root", str(root), "--check",
                           "node.net_interfaces", "--check", "stack.torch", "--check", "stack.env_policy", "--json",
                           str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    results = {r["check_id"]: r for r in json.loads(out.read_text())["results"]}
    fails = [cid for cid, r in results.items() if r["status"] == "fail"]
    assert fails[0] == "node.net_interfaces" and "consequence" not in results["node.net_interfaces"]["summary"]
    torch = results["stack.torch"]
    assert torch["summary"].startswith("consequence of node.net_interfaces (U4, C4): torch")
    assert torch["evidence"]["consequence_of"]["blamed_before"] == ["C1", "D9"]
    assert results["node.net_interfaces"]["evidence"]["consequences"] == ["stack.torch"]
    assert results["stack.env_policy"]["status"] == "warn"
    assert "consequence of node.net_interfaces" in proc.stdout  # what the user reads in the table


def test_probe_failures_fold_under_the_bad_interface_and_nothing_folds_without_it(tmp_path):
    root = judge(tmp_path, {"NCCL_SOCKET_IFNAME": "nonexistent0"})
    root.check_id, root.category = "node.net_interfaces", "node"
    torch = Result("stack.torch", "stack", Status.FAIL, f"torch 2.11.0+cu130 could not initialise CUDA/NCCL: "
                   f"{STACK_INIT_ERROR}", causes=["C1", "D9"], evidence={"init_error": STACK_INIT_ERROR})
    offload = _probe_failure("comm.offload_cycle", "comm", ["C9", "M5"], "init")
    sync = _probe_failure("comm.weight_sync", "comm", ["C5", "C3"], "init")
    shm = Result("node.dev_shm", "node", Status.FAIL, "/dev/shm is 64 MiB", causes=["O1"])
    results = fold_consequences([root, torch, offload, sync, shm])
    assert root_causes(results) == [("node.net_interfaces", ["U4", "C4"],
                                     ["stack.torch", "comm.offload_cycle", "comm.weight_sync"])]
    assert all(r.causes == ["U4", "C4"] for r in (torch, offload, sync))
    assert shm.causes == ["O1"] and "consequence_of" not in shm.evidence  # its own fault, not explained
    alone = [_probe_failure("comm.offload_cycle", "comm", ["C9", "M5"], "init"),
             Result("stack.torch", "stack", Status.FAIL, STACK_INIT_ERROR, causes=["C1", "D9"])]
    assert [r.causes for r in fold_consequences(alone)] == [["C9", "M5"], ["C1", "D9"]]


GLOO_DRIVER = '''
import sys
from envbuild.doctor.probes import failure_result
from envbuild.doctor.registry import check, verdict
from envbuild.report.model import Result, Status

@check("comm.churn_cpu", "comm", "two real gloo ranks of the churn payload", modes=("static", "quick"))
def churn_cpu(ctx):
    from envbuild.doctor.launcher import launch
    out = launch("comm_nccl_churn.py", 2, python=sys.executable, gpus=None, backend="gloo", deadline_s=120,
                 args=["--cycles", "2", "--groups", "2", "--numel", "64"])
    return failure_result(out, what="the churn probe", crash_causes=["M4"]) or verdict(Status.PASS, "churned")

from envbuild.cli import main
main(["doctor", "--check", "node.net_interfaces", "--check", "comm.churn_cpu", "-q", "--json", sys.argv[1]])
'''


@pytest.mark.slow
def test_a_real_gloo_group_under_a_bad_gloo_interface_folds_under_the_check(tmp_path, torch_env):
    """Real torch, two real gloo ranks (the CI machine has no GPU, and Gloo follows the same kind of variable):
    GLOO_SOCKET_IFNAME naming no interface breaks the group's creation, and that failure, in torch's own words,
    is reported as a consequence of node.net_interfaces. Without the variable the same ranks pass."""
    import os

    python, env = torch_env
    driver = tmp_path / "driver.py"
    driver.write_text(GLOO_DRIVER)

    def doctor(extra):
        out = tmp_path / f"r{len(extra)}.json"
        paths = [p for p in (os.environ.get("PYTHONPATH"), env.get("PYTHONPATH")) if p]
        run_env = {**os.environ, **env, **extra, **({"PYTHONPATH": os.pathsep.join(paths)} if paths else {})}
        proc = subprocess.run([python, str(driver), str(out)], env=run_env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode in (0, 1), proc.stderr[-2000:]
        return {r["check_id"]: r for r in json.loads(out.read_text())["results"]}

    bad = doctor({"GLOO_SOCKET_IFNAME": "nonexistent0"})
    root, probe = bad["node.net_interfaces"], bad["comm.churn_cpu"]
    assert root["status"] == "fail" and root["evidence"]["consequences"] == ["comm.churn_cpu"]
    assert probe["status"] == "fail" and probe["summary"].startswith("consequence of node.net_interfaces (U4, C4)")
    assert probe["evidence"]["consequence_of"]["blamed_before"] == ["M4"]
    good = doctor({})
    assert good["node.net_interfaces"]["status"] == "pass" and good["comm.churn_cpu"]["status"] == "pass"
