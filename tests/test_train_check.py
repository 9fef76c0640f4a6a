"""train.moe_step as a user meets it on a machine without GPUs: option errors, skips, the payload's skip.

The GPU part is proven by the runs in docs/gpu-runs/train-*.json (replayed in test_train_assess.py).
"""
import json
import subprocess
import sys

import pytest

from envbuild.doctor.context import DoctorContext
from envbuild.facts.source import open_source
from envbuild.report.model import Status


def doctor(*args, tmp_path):
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--check", "train.moe_step", "--json",
                           str(out), *args], capture_output=True, text=True, timeout=120)
    results = json.loads(out.read_text())["results"] if out.exists() else []
    return proc, results


@pytest.mark.parametrize("args, message", [
    (["--gpus", "0,1", "--set", "train.tp=3"], "TP 3 x PP 1 x CP 1 = 3 does not divide the 2 GPUs"),
    (["--gpus", "0,1", "--set", "train.ep=4", "--set", "train.tp=1"], "EP 4 x PP 1 = 4 does not divide the 2 GPUs"),
    (["--set", "train.ep=3"], "train.ep=3 does not divide the 128 experts"),
    (["--set", "train.tp=2", "--set", "train.sp=0"], "set train.sp=1"),
    (["--set", "train.layres=2"], "unknown option train.layres"),
])
def test_bad_train_options_are_an_error_result_naming_the_option(args, message, tmp_path, no_gpu_env):
    proc, results = doctor(*args, tmp_path=tmp_path)
    assert proc.returncode == 1, proc.stderr
    (res,) = results
    assert res["status"] == "error"
    assert res["summary"].startswith("bad option: ") and message in res["summary"]
    assert message.split(" ")[0] in proc.stdout  # the table shows it too
    assert "train.layers" in res["evidence"]["options"]


def test_good_options_without_a_gpu_skip_with_the_reason(tmp_path, no_gpu_env):
    proc, results = doctor("--set", "train.layers=2", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (res,) = results
    assert res["status"] == "skip"
    assert "NVIDIA" in res["summary"] or "GPU" in res["summary"]
    assert res["evidence"]["layers"] == 2


def test_listed_as_a_full_mode_train_check():
    from envbuild.doctor.registry import all_checks

    (chk,) = [c for c in all_checks() if c.id == "train.moe_step"]
    assert chk.category == "train" and chk.modes == frozenset({"full"})
    assert set(chk.causes) >= {"M4", "M5", "C9", "C2"}


def _run_in_this_python(monkeypatch, world=2, **env):
    """Launch the real payload with this (torch-free, megatron-free) python through the check's code."""
    from envbuild.doctor.checks.train_moe import run_payload
    from envbuild.train.layout import derive_layout
    from envbuild.train.memory import estimate_bytes
    from envbuild.train.options import parse_options
    from envbuild.train.presets import get_preset

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    ctx = DoctorContext(facts=open_source(None, python=sys.executable), mode="full", python=sys.executable)
    opts = parse_options({"train.layers": "2", "train.deadline": "60"}, "full")
    shape = get_preset(opts.preset)
    layout = derive_layout(world, shape, opts.layers, opts.seq, tp=1)
    return run_payload(ctx, opts, shape, layout, {}, estimate_bytes(shape, layout, 2, 4096, 1))


def test_missing_megatron_core_is_a_skip_with_the_install_command(monkeypatch, no_gpu_env):
    res = _run_in_this_python(monkeypatch)
    assert res.status == Status.SKIP
    assert "megatron-core is not installed" in res.summary
    assert "pip install megatron-core==0.19.2" in res.remediation
    assert res.evidence["layout"]["ep"] == 2


def test_a_rank_dying_in_a_phase_fails_naming_the_phase(monkeypatch, no_gpu_env):
    res = _run_in_this_python(monkeypatch, ENVBUILD_TEST_CRASH_AT="import", ENVBUILD_TEST_SIGSTOP_RANK="1")
    assert res.status == Status.FAIL
    assert res.summary.startswith("[import] ")
    assert "rank 1 exited with code 3" in res.summary
    assert res.evidence["failed_phase"] == "import"
    assert res.causes  # a failure always points somewhere
