"""The stack probe runs under the doctor's launcher (envbuild/doctor/stack_reader.py), and the environment it
records is still the user's: the launcher's own variables (NVLS pinned off, ENVBUILD_*, rank variables) never
reach the facts that stack.env_policy judges.

The doctor here is the real CLI; its --python is a small wrapper that writes down the environment and signal
mask the probe process really got, then execs this venv's python (no torch) on the real checks/stack_probe.py.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stackfix import clean_env, run_doctor

LAUNCHER_VARS = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST")


def wrapper(tmp_path: Path) -> Path:
    """A --python that records what the launcher handed the probe (environ, SigBlk) before running it."""
    seen = tmp_path / "seen"
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\nenv > {seen}.env\ngrep SigBlk /proc/self/status > {seen}.sigblk\n"
                      f"exec {sys.executable} \"$@\"\n")
    script.chmod(0o755)
    return script


def seen_env(tmp_path: Path) -> dict:
    lines = (tmp_path / "seen.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_the_probe_runs_under_the_launcher_and_records_the_users_environment(tmp_path):
    env = clean_env(NCCL_CUMEM_ENABLE="0")
    for var in LAUNCHER_VARS:
        env.pop(var, None)
    proc, results = run_doctor(["--check", "stack.env_policy", "--python", str(wrapper(tmp_path))], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    # The probe process itself ran under the launcher: its run directory, the marker, NVLS pinned off, and an
    # empty signal mask (rank_preexec), whatever the doctor held back while it started the probe.
    got = seen_env(tmp_path)
    assert got["ENVBUILD_RUN_DIR"] and got["NCCL_NVLS_ENABLE"] == "0" and got["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert set(json.loads(got["ENVBUILD_LAUNCHER_SET"])) >= {"ENVBUILD_RUN_DIR", *LAUNCHER_VARS}
    assert int((tmp_path / "seen.sigblk").read_text().split()[1], 16) == 0
    # ... and none of that is in the facts: the recorded environment is exactly the user's policy variables.
    res = results["stack.env_policy"]
    assert res["evidence"]["env"] == {"NCCL_CUMEM_ENABLE": "0"}, res["evidence"]["env"]
    assert res["status"] == "pass" and res["summary"].startswith("1 policy variables set")


def test_a_users_value_the_launcher_overrides_is_the_one_judged(tmp_path):
    """The launcher pins NCCL_NVLS_ENABLE=0 in the probe's process; the user's shell has 1, and that is what
    stack.env_policy must warn about (a leak of the pin would make it pass)."""
    env = clean_env(NCCL_NVLS_ENABLE="1")
    env.pop("TORCH_SYMM_MEM_DISABLE_MULTICAST", None)
    proc, results = run_doctor(["--check", "stack.env_policy", "--python", str(wrapper(tmp_path))], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert seen_env(tmp_path)["NCCL_NVLS_ENABLE"] == "0"  # never multicast, even for the probe
    res = results["stack.env_policy"]
    assert res["evidence"]["env"] == {"NCCL_NVLS_ENABLE": "1"}
    assert res["status"] == "warn" and "NCCL_NVLS_ENABLE=1" in res["summary"]


def test_a_captured_bundle_holds_the_users_environment(tmp_path):
    """capture --node records the stack facts whole: the launcher's variables are not in them either."""
    env = clean_env(PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    for var in LAUNCHER_VARS:
        env.pop(var, None)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env["PYTHONPATH"]])
    bundle = tmp_path / "b"
    proc = subprocess.run([sys.executable, "-m", "envbuild", "capture", "--node", str(bundle), "-q"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    stack = json.loads((bundle / ".envbuild" / "stack.json").read_text())["data"]
    assert stack["env"] == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert not any(k.startswith("ENVBUILD_") for k in stack["env"])


def test_collect_kills_a_probe_that_never_answers_and_its_children(tmp_path):
    """envbuild.doctor.stack_reader.read_stack: a probe that hangs past the deadline becomes FactUnavailable (a
    skip with the reason) and leaves no process behind."""
    from envbuild.doctor.stack_reader import read_stack
    from envbuild.facts.source import FactUnavailable

    pidfile = tmp_path / "child.pid"
    hang = tmp_path / "python"
    hang.write_text(f"#!/bin/sh\necho started >&2\nsleep 300 &\necho $! > {pidfile}\nwait\n")
    hang.chmod(0o755)
    t0 = time.monotonic()
    with pytest.raises(FactUnavailable) as exc:
        read_stack(str(hang), timeout_s=2)
    assert time.monotonic() - t0 < 30
    assert "did not answer within 2 s" in str(exc.value) and "started" in str(exc.value)
    child = int(pidfile.read_text())
    for _ in range(50):
        try:
            state = open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            break
        if state in ("Z", "X"):  # killed, waiting for whoever adopted it to reap it
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the probe's child {child} survived")


def test_a_stopped_doctor_takes_the_early_started_probe_with_it(tmp_path):
    """The probe starts before the checks (it overlaps the node checks); SIGTERM to the doctor while it hangs
    ends the doctor with 143 and the probe and its child with it, long before the probe's 180 s deadline."""
    pidfile = tmp_path / "child.pid"
    hang = tmp_path / "python"
    hang.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {pidfile}\nwait\n")
    hang.chmod(0o755)
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env["PYTHONPATH"]])
    doctor = subprocess.Popen([sys.executable, "-m", "envbuild", "doctor", "-q", "--python", str(hang),
                               "--check", "stack.*", "--json", str(tmp_path / "r.json")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    for _ in range(300):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        time.sleep(0.05)
    else:
        doctor.kill()
        raise AssertionError("the stack probe never started")
    child = int(pidfile.read_text())
    doctor.send_signal(signal.SIGTERM)
    assert doctor.wait(timeout=30) == 143, doctor.stderr.read()
    for _ in range(50):
        try:
            state = open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            break
        if state in ("Z", "X"):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the probe's child {child} survived the stopped doctor")


def test_a_probe_stopped_at_its_deadline_is_reported_with_the_phase_it_was_in(tmp_path):
    """The real probe with a torch whose import hangs, and a deadline (2 s) shorter than its own init watchdog (5 s):
    the launcher stops it, and the reason names the phase the probe wrote (rank0.phase), not just the timeout."""
    from envbuild.doctor.stack_reader import read_stack
    from envbuild.facts.source import FactUnavailable

    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("import time\ntime.sleep(60)\n")
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    script.chmod(0o755)
    with pytest.raises(FactUnavailable) as exc:
        read_stack(str(script), timeout_s=2)
    assert "did not answer within 2 s (it was in phase 'import torch')" in str(exc.value)


def test_while_the_stack_probe_runs_the_checks_that_do_not_need_it_go_first(tmp_path):
    """A stack probe that takes seconds does not hold up the node checks after the first one that reads it
    (node.driver_version), while every check that reads its facts or uses a GPU (its CUDA context is on GPU 0
    until it exits) waits for it; the report still lists every check in the registry's order."""
    from envbuild.doctor.registry import all_checks

    slow = tmp_path / "python"
    slow.write_text(f"#!/bin/sh\nsleep 2\nexec {sys.executable} \"$@\"\n")
    slow.chmod(0o755)
    proc, results = run_doctor(["--quick", "--python", str(slow)], clean_env(), tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    finished = [m.group(1) for m in re.finditer(r"^\[\s*\d+/\d+\]\s+\S+\s+(\S+)", proc.stderr, re.M)]
    assert finished.index("node.wsl") < finished.index("node.driver_version")  # the node checks went first
    first_waiting = min(finished.index(c) for c in ("node.driver_version", "gpu.basic"))
    assert all(finished.index(c.id) < first_waiting for c in all_checks() if c.category == "node"
               and c.id != "node.driver_version")
    assert finished.index("stack.torch") < finished.index("gpu.basic")  # GPU probes after the probe's answer
    # the first check that asked waited for the probe's answer (the wrapper's 2 s)
    assert max(r["duration_s"] for r in results.values()) >= 1.0
    ids = list(results)
    assert ids == [c.id for c in all_checks() if c.id in results]


def test_a_gated_prefetch_makes_no_cuda_call_before_the_gate_opens_and_leaves_nothing(tmp_path, monkeypatch):
    """start_stack_early's order: the probe starts, loads torch's libraries, and waits at the gate while the
    doctor takes NVML's snapshot; its first CUDA call follows open_gate, and close leaves no gate behind."""
    import glob
    import tempfile

    from envbuild import leftovers
    from envbuild.doctor.stack_reader import StackPrefetch
    from stackfix import fake_torch

    site, trace = tmp_path / "site", tmp_path / "first-cuda-call"
    fake_torch(site)
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("FAKE_CUDA_TRACE", str(trace))
    gates = os.path.join(tempfile.gettempdir(), leftovers.tmp_prefix("envbuild-run") + "*", "gate")
    before = set(glob.glob(os.path.dirname(gates)))  # run dirs other tests of this process left
    reader = StackPrefetch()
    reader.start(sys.executable, gated=True)
    try:
        time.sleep(1.5)
        assert reader.pending() and not trace.exists()
        reader.open_gate()
        data = reader(sys.executable)
        assert trace.exists() and data["init"]["nccl_group"] is True and data["init"]["gate_wait_s"] > 0.5
    finally:
        reader.close()
    assert glob.glob(gates) == [] and set(glob.glob(os.path.dirname(gates))) <= before
