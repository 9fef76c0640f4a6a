"""checks/_harness.py: nccl-tests' bandwidth definitions, phase and result files, exact fills.

The harness is a payload module (it runs in the environment under test), so it is imported from the
payload directory. Its rank/phase/emit parts must work without torch; the fill helpers need torch and
run under tests/torch_env.py's python.
"""
import importlib
import json
import sys

import pytest

from envbuild.paths import payload_dir


@pytest.fixture
def harness(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(payload_dir()))
    monkeypatch.setenv("ENVBUILD_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    mod = importlib.import_module("_harness")
    return importlib.reload(mod)


def test_harness_imports_without_torch(harness):
    src = (payload_dir() / "_harness.py").read_text()
    top_level_imports = [ln for ln in src.splitlines() if ln.startswith(("import ", "from "))]
    assert not [ln for ln in top_level_imports if "torch" in ln]


@pytest.mark.parametrize("op,n,factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_gather", 8, 0.875), ("reduce_scatter", 4, 0.75),
    ("all_to_all", 2, 0.5), ("broadcast", 8, 1.0),
])
def test_busbw_factors_are_nccl_tests(harness, op, n, factor):
    # nccl-tests doc/PERFORMANCE.md: all_reduce 2(n-1)/n; reduce_scatter, all_gather, alltoall (n-1)/n; bcast 1
    algbw, busbw = harness.algbw_busbw(op, 10**9, 1.0, n)
    assert algbw == pytest.approx(1.0) and busbw == pytest.approx(factor)


def test_op_bytes_counts_the_total_array_for_all_gather(harness):
    assert harness.op_bytes("all_gather", 1 << 20, 4) == 4 << 20
    assert harness.op_bytes("reduce_scatter", 1 << 20, 4) == 1 << 20
    assert harness.op_bytes("all_reduce", 1 << 20, 4) == 1 << 20


def test_phase_file_tracks_nesting_and_emit_is_atomic(harness, tmp_path):
    p = harness.Probe()
    assert (p.rank, p.world_size) == (1, 4)
    with p.phase("outer"):
        with p.phase("inner"):
            assert json.loads((tmp_path / "rank1.phase").read_text())["phase"] == "inner"
        assert json.loads((tmp_path / "rank1.phase").read_text())["phase"] == "outer"
    p.metric("x", 1.5, "GB/s", expect=">= 1")
    p.evidence["k"] = "v"
    p.finish("warn", "slow")
    data = json.loads((tmp_path / "rank1.json").read_text())
    assert data["status"] == "warn" and data["summary"] == "slow" and data["rank"] == 1
    assert data["metrics"] == [{"name": "x", "value": 1.5, "unit": "GB/s", "expect": ">= 1"}]
    assert data["evidence"] == {"k": "v"}
    assert [f.name for f in tmp_path.iterdir() if ".tmp" in f.name] == []


def test_exception_phase_is_recorded(harness, tmp_path):
    p = harness.Probe()
    with pytest.raises(ValueError):
        with p.phase("a"):
            with p.phase("b"):
                raise ValueError("boom")
    assert p._error_phase == "b"


EXACT_FILLS_PROGRAM = r"""
import sys
sys.path.insert(0, sys.argv[1])
import torch
import _harness as harness
for dtype, n in ((torch.bfloat16, 2), (torch.bfloat16, 8), (torch.float32, 8)):
    parts = [harness.exact_fill(4099, r, n, dtype, "cpu", salt=5) for r in range(n)]
    total = parts[0].clone()
    for t in parts[1:]:
        total += t  # summed in dtype, in rank order, as a ring would
    want = harness.exact_sum(4099, n, dtype, "cpu", salt=5)
    assert harness.mismatches(total, want) == 0, dtype
    assert int(total.max().item()) <= harness.EXACT_LIMIT[str(dtype).split(".")[1]], dtype
    # distinct per rank: a rank that sent another's data would be caught
    assert harness.mismatches(parts[0], parts[1]) > 0, dtype
# one rank's bf16 fill (weight_sync's buckets): (i*7 + salt) mod 257, every value exact in bf16
one = harness.exact_fill(1000, 0, 1, torch.bfloat16, "cpu", salt=100)
assert one.float().tolist() == [float((i * 7 + 100) % 257) for i in range(1000)]
# raw-memory words (p2p, cumem_ipc, offload_cycle): distinct, and any process regenerates them equal
w = harness.word_pattern(4096, 0x5A5A, "cpu")
assert w.dtype == torch.int32 and len(set(w.tolist())) == 4096
assert harness.mismatches(w, harness.word_pattern(4096, 0x5A5A, "cpu")) == 0
assert harness.mismatches(w, harness.word_pattern(4096, 0x5A5B, "cpu")) == 4096
print("EXACT OK")
"""


def test_exact_fills_sum_exactly_in_bf16_and_fp32(torch_env, tmp_path):
    """Runs under tests/torch_env.py's python (the CPU torch wheel), as the payload would."""
    import os
    import subprocess

    python, torch_vars = torch_env
    env = dict(os.environ, ENVBUILD_RUN_DIR=str(tmp_path), RANK="0", WORLD_SIZE="1", **torch_vars)
    proc = subprocess.run([python, "-c", EXACT_FILLS_PROGRAM, str(payload_dir())], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0 and "EXACT OK" in proc.stdout, proc.stdout + proc.stderr[-3000:]


@pytest.mark.parametrize("payload", ["gpu_p2p.py", "gpu_cumem_ipc.py", "comm_weight_sync.py", "comm_offload_cycle.py"])
def test_a_mode_typo_is_a_one_line_usage_error(payload, tmp_path):
    """argparse's message and exit 2 (what the launcher shows as the rank's crash), before torch is
    imported and without a traceback; a bad --mode used to end in KeyError: 'quik'."""
    import os
    import subprocess

    proc = subprocess.run([sys.executable, str(payload_dir() / payload), "--mode", "quik"], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, ENVBUILD_RUN_DIR=str(tmp_path)))
    assert proc.returncode == 2, proc.stderr
    assert "argument --mode: invalid choice: 'quik' (choose from 'quick', 'full')" in proc.stderr
    assert "Traceback" not in proc.stderr
