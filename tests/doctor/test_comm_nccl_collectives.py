"""The collectives and churn payloads on gloo (CPU ranks), and the judging of their outcomes.

The payloads are the same files the GPU runs use; only the backend differs. They run under a python
that can import torch (tests/torch_env.py: the CPU wheel installed once per session); where pip cannot
get torch, these tests skip with the reason.
"""
from pathlib import Path

import pytest

from envbuild.doctor import nccl_log
from envbuild.doctor.checks.comm_nccl_collectives import judge_collectives
from envbuild.doctor.launcher import launch
from envbuild.doctor.linerate import LineRate
from envbuild.report.model import Status

OPS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]
FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "broadcast": lambda n: 1.0}


def collectives(torch_env, nranks, env=None, sizes="4096,262144"):
    python, base = torch_env
    return launch("comm_nccl_collectives.py", nranks, python=python, gpus=None, backend="gloo",
                  args=["--sizes", sizes, "--budget-ms", "5", "--max-iters", "5"], deadline_s=120,
                  env={**base, **(env or {})})


@pytest.mark.parametrize("nranks", [2, 3])
def test_collectives_are_exact_and_bandwidth_follows_nccl_tests(torch_env, nranks):
    out = collectives(torch_env, nranks)
    assert out.ok, [r.stderr_tail for r in out.ranks]
    rows = out.ranks[0].result["evidence"]["rows"]
    assert sorted({r["op"] for r in rows}) == sorted(OPS) and len(rows) == 10
    for r in rows:
        factor = FACTOR.get(r["op"], lambda n: (n - 1) / n)(nranks)
        assert r["busbw"] == pytest.approx(r["algbw"] * factor, rel=0.02, abs=0.011)
        assert r["iters"] >= 3
        expect_algbw = r["size"] / (r["time_us"] * 1e-6) / 1e9
        assert r["algbw"] == pytest.approx(expect_algbw, rel=0.02, abs=0.011)
    # every rank reports the same (slowest-rank) timing
    assert all(o.result["evidence"]["rows"] == rows for o in out.ranks)
    # start-up stays off the clock, and each rank says where its measured time went, size by size
    for o in out.ranks:
        ev = o.result["evidence"]
        assert ev["startup_s"] > 0 and ev["measure_s"] > 0
        split = ev["time_split"]
        assert sorted((t["op"], t["requested"]) for t in split) == sorted((r["op"], r["requested"]) for r in rows)
        assert all(t["check_s"] > 0 and t["timing_s"] > 0 for t in split)
        assert sum(t["check_s"] + t["timing_s"] for t in split) <= ev["measure_s"] + 0.002
    res = judge_collectives(out, nccl_log.NcclLog(), None, cumem="0", gpus=list(range(nranks)))
    assert res.status is Status.PASS and "exact on" in res.summary


@pytest.mark.parametrize("op", ["reduce_scatter", "all_to_all"])
def test_one_wrong_element_fails_the_probe(torch_env, op):
    out = collectives(torch_env, 2, env={"ENVBUILD_TEST_CORRUPT_OP": op}, sizes="4096")
    assert out.ok  # the payload ran to its verdict
    bad = out.ranks[1].result
    assert bad["status"] == "fail" and op in bad["summary"] and "1 of" in bad["summary"]
    res = judge_collectives(out, nccl_log.NcclLog(), None, cumem="0", gpus=[0, 1])
    assert res.status is Status.FAIL and "wrong results" in res.summary


def test_sizes_the_ranks_do_not_divide_keep_their_names_and_expectations(torch_env):
    """On 3 ranks all_gather and reduce_scatter of 64 MiB move a few bytes less (whole shards only); the
    metrics are still named by the requested size and judged in its band, as on 2 ranks."""
    python, base = torch_env
    out = launch("comm_nccl_collectives.py", 3, python=python, gpus=None, backend="gloo", env=base, deadline_s=120,
                 args=["--ops", "all_gather,reduce_scatter", "--sizes", str(64 << 20), "--check-dtypes", "",
                       "--budget-ms", "1", "--min-iters", "1", "--max-iters", "1"])
    assert out.ok, [r.stderr_tail for r in out.ranks]
    rows = out.ranks[0].result["evidence"]["rows"]
    assert all(r["requested"] == 64 << 20 and r["size"] < 64 << 20 for r in rows)
    nvlink = LineRate(gbps=478.1, link="nvlink", detail="test", links=18, per_link_gbps=26.562)
    res = judge_collectives(out, nccl_log.NcclLog(), nvlink, cumem="0", gpus=[0, 1, 2])
    metrics = {m.name: m for m in res.metrics}
    assert sorted(metrics) == ["all_gather.busbw.64MiB", "reduce_scatter.busbw.64MiB"]
    assert all(m.expect and m.expect.startswith(">= 0.28 x 478 GB/s") and m.source for m in metrics.values())
    assert "busbw below the fail band at 2 of the judged sizes" in res.summary  # CPU ranks vs an NVLink rate


RECORDED_SHM_LOG = Path(__file__).resolve().parents[1] / "fixtures" / "nccl" / "h200x2-p2p-disable.rank0.log"


def test_shm_fallback_on_an_nvlink_pair_fails_with_the_env_cause(torch_env):
    """Real gloo ranks (exact, no bandwidth verdict at these sizes) + the NCCL log of the recorded
    NCCL_P2P_DISABLE=1 run on the 2xH200: the transport fallback alone fails the check."""
    out = collectives(torch_env, 2, sizes="4096")
    nvlink = LineRate(gbps=478.1, link="nvlink", detail="test", links=18, per_link_gbps=26.562)
    res = judge_collectives(out, nccl_log.parse_files([RECORDED_SHM_LOG]), nvlink, cumem="0", gpus=[0, 1])
    assert res.status is Status.FAIL
    assert "via SHM" in res.summary and "NCCL_P2P_DISABLE=1" in res.summary
    assert res.causes[:2] == ["C4", "N3"]
    assert res.evidence["nccl"]["nccl_version"] == "2.28.9+cuda13.0"


