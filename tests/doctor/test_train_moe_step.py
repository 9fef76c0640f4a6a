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
    (["--set", "train.cp=2", "--set", "train.spec=local"],
     "train.cp=2 with train.spec=local: megatron-core's local attention refuses context parallel"),
    # this test environment has no Transformer Engine: read from its packages before any launch
    (["--set", "train.cp=2"], "train.cp=2 needs Transformer Engine"),
    (["--set", "train.spec=te"], "train.spec=te needs Transformer Engine"),
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


def _probe(ctx):
    """What the runner hands the train check for this context (its ProbeRun)."""
    from envbuild.doctor.probe_run import ProbeRun
    from envbuild.doctor.registry import discover

    return ProbeRun(discover()["train.moe_step"], ctx)


def _run_in_this_python(monkeypatch, world=2, **env):
    """Launch the real payload with this (torch-free, megatron-free) python through the check's code."""
    from envbuild.doctor.checks.train_moe_step import run_payload
    from envbuild.train.layout import derive_layout
    from envbuild.train.memory import estimate_bytes
    from envbuild.doctor.registry import validate_options
    from envbuild.train.options import train_options
    from envbuild.train.presets import get_preset

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    ctx = DoctorContext(facts=open_source(None, python=sys.executable), mode="full", python=sys.executable)
    opts = train_options(validate_options({"train.layers": "2", "train.deadline": "60"}), "full")
    shape = get_preset(opts.preset)
    layout = derive_layout(world, shape, opts.layers, opts.seq, tp=1)
    return run_payload(_probe(ctx), opts, shape, layout, {}, estimate_bytes(shape, layout, 2, 4096, 1))


def test_missing_megatron_core_is_a_skip_with_the_install_command(monkeypatch, no_gpu_env):
    res = _run_in_this_python(monkeypatch)
    assert res.status == Status.SKIP
    assert "megatron-core is not installed" in res.summary
    assert "pip install megatron-core==0.19.2" in res.remediation
    assert res.evidence["layout"]["ep"] == 2


def test_a_rank_dying_in_a_phase_is_reported_naming_the_phase(monkeypatch, no_gpu_env):
    res = _run_in_this_python(monkeypatch, ENVBUILD_TEST_CRASH_AT="import", ENVBUILD_TEST_SIGSTOP_RANK="1")
    assert res.status == Status.ERROR  # before the model exists nothing about the node is known
    assert res.summary.startswith("[import] ")
    assert "rank 1 exited with code 3" in res.summary
    assert res.evidence["failed_phase"] == "import"


def test_replayed_hang_after_leaking_cycles_names_rebuild_and_m4(monkeypatch):
    """The lent machine's TP 2 + SP run (docs/gpu-runs/train-moe-tp2sp-move.json) replayed through the
    check: the launcher outcome is rebuilt from the recorded per-rank phases and step records."""
    from pathlib import Path

    from envbuild.doctor import launcher
    from envbuild.doctor.checks.train_moe_step import run_payload
    from envbuild.doctor.launcher import LaunchOutcome, RankOutcome
    from envbuild.train.layout import derive_layout
    from envbuild.train.memory import estimate_bytes
    from envbuild.doctor.registry import validate_options
    from envbuild.train.options import train_options
    from envbuild.train.presets import get_preset

    rec = json.loads((Path(__file__).resolve().parents[2] / "docs" / "gpu-runs"
                      / "train-moe-tp2sp-move.json").read_text())["results"][0]["evidence"]
    partial = {"status": "error", "partial": True, "summary": "stopped after step 4",
               "evidence": {"steps": rec["steps"], "weight_bytes_per_rank": 1_868_000_000}}
    ranks = [RankOutcome(rank=k, returncode=-15, result=partial, phase=rec["phases"][f"rank{k}"],
                         stderr_tail="", log_path="", stack_dump="", phase_elapsed_s=12.0) for k in (0, 1)]
    outcome = LaunchOutcome(ranks=ranks, timed_out=True, hung_ranks=[0, 1], crashed_ranks=[], wall_s=74.0,
                            reason="run deadline of 70 s passed")
    monkeypatch.setattr(launcher, "launch", lambda *a, **k: outcome)
    ctx = DoctorContext(facts=open_source(None, python=sys.executable), mode="full", python=sys.executable)
    opts = train_options(validate_options({"train.layers": "2", "train.tp": "2", "train.sp": "1", "train.ep": "2"}), "full")
    shape = get_preset(opts.preset)
    layout = derive_layout(2, shape, 2, 4096, tp=2, sp=True, ep=2)
    res = run_payload(_probe(ctx), opts, shape, layout, {}, estimate_bytes(shape, layout, 2, 4096, 1))
    assert res.status == Status.FAIL
    assert res.summary.startswith("[rebuild] the train-step cycle hung: rank 0 hung in phase 'rebuild 5'")
    assert "5 cycle(s) had completed" in res.summary
    assert "before that: device memory grew" in res.summary and "open file descriptors grew" in res.summary
    assert res.causes[0] == "M4" and "C2" in res.causes
    assert any(m.name == "device_memory_growth_MiB" and m.value > 3000 for m in res.metrics)


def test_a_rank_that_raised_is_attributed_to_its_verdict_phase_not_teardown(monkeypatch):
    """First lent-machine run (docs/gpu-runs/train-moe-first-tp2sp.json): both ranks raised in `build`
    (torch's norm refused sequence parallel) and their phase files said `teardown`."""
    from envbuild.doctor import launcher
    from envbuild.doctor.checks.train_moe_step import run_payload
    from envbuild.doctor.launcher import LaunchOutcome, RankOutcome
    from envbuild.train.layout import derive_layout
    from envbuild.train.memory import estimate_bytes
    from envbuild.doctor.registry import validate_options
    from envbuild.train.options import train_options
    from envbuild.train.presets import get_preset

    verdict = {"status": "error", "phase": "build", "exception": "AssertionError",
               "summary": "AssertionError in phase 'build': sequence parallel not supported by torch LayerNorm"}
    ranks = [RankOutcome(rank=k, returncode=1, result=verdict, phase="teardown", stderr_tail="AssertionError: x",
                         log_path="", stack_dump="") for k in (0, 1)]
    outcome = LaunchOutcome(ranks=ranks, timed_out=False, hung_ranks=[], crashed_ranks=[0, 1], wall_s=26.0,
                            reason="rank 0 exited with code 1")
    monkeypatch.setattr(launcher, "launch", lambda *a, **k: outcome)
    ctx = DoctorContext(facts=open_source(None, python=sys.executable), mode="full", python=sys.executable)
    opts = train_options(validate_options({"train.tp": "2"}), "full")
    shape = get_preset(opts.preset)
    layout = derive_layout(2, shape, 4, 4096, tp=2)
    res = run_payload(_probe(ctx), opts, shape, layout, {}, estimate_bytes(shape, layout, 4, 4096, 1))
    assert res.status == Status.ERROR and res.summary.startswith("[build] ")  # the check broke, not the node
    assert res.causes == []
    assert res.evidence["failed_phase"] == "build"
    assert "sequence parallel not supported" in res.summary


def _replay(monkeypatch, ranks, world=2, options=None, gpu=None, **outcome_kw):
    """run_payload with the launcher replaced by a recorded or built outcome; by default EP 2 on 2 GPUs,
    2 layers."""
    from envbuild.doctor import launcher
    from envbuild.doctor.checks.train_moe_step import run_payload
    from envbuild.doctor.launcher import LaunchOutcome
    from envbuild.train.layout import derive_layout
    from envbuild.train.memory import estimate_bytes
    from envbuild.doctor.registry import validate_options
    from envbuild.train.options import train_options
    from envbuild.train.presets import get_preset

    kw = dict(timed_out=False, hung_ranks=[], crashed_ranks=[], wall_s=60.0)
    kw.update(outcome_kw)
    outcome = LaunchOutcome(ranks=ranks, **kw)
    monkeypatch.setattr(launcher, "launch", lambda *a, **k: outcome)
    ctx = DoctorContext(facts=open_source(None, python=sys.executable), mode="full", python=sys.executable)
    opts = train_options(validate_options(options or {"train.layers": "2", "train.tp": "1", "train.ep": "2"}), "full")
    shape = get_preset(opts.preset)
    layout = derive_layout(world, shape, opts.layers, opts.seq, tp=opts.tp, ep=opts.ep)
    return run_payload(_probe(ctx), opts, shape, layout, gpu or {"name": "NVIDIA H200"},
                       estimate_bytes(shape, layout, opts.layers, opts.seq, opts.mbs))


def _steps(n=10, plain=3):
    GIB = 1024 ** 3
    out = [{"step": k, "cycle": True, "loss": 12.0 - 0.3 * k, "grad_norm": 3.0, "train_s": 0.4,
            "sync_s": 0.05, "offload_s": 1.0, "resume_s": 0.5, "rebuild_s": 0.5, "cycle_s": 2.45,
            "sync_bytes": 5 * GIB, "sync_bad_buckets": 0, "released_bytes": 20 * GIB, "used_after_step": 30 * GIB,
            "fds": 300, "peak_allocated_bytes": 25 * GIB, "state_intact": True} for k in range(n)]
    return out + [{"step": n + j, "cycle": False, "loss": 9.0 - 0.1 * j, "grad_norm": 2.0, "train_s": 0.35,
                   "used_after_step": 30 * GIB, "fds": 300} for j in range(plain)]


def _rank(k, result, phase="teardown", returncode=0):
    from envbuild.doctor.launcher import RankOutcome

    return RankOutcome(rank=k, returncode=returncode, result=result, phase=phase, stderr_tail="", log_path="",
                       stack_dump="")


def test_a_clean_run_passes_with_throughput_mfu_and_release(monkeypatch):
    ev = {"steps": _steps(), "gpu_name": "NVIDIA H200", "weight_bytes_per_rank": 2 * 1024 ** 3,
          "megatron_core": "0.19.2", "spec": "local", "groups_member": 11}
    done = {"status": "pass", "summary": "10 cycle steps + 3 plain steps ran", "evidence": ev}
    res = _replay(monkeypatch, [_rank(0, done), _rank(1, done)])
    assert res.status == Status.PASS, res.summary
    assert res.summary.startswith("10 cycles + 3 plain steps, 2 layers, TP 1, EP 2")
    assert "loss 12.00 -> 8.80" in res.summary and "MFU" in res.summary and "of 989 TFLOP/s" in res.summary
    assert "cycle 7.0x a plain step" in res.summary and "offload freed 20.0 GiB (10.0x weights)" in res.summary
    names = {m.name for m in res.metrics}
    assert {"layers", "tokens_per_s", "mfu", "cycle_over_plain", "released_GiB", "fd_growth"} <= names
    assert res.evidence["peak_sku"]["sku"] == "H200 SXM"
    assert res.evidence["global_tokens_per_step"] == 2 * 4096  # DP 2


def test_a_hang_in_teardown_after_the_verdicts_is_a_warning(monkeypatch):
    ev = {"steps": _steps(), "gpu_name": "NVIDIA H200", "weight_bytes_per_rank": 2 * 1024 ** 3}
    done = {"status": "pass", "summary": "ran", "evidence": ev}
    res = _replay(monkeypatch, [_rank(0, done, returncode=-15), _rank(1, done)], timed_out=True, hung_ranks=[0],
                  reason="run deadline of 70 s passed")
    assert res.status == Status.WARN
    assert "rank(s) [0] hung in teardown after their result" in res.summary and res.causes == ["M4"]


def test_replayed_deadline_with_every_rank_moving_is_a_warning_not_a_hang(monkeypatch):
    """The lead's final lent-machine run (docs/gpu-runs/train-moe-ep2-final.json): EP 2 with
    torch_memory_saver took 23-25 s a cycle, so 10 cycles outlasted the 140 s deadline while both ranks
    were 2-3 s into 'rebuild 4' after 4 healthy cycles. That is no hang: warn, say the deadline to use."""
    from pathlib import Path

    from envbuild.doctor.launcher import RankOutcome

    rec = json.loads((Path(__file__).resolve().parents[2] / "docs" / "gpu-runs"
                      / "train-moe-ep2-final.json").read_text())["results"][0]["evidence"]
    partial = {"status": "error", "partial": True, "summary": "stopped after step 3",
               "evidence": {"steps": rec["steps"], "weight_bytes_per_rank": 2_360_000_000}}
    ranks = [RankOutcome(rank=k, returncode=-15, result=partial, phase=rec["phases"][f"rank{k}"], stderr_tail="",
                         log_path="", stack_dump="", phase_elapsed_s=2.0 + k) for k in (0, 1)]
    res = _replay(monkeypatch, ranks, timed_out=True, hung_ranks=[0, 1], wall_s=rec["wall_s"],
                  reason="run deadline of 140 s passed",  # the recorded run asked for 10 cycles (now --soak 10)
                  options={"train.layers": "2", "train.tp": "1", "train.ep": "2", "train.steps": "10"})
    assert res.status == Status.WARN, res.summary
    assert "did not finish: run deadline of 140 s passed" in res.summary and "no hang" in res.summary
    assert "4 of 10 cycles" in res.summary
    deadline = int(res.remediation.rsplit("train.deadline=", 1)[1])
    assert 4 * 24 < deadline < 600  # enough for 10 cycles of ~24 s after the recorded start-up
    assert res.causes == []


def test_a_deadline_while_a_rank_sat_in_one_phase_longer_than_a_cycle_stays_a_hang(monkeypatch):
    from pathlib import Path

    from envbuild.doctor.launcher import RankOutcome

    rec = json.loads((Path(__file__).resolve().parents[2] / "docs" / "gpu-runs"
                      / "train-moe-ep2-final.json").read_text())["results"][0]["evidence"]
    partial = {"status": "error", "partial": True, "summary": "stopped", "evidence": {"steps": rec["steps"]}}
    ranks = [RankOutcome(rank=k, returncode=-15, result=partial, phase="rebuild 4", stderr_tail="", log_path="",
                         stack_dump="", phase_elapsed_s=60.0) for k in (0, 1)]
    res = _replay(monkeypatch, ranks, timed_out=True, hung_ranks=[0, 1], wall_s=150.0,
                  reason="run deadline of 140 s passed")
    assert res.status == Status.FAIL and "hung" in res.summary
    assert "M4" in res.causes


def _replay_one_gpu(monkeypatch, verdict, layers):
    """One H200 (143771 MiB) whose only rank left `verdict` and exited 4, as the payload does on an OOM."""
    return _replay(monkeypatch, [_rank(0, verdict, phase="train 0", returncode=4)], world=1,
                   options={"train.layers": str(layers)}, gpu={"name": "NVIDIA H200", "memory_bytes": 143771 * 1024 ** 2},
                   crashed_ranks=[0], wall_s=40.0, reason="rank 0 exited with code 4")


def _oom_verdict(layers, free_at_start):
    total = 143771 * 1024 ** 2
    return {"status": "fail", "oom": True, "phase": "train 0", "rank": 0,
            "summary": f"out of memory in phase 'train 0' at depth {layers}",
            "evidence": {"steps": [], "oom": {"phase": "train 0", "message": "CUDA out of memory.",
                                             "device_total_bytes": total, "free_at_start_bytes": free_at_start}}}


def test_an_out_of_memory_names_the_phase_and_a_depth_that_fits(monkeypatch):
    from envbuild.train.layout import derive_layout
    from envbuild.train.memory import GIB, estimate_bytes
    from envbuild.train.presets import get_preset

    res = _replay_one_gpu(monkeypatch, _oom_verdict(8, 143771 * 1024 ** 2 - 1200 * 1024 ** 2), layers=8)
    assert res.status == Status.FAIL
    assert res.summary.startswith("out of memory in phase 'train 0' at depth 8 (TP 1, EP 1, PP 1, CP 1, DP 1 on 1 GPU)")
    assert "other processes held" not in res.summary  # 1.2 GiB taken = this rank's own context and WORLD
    fits = int(res.summary.rsplit("--set train.layers=", 1)[1])
    shape = get_preset("qwen3-30b-a3b")
    estimate = estimate_bytes(shape, derive_layout(1, shape, fits, 4096), fits, 4096, 1)["total"]
    assert 1 <= fits < 8 and estimate <= 0.9 * 143771 * 1024 ** 2  # what it names fits the estimate...
    bigger = estimate_bytes(shape, derive_layout(1, shape, fits + 1, 4096), fits + 1, 4096, 1)["total"]
    assert bigger > 0.9 * 143771 * 1024 ** 2  # ...and is the deepest that does
    assert res.remediation.startswith(f"rerun with --set train.layers={fits}") and res.causes == []
    assert res.evidence["held_by_others_GiB"] == 0


def test_an_out_of_memory_on_a_gpu_others_hold_says_so_and_fits_the_free_part(monkeypatch):
    from envbuild.train.memory import GIB

    free = 143771 * 1024 ** 2 - 60 * GIB  # e.g. a colocated rollout engine kept 60 GiB
    alone = _replay_one_gpu(monkeypatch, _oom_verdict(9, 143771 * 1024 ** 2), layers=9)
    shared = _replay_one_gpu(monkeypatch, _oom_verdict(9, free), layers=9)
    assert "other processes held 58.6 GiB of the GPU when the run started" in shared.summary
    fits_alone = int(alone.summary.rsplit("=", 1)[1])
    fits_shared = int(shared.summary.rsplit("=", 1)[1])
    assert fits_shared < fits_alone
    assert "free the GPU first" in shared.remediation


def test_a_payload_refusal_is_an_error_with_its_remedy(monkeypatch):
    verdict = {"status": "error", "refused": True, "phase": "build",
               "summary": "train.cp=2 needs Transformer Engine: megatron-core's local attention refuses context parallel",
               "remediation": "install transformer-engine in this environment, or use train.cp=1"}
    res = _replay(monkeypatch, [_rank(0, verdict), _rank(1, verdict)])
    assert res.status == Status.ERROR
    assert res.summary == verdict["summary"] and res.remediation == verdict["remediation"]


def test_a_python_error_inside_megatron_is_an_error_naming_megatron_not_a_node_fault(monkeypatch):
    """The lent machine's run with slime v0.3.1's Megatron-LM commit 1dcf0daf and no Transformer Engine
    (docs/gpu-runs/train-moe-mlm.json): both ranks raised NameError in the first forward's router."""
    verdict = {"status": "error", "phase": "train 0", "exception": "NameError",
               "summary": "NameError in phase 'train 0': name 'te_general_gemm' is not defined",
               "evidence": {"megatron_core": "0.16.0rc0", "megatron_core_path": "/work/main/.mlm/megatron/core"}}
    res = _replay(monkeypatch, [_rank(k, verdict, returncode=1) for k in (0, 1)], crashed_ranks=[0, 1],
                  reason="rank 0 exited with code 1")
    assert res.status == Status.ERROR and res.causes == []
    assert res.summary.startswith("[train] ") and "te_general_gemm" in res.summary
    assert "megatron-core 0.16.0rc0 at /work/main/.mlm/megatron/core cannot run in this environment" in res.summary
    assert "9ed8b0c4" in res.remediation and "transformer-engine" in res.remediation


def test_a_cuda_error_in_train_stays_a_failure_with_its_causes(monkeypatch):
    verdict = {"status": "error", "phase": "train 0", "exception": "RuntimeError",
               "summary": "RuntimeError in phase 'train 0': CUDA error: unspecified launch failure",
               "evidence": {"megatron_core": "0.19.2"}}
    res = _replay(monkeypatch, [_rank(k, verdict, returncode=1) for k in (0, 1)], crashed_ranks=[0, 1],
                  reason="rank 0 exited with code 1")
    assert res.status == Status.FAIL and set(res.causes) >= {"M5", "C9"}
    assert "cannot run in this environment" not in res.summary


def test_replayed_oom_on_a_gpu_another_process_held(monkeypatch):
    """The lent machine's run (docs/gpu-runs/train-moe-held.json): a second process held 80 GiB of GPU 0 and
    6 layers ran out of memory in the first step; the result must say so and name 2 layers, which then
    ran (train-moe-held-fit.json)."""
    from pathlib import Path

    rec = json.loads((Path(__file__).resolve().parents[2] / "docs" / "gpu-runs" / "train-moe-held.json")
                     .read_text())["results"][0]["evidence"]
    verdict = {"status": "fail", "oom": True, "phase": "train 0", "rank": 0,
               "summary": "out of memory in phase 'train 0' at depth 6",
               "evidence": {"steps": [], "oom": rec["oom"]}}
    res = _replay_one_gpu(monkeypatch, verdict, layers=6)
    assert res.status == Status.FAIL
    assert res.summary.startswith("out of memory in phase 'train 0' at depth 6 (asked for 2.00 GiB more) (TP 1")
    assert "other processes held 80.3 GiB of the GPU when the run started" in res.summary  # nvidia-smi: 80.5 GiB
    assert res.summary.endswith("depth 2 would fit: --set train.layers=2")


def test_replayed_oom_at_the_deepest_depth_the_preflight_lets_through(monkeypatch):
    """The lent machine's 8 layers on one H200 (docs/gpu-runs/train-moe-big1.json): the cycle ran, the next
    step asked for 2.32 GiB more with 9.3 GiB held outside torch (NCCL communicators). The result names 7,
    the depth the estimate (with its NCCL overhead) fits in 90 % of the GPU."""
    from pathlib import Path

    rec = json.loads((Path(__file__).resolve().parents[2] / "docs" / "gpu-runs" / "train-moe-big1.json")
                     .read_text())["results"][0]["evidence"]
    verdict = {"status": "fail", "oom": True, "phase": "plain 1", "rank": 0,
               "summary": "out of memory in phase 'plain 1' at depth 8",
               "evidence": {"steps": rec["steps"], "oom": rec["oom"]}}
    res = _replay_one_gpu(monkeypatch, verdict, layers=8)
    assert res.summary.startswith("out of memory in phase 'plain 1' at depth 8 (asked for 2.32 GiB more)")
    assert "other processes held" not in res.summary
    assert res.summary.endswith("depth 7 would fit: --set train.layers=7")


def test_the_payload_keeps_the_pinned_host_copy_between_cycles_where_tms_can(monkeypatch):
    """The train step's offload keeps slime's CPU backup but asks torch_memory_saver to keep its pinned host copy
    from one cycle to the next (re-pinning 74.5 GiB each cycle was most of --full's time); a TMS without that
    switch is left as it is and the evidence says so (None)."""
    import importlib

    from envbuild.paths import payload_dir

    monkeypatch.syspath_prepend(str(payload_dir()))
    payload = importlib.import_module("train_moe_step")

    class Tms:  # torch_memory_saver 0.0.10's API: a property backed by the hook library
        kept = False

        @property
        def retain_cpu_backup(self):
            return self.kept

        @retain_cpu_backup.setter
        def retain_cpu_backup(self, value):
            self.kept = value

    class OldTms:  # before the switch existed
        pass

    tms = Tms()
    assert payload.retain_host_shadow(tms) is True and tms.kept is True
    old = OldTms()
    assert payload.retain_host_shadow(old) is None and not hasattr(old, "retain_cpu_backup")


H100_MIB, H200_MIB = 81559, 143771  # what NVML reports for an H100 80GB HBM3 and an H200


def _check_on(monkeypatch, mib, options, rank=None):
    """The check itself on one GPU of `mib` MiB with the launcher replaced by `rank` (default: a passing rank);
    returns (its results, the payload's --layers or None when nothing was launched)."""
    import envbuild.doctor.checks.train_moe_step as check
    from envbuild.doctor import launcher, runner
    from envbuild.doctor.launcher import LaunchOutcome
    from envbuild.doctor.registry import validate_options

    launched = {}
    rank = rank or _rank(0, {"status": "pass", "summary": "ok", "evidence": {"steps": _steps()}})

    def launch(payload, nranks, **kw):
        args = kw["args"]
        launched["layers"] = int(args[args.index("--layers") + 1])
        crashed = [rank.rank] if rank.returncode else []
        return LaunchOutcome(ranks=[rank], timed_out=False, hung_ranks=[], crashed_ranks=crashed, wall_s=20.0,
                             reason=f"rank 0 exited with code {rank.returncode}" if crashed else "")

    monkeypatch.setattr(launcher, "launch", launch)
    monkeypatch.setattr(runner, "unmet_need", lambda check, ctx: None)
    monkeypatch.setattr(check, "_gpu_facts", lambda ctx: {"name": "NVIDIA GPU", "memory_bytes": mib * 1024 ** 2})
    monkeypatch.setattr(DoctorContext, "gpu_indices", lambda self: [0])
    ctx = DoctorContext(facts=open_source(None, python=sys.executable), mode="full", python=sys.executable,
                        gpus=[0], options=validate_options(options))
    return check.train_moe_step(ctx, _probe(ctx)), launched.get("layers")


def test_the_default_depth_an_80_gib_gpu_cannot_hold_is_lowered_and_said(monkeypatch):
    """`doctor --full` on an H100 refused its own default ("train.layers=4 ... needs about 81 GiB per GPU, the GPUs
    have 80 GiB", docs/gpu-runs/s13/call-g), a depth the user never chose; the H200's default stays 4."""
    results, layers = _check_on(monkeypatch, H100_MIB, {})
    assert layers == 2 and results[0].status != Status.ERROR, results[0].summary
    assert results[0].evidence["layers_chosen"].startswith("2: the default depth 4 does not fit 80 GiB")
    results, layers = _check_on(monkeypatch, H200_MIB, {})
    assert layers == 4 and "layers_chosen" not in results[0].evidence


def test_a_depth_the_user_set_is_never_changed(monkeypatch):
    results, layers = _check_on(monkeypatch, H100_MIB, {"train.layers": "4"})
    assert layers is None and results[0].status == Status.ERROR
    assert "depth 2 fits (--set train.layers=2)" in results[0].summary  # depth 3 ran out of memory there


def test_torch_memory_saver_exiting_on_out_of_memory_is_read_as_an_out_of_memory(monkeypatch):
    """At depth 3 on the H100 the rank exited 1 with torch_memory_saver's own message (docs/gpu-runs/s13/call-h) and
    the check reported a broken train cycle; it is a depth too deep for the GPU, with the depth that fits."""
    from envbuild.doctor.launcher import RankOutcome

    tail = ("[torch_memory_saver.cpp] cuMemCreate CUDA_ERROR_OUT_OF_MEMORY (may not be an issue e.g. torch allocator "
            "will free cache and retry)\n[torch_memory_saver.cpp] cudaError error: 2 (out of memory)  "
            "file=csrc/entrypoint.cpp func=tms_torch_malloc line=93\n")
    rank = RankOutcome(rank=0, returncode=1, result=None, phase="train 0", stderr_tail=tail, log_path="",
                       stack_dump="")
    results, layers = _check_on(monkeypatch, H100_MIB, {"train.layers": "3"}, rank)
    res = results[0]
    assert layers == 3 and res.status == Status.FAIL, res.summary
    assert res.summary.startswith("out of memory in phase 'train 0' at depth 3 (torch_memory_saver's allocator)")
    assert "depth 2 would fit: --set train.layers=2" in res.summary and res.causes == []
    benign = RankOutcome(rank=0, returncode=1, result=None, phase="train 0", stderr_tail=tail.splitlines()[0],
                         log_path="", stack_dump="")
    results, _ = _check_on(monkeypatch, H100_MIB, {"train.layers": "3"}, benign)
    assert "out of memory" not in results[0].summary  # the allocator's retry notice alone is no out-of-memory
