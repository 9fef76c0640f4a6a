"""The train-step verdict from step records: what passes, what warns (leaks), what fails (NaN, corruption)."""
import json
import math
from pathlib import Path

import pytest

from envbuild.train.assess import GIB, MIB, PHASE_CAUSES, assess, phase_kind


def records(n=10, plain=3, loss0=12.0, used=40 * GIB, fds=100, leak_bytes=0, leak_fds=0, released=30 * GIB):
    out = []
    for k in range(n):
        out.append({"step": k, "cycle": True, "loss": loss0 - 0.2 * k, "grad_norm": 5.0 - 0.1 * k,
                    "train_s": 0.5 if k else 3.0, "sync_s": 0.1, "offload_s": 1.0, "resume_s": 1.0,
                    "rebuild_s": 0.4, "cycle_s": 3.0 if k else 5.5, "sync_bytes": 10 * GIB, "sync_bad_buckets": 0,
                    "released_bytes": released, "used_after_step": used + k * leak_bytes,
                    "fds": fds + k * leak_fds, "peak_allocated_bytes": 50 * GIB})
    for j in range(plain):
        out.append({"step": n + j, "cycle": False, "loss": loss0 - 0.2 * (n + j), "grad_norm": 4.0,
                    "train_s": 0.5, "used_after_step": used, "fds": fds})
    return out


KW = dict(global_tokens=8192, flops_per_token=3e9, gpus=2, peak_tflops=989.0, weight_bytes=4 * GIB)


def metric(v, name):
    return next(m["value"] for m in v.metrics if m["name"] == name)


def test_a_healthy_run_passes_with_its_numbers():
    v = assess(records(), **KW)
    assert v.status == "pass", v.problems
    assert metric(v, "loss_first") == 12.0 and metric(v, "loss_last") < 12.0
    assert metric(v, "tokens_per_s") == 8192 / 0.5
    assert metric(v, "mfu") == round(8192 / 0.5 * 3e9 / (2 * 989e12), 6)
    assert metric(v, "cycle_over_plain") == 3.0 / 0.5  # step 0 (warm-up) left out
    assert metric(v, "released_over_weights") == 7.5
    assert metric(v, "sync_GBps") == round(10 * GIB / 0.1 / 1e9, 6)


def test_memory_and_fd_growth_warn_with_m4():
    v = assess(records(leak_bytes=64 * MIB), **KW)
    assert v.status == "warn" and v.causes == ["M4"]
    assert "device memory grew 512 MiB over 8 cycles (64 MiB per cycle)" in v.summary
    v = assess(records(leak_fds=2), **KW)
    assert v.status == "warn" and "open file descriptors grew by 16 over 8 cycles (2 per cycle)" in v.summary


def test_nan_loss_fails_and_points_at_poisoned_context():
    recs = records()
    recs[4]["loss"] = math.nan
    v = assess(recs, **KW)
    assert v.status == "fail" and "loss not finite at step(s) [4]" in v.summary
    assert v.causes[:2] == ["M5", "C9"]


def test_corrupted_sync_fails_and_weak_offload_warns():
    recs = records(released=1 * GIB)
    recs[2]["sync_bad_buckets"] = 3
    v = assess(recs, **KW)
    assert v.status == "fail"
    assert "corrupted buckets at step(s) [2]" in v.summary and "released 1.00 GiB" in v.summary


def test_unknown_peak_gives_no_mfu_and_phases_map_to_causes():
    v = assess(records(), **dict(KW, peak_tflops=None))
    assert all(m["name"] != "mfu" for m in v.metrics)
    assert phase_kind("rebuild 3") == "rebuild" and PHASE_CAUSES["rebuild"] == ("M4", "C2")
    assert PHASE_CAUSES[phase_kind("resume 0")] == ("C9", "M5")


RECORDED = Path(__file__).resolve().parent.parent / "docs" / "gpu-runs" / "train-moe-tp2sp-move.json"


def test_replay_of_the_lent_machine_run_finds_the_per_cycle_leak():
    """docs/gpu-runs/train-moe-tp2sp-move.json: TP 2 + SP, EP 2, 2 layers, host-copy offload; the run was
    stopped in rebuild 5, after five cycles that each destroyed and re-created 11 NCCL groups."""
    steps = json.loads(RECORDED.read_text())["results"][0]["evidence"]["steps"]
    cycles = [s for s in steps if s["cycle"]]
    assert len(cycles) == 5 and all(s["state_intact"] and s["groups_rebuilt"] == 11 for s in cycles)
    v = assess(steps, **dict(KW, weight_bytes=2 * GIB))
    assert v.status == "warn" and v.causes == ["M4"]
    grew = cycles[-1]["used_after_step"] - cycles[1]["used_after_step"]
    fds = cycles[-1]["fds"] - cycles[1]["fds"]
    assert grew > 3 * 1024 * MIB and fds >= 3 * 11  # what the records say, before any judging
    assert f"device memory grew {grew / MIB:.0f} MiB over 3 cycles" in v.summary
    assert f"open file descriptors grew by {fds} over 3 cycles" in v.summary
    assert metric(v, "loss_last") < metric(v, "loss_first")


def test_without_offload_what_the_groups_freed_is_not_held_against_the_weights():
    """docs/gpu-runs/train-moe-big1-fit.json: 7 layers on one H200 with train.offload=none; destroying the
    21 groups freed 7.96 GiB, less than the 9.28 GiB of weights, which is no fault when nothing is offloaded."""
    ev = json.loads((RECORDED.parent / "train-moe-big1-fit.json").read_text())["results"][0]["evidence"]
    weights = ev["weight_bytes_per_rank"]
    judged = assess(ev["steps"], **dict(KW, weight_bytes=weights))
    assert judged.status == "warn" and "less than the 9.28 GiB of weights" in judged.summary
    plain = assess(ev["steps"], **dict(KW, weight_bytes=weights, offloaded=False))
    assert plain.status == "pass", plain.summary
    assert metric(plain, "released_GiB") == pytest.approx(7.96, abs=0.01)
