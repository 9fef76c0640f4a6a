"""The engine on the corpus of real logs (tests/explain/corpus), scored as the benchmark's headline does:
leave-one-repository-out (a signature written only from a repository's logs is not used on that repository's
logs). Issue 25's goals are held here so a signature edit that breaks other logs fails CI: top-1 >= 85 %,
top-3 >= 95 %, expected calibration error <= 0.10, "high" right >= 90 % of the time, every healthy log clean.
The held-out slice (logs collected after the last knowledge edit) stays out of the headline.
benchmarks/bench_explain.py prints the detail."""
import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_explain.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_explain", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def loro(bench):
    return bench.accuracy(loro=True)


@pytest.fixture(scope="module")
def held(bench):
    return bench.accuracy(loro=True, held_out=True)


def test_leave_one_repository_out_top1_meets_the_goal(loro):
    assert loro["scored"] >= 200 and loro["repositories"] >= 100
    assert loro["top1"] >= 0.85, [r["file"] for r in loro["rows"] if not r["top1"]]
    assert loro["top3"] >= 0.95, [r["file"] for r in loro["rows"] if not r["top3"]]


def test_healthy_logs_raise_no_cause(loro):
    healthy = [r for r in loro["rows"] if r["label"] == "none"]
    assert len(healthy) >= 10
    assert all(r["verdict"] == "ok" for r in healthy), [r["file"] for r in healthy if r["verdict"] != "ok"]




@pytest.mark.timeout(1800)  # scoring every held-out slice's logs leave-one-repository-out takes ~10 min on 2 CPUs
def test_no_healthy_log_anywhere_gets_a_cause_above_low(loro, held):
    """Issue 25: "healthy logs (your H200 runs and public ones): no cause above low", over the held-out slices too:
    our GPU runs that catch an out-of-memory error or retry a connect and finish, and public threads that asked
    whether a warning was harmful."""
    healthy = [r for r in loro["rows"] + held["rows"] if r["label"] == "none"]
    assert len(healthy) >= 80
    loud = {r["file"]: r["predicted"][0] for r in healthy
            if r["verdict"] != "ok" and r["label_word"] in ("high", "medium")}
    # none since session 27 (gpu-s26-06 is read by envbuild/explain/logged.py; home-ops-13689 was relabelled D10,
    # its manifest notes say why)
    assert not loud, loud


def test_confidence_is_calibrated_and_high_means_right(bench, loro):
    cal = bench.calibration(loro["rows"])
    assert cal["n"] >= 150
    assert cal["ece"] <= 0.10
    high = cal["labels"]["high"]
    assert high["n"] >= 50 and high["precision"] >= 0.90


def test_held_out_repository_loses_only_its_own_signatures(bench):
    """nccl.shm_peer_217 was written only from NVIDIA/nccl threads: holding NVIDIA/nccl out removes it, holding
    another repository out does not."""
    log = bench.CORPUS / "nccl-1838.log"
    kept = bench.predict(log, "pytorch/pytorch", model=bench.fold_model("pytorch/pytorch"))
    gone = bench.predict(log, "NVIDIA/nccl", model=bench.fold_model("NVIDIA/nccl"))
    assert kept["causes"] and kept["causes"][0]["id"] == "M2"
    evidence = lambda r: {e["signature"] for c in r["causes"] for e in c["evidence"]}  # noqa: E731
    assert "nccl.shm_peer_217" in evidence(kept) and "nccl.shm_peer_217" not in evidence(gone)
    # What the learned ranker may still say there comes from a model retrained without NVIDIA/nccl's logs.
    assert all(a["origin"] != "model" or "learned ranker" in a["reason"] for c in gone["causes"] for a in c["adjustments"])


@pytest.mark.timeout(1800)
def test_the_held_out_slice_is_scored_apart_from_the_headline(bench, loro, held):
    """Folding the held-out logs into the headline would let the next edit tune on them without anyone noticing."""
    held_files = [e["file"] for e in bench.load_manifest() if bench.held_out_slice(e)]
    assert len(held_files) >= 10
    assert not set(held_files) & {r["file"] for r in loro["rows"]}
    slice_ = held
    assert {r["file"] for r in slice_["rows"]} == set(held_files)
    # Each collection is reported apart (frozen at different commits): together they cover the slice exactly.
    names = {e["collection"] for e in bench.load_manifest() if bench.held_out_slice(e)}
    assert set(slice_["collections"]) == names and len(names) >= 2
    assert sum(c["logs"] for c in slice_["collections"].values()) == len(held_files)
    for c in slice_["collections"].values():
        assert c["top1_n"] <= c["top3_n"] <= c["scored"] <= c["logs"]


def test_a_collection_that_holds_no_held_out_log_is_one_line_and_exit_2():
    """`--collection` with a name no held-out log carries (a typo, or the main corpus) must not print nothing and
    pass as a score of zero logs."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(BENCH), "--collection", "held-out-no-such-slice"], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("bench_explain: --collection held-out-no-such-slice: no held-out log of ")

