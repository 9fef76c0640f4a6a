"""gpu.compute: the judgement on synthetic evidence (a healthy H200 pair, a throttled GPU, a straggler among
peers, an unknown SKU, a broken rank), and the real payload (checks/gpu_compute.py) on CPU torch through the
launcher, two ranks at once, so every step of it runs in CI; and the lent H200's run (docs/gpu-runs/
doctor-quick-1gpu-s4.json) judged again from what its rank measured."""
import json
from pathlib import Path

import pytest

from envbuild.doctor.checks.gpu_compute import judge
from envbuild.doctor.launcher import launch
from envbuild.report.model import Status

H200 = {0: "NVIDIA H200", 1: "NVIDIA H200", 2: "NVIDIA H200", 3: "NVIDIA H200"}


def rank(bf16=700.0, fp16=700.0, copy=4000.0, status="pass"):
    return {"status": status, "summary": "measured", "evidence": {"device": "NVIDIA H200"},
            "metrics": [{"name": "bf16_tflops", "value": bf16, "unit": "TFLOP/s"},
                        {"name": "fp16_tflops", "value": fp16, "unit": "TFLOP/s"},
                        {"name": "hbm_copy_gbps", "value": copy, "unit": "GB/s"}]}


def by_subject(results):
    return {r.subject: r for r in results}


def test_healthy_gpus_pass_with_their_fraction_of_the_datasheet_peak():
    out = by_subject(judge({0: rank(), 1: rank(bf16=690.0)}, H200))
    assert set(out) == {"gpu0", "gpu1", "peers"} and all(r.status is Status.PASS for r in out.values())
    m = {x.name: x for x in out["gpu0"].metrics}
    assert m["bf16_fraction_of_peak"].value == round(700 / 989, 3)
    assert m["hbm_copy_fraction_of_peak"].value == round(4000 / 4800, 3)
    assert "989 TFLOP/s (H200 SXM)" in m["bf16_tflops"].expect and "datasheet" in m["bf16_tflops"].source
    assert out["gpu0"].summary.startswith("GPU 0 (H200 SXM): bf16 GEMM 700 TFLOP/s")


@pytest.mark.parametrize("bad, status, words", [
    (dict(bf16=400.0, fp16=400.0), Status.WARN, "bf16 GEMM 400 TFLOP/s = 0.40 of the H200 SXM's 989"),
    (dict(bf16=150.0, fp16=700.0), Status.FAIL, "bf16 GEMM 150 TFLOP/s = 0.15"),
    (dict(copy=1500.0), Status.FAIL, "HBM copy 1500 GB/s = 0.31 of the H200 SXM's 4800"),
])
def test_a_gpu_under_its_peak_is_named_with_the_measure_and_the_fraction(bad, status, words):
    out = by_subject(judge({0: rank(), 1: rank(**bad)}, H200))
    assert out["gpu0"].status is Status.PASS
    assert out["gpu1"].status is status and words in out["gpu1"].summary
    assert out["gpu1"].summary.startswith("GPU 1 (NVIDIA H200) below its peak")
    assert out["gpu1"].causes == ["D3", "D7", "D8"] and "nvidia-smi" in out["gpu1"].remediation


def test_the_straggler_is_named_against_the_median_even_above_the_datasheet_band():
    # every GPU above the 0.45 warn line of 989, but GPU 2 runs 20 % behind the others
    out = by_subject(judge({0: rank(), 1: rank(bf16=705.0), 2: rank(bf16=560.0), 3: rank(bf16=695.0)}, H200))
    assert out["gpu2"].status is Status.PASS
    peers = out["peers"]
    assert peers.status is Status.WARN and peers.summary.startswith("straggler: GPU 2 bf16 GEMM 560 TFLOP/s")
    assert "of the median 698" in peers.summary
    ratio = {m.name: m.value for m in peers.metrics}
    assert ratio["bf16_tflops.slowest_vs_median"] == round(560 / 697.5, 3)
    assert peers.evidence["bf16_tflops"]["gpu2"] == 560.0
    much = by_subject(judge({0: rank(), 1: rank(copy=2500.0), 2: rank()}, H200))["peers"]
    assert much.status is Status.FAIL and "GPU 1 HBM copy 2500 GB/s" in much.summary


def test_one_gpu_has_no_peer_comparison_and_an_unknown_sku_is_measured_not_judged():
    out = by_subject(judge({0: rank(bf16=90.0, fp16=90.0, copy=700.0)}, {0: "NVIDIA RTX 6000 Ada Generation"}))
    assert set(out) == {"gpu0"}
    assert out["gpu0"].status is Status.PASS and "not judged against a peak" in out["gpu0"].summary
    assert [m.expect for m in out["gpu0"].metrics] == [None, None, None]


def test_a_rank_that_skipped_or_failed_keeps_its_own_verdict():
    out = by_subject(judge({0: rank(), 1: {"status": "fail", "summary": "a 1 GiB device copy came back different",
                                           "causes": ["D3"], "metrics": []}}, H200))
    assert out["gpu1"].status is Status.FAIL and out["gpu1"].causes == ["D3"]
    assert "peers" not in out  # one GPU measured: nothing to compare


def test_the_payload_runs_on_cpu_torch_two_ranks_at_once(torch_env, tmp_path):
    python, env = torch_env
    out = launch("gpu_compute.py", 2, python=python, gpus=None, backend="none", env=env, deadline_s=120,
                 args=["--device", "cpu", "--seconds", "0.05", "--gemm-n", "128", "--copy-mib", "4"],
                 phase_deadlines={"*": 60})
    assert out.ok, [r.stderr_tail for r in out.ranks]
    for r in out.ranks:
        assert r.result["status"] == "pass" and r.result["evidence"]["device"] == "cpu"
        assert [m["name"] for m in r.result["metrics"]] == ["bf16_tflops", "fp16_tflops", "hbm_copy_gbps"]
        assert all(m["value"] > 0 for m in r.result["metrics"]) and r.result["evidence"]["copy"]["exact"]
    results = by_subject(judge({k: r.result for k, r in enumerate(out.ranks)}, {0: "cpu", 1: "cpu"}))
    assert set(results) == {"gpu0", "gpu1", "peers"}
    assert "not judged against a peak" in results["gpu0"].summary


def test_the_recorded_h200_measure_is_judged_again_to_the_same_verdict():
    """Session 4, 1xH200, `doctor --quick --gpus 0`: bf16 686 TFLOP/s (0.693 of the 989 dense peak; its best
    batch 790, what the machine notes' 8192^3 product gives), fp16 649, HBM copy 4261 GB/s (0.888 of 4800)."""
    report = json.loads((Path(__file__).resolve().parents[2] / "docs" / "gpu-runs" / "doctor-quick-1gpu-s4.json")
                        .read_text())
    recorded = next(r for r in report["results"] if r["check_id"] == "gpu.compute")
    raw = {m["name"]: m["value"] for m in recorded["metrics"] if not m["name"].endswith("_fraction_of_peak")}
    out = by_subject(judge({0: rank(bf16=raw["bf16_tflops"], fp16=raw["fp16_tflops"], copy=raw["hbm_copy_gbps"])},
                           {0: report["gpus"][0]["name"] if report.get("gpus") else "NVIDIA H200"}))
    assert set(out) == {"gpu0"}  # one GPU: no peer comparison
    assert out["gpu0"].status.value == recorded["status"] == "pass"
    assert out["gpu0"].summary == recorded["summary"]
    fractions = {m.name: m.value for m in out["gpu0"].metrics if m.name.endswith("_fraction_of_peak")}
    assert fractions == {"bf16_fraction_of_peak": 0.693, "fp16_fraction_of_peak": 0.656,
                         "hbm_copy_fraction_of_peak": 0.888}
