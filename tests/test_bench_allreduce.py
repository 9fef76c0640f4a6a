"""benchmarks/bench_allreduce.py's reading and reporting, on the call recorded on the lent 2xH200
(docs/gpu-runs/h5-bench-allreduce.json): nccl-tests' table parsed again, the goals judged and printed."""
import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RECORDED = json.loads((REPO / "docs" / "gpu-runs" / "h5-bench-allreduce.json").read_text())


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_allreduce", REPO / "benchmarks" / "bench_allreduce.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_nccl_tests_table_is_read_back_from_its_stdout(bench):
    rows = bench.parse_nccl_tests(RECORDED["nccl_tests"]["stdout_tail"])
    assert sorted(rows) == [64 << 20, 256 << 20, 1 << 30]
    assert rows[1 << 30]["oop_busbw"] == 324.1 and rows[1 << 30]["ip_busbw"] == 325.38
    assert rows[64 << 20]["oop_wrong"] == "0"
    assert [bench.parse_size(s) for s in ("64M", "256MiB", "1G", "4096")] == [64 << 20, 256 << 20, 1 << 30, 4096]


def test_report_names_each_goal_and_its_verdict(bench):
    """The recorded call met the busbw goal and missed the time goal (0.53): the lines must say both."""
    ours = dict(RECORDED["ours"], rows={int(k): v for k, v in RECORDED["ours"]["rows"].items()},
                time_split=[{"op": "all_reduce", "requested": 64 << 20, "check_s": 0.0123, "timing_s": 0.0191}])
    theirs = dict(RECORDED["nccl_tests"], rows=bench.parse_nccl_tests(RECORDED["nccl_tests"]["stdout_tail"]))
    result = bench.compare(RECORDED["sizes"], ours, theirs)
    assert [r["ratio"] for r in result["table"]] == [0.997, 0.999, 1.005]
    assert result["time_ratio_measure"] == 0.53
    text = "\n".join(bench.report_lines(result))
    assert "busbw ratio at 64MiB: 0.997 (goal 0.95-1.05: met)" in text
    assert "busbw ratio at 1GiB: 1.005 (goal 0.95-1.05: met)" in text
    assert "measurement time ratio: 0.53 = ours 0.194 s / nccl-tests 0.366 s" in text
    assert "(goal <= 0.333: NOT met)" in text
    assert "0.0123" in text and "0.0191" in text  # our per-size split of the measured time
    json.dumps(result)  # what --json writes
