"""`envbuild explain` as a user sees it: ranked causes with the lines behind them, exit codes, JSON that
validates against the documented schema, inputs of every kind, and what the doctor and profile add."""
import gzip
import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from explain_helpers import CORPUS, FIXTURES, ranker_only

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "envbuild" / "explain" / "schema.json").read_text())

RAY_SEED = """\
(MegatronTrainRayActor pid=38135) [2026-01-02 14:56:17] timer.py:24 - Timer wake_up start
(MegatronTrainRayActor pid=38135) [2026-01-02 14:56:20] reloadable_process_group.py:155 - Reloading 20 process groups
(MegatronTrainRayActor pid=38135) node1:38135:38135 [0] NCCL INFO NCCL version 2.27.3+cuda12.9
(MegatronTrainRayActor pid=38135) [2026-01-02 14:56:21] torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3
(MegatronTrainRayActor pid=38135) Cuda failure 999 'unknown error' [repeated 7x across cluster]
"""


def _json(proc):
    data = json.loads(proc.stdout)
    jsonschema.validate(data, SCHEMA)
    return data


def test_seed_log_ranks_comm_rebuild_and_nccl_causes(explain, tmp_path):
    log = tmp_path / "seed.log"
    log.write_text(RAY_SEED)
    proc = explain(str(log))
    out = proc.stdout.decode()
    assert proc.returncode == 1, proc.stderr
    assert "verdict: most likely M4" in out
    assert f"{log}:2" in out  # the Reloading line behind M4
    assert "NCCL 2.27.3" in out and "NCCL built for CUDA 12.9" in out
    assert "MegatronTrainRayActor pid=38135" in out and "in Reloading 20 process groups" in out  # timeline: who and phase
    data = _json(explain(str(log), "--json", "-"))
    ids = [c["id"] for c in data["causes"]]
    assert ids[:2] == ["M4", "C2"] and data["top"] == "M4"
    cuda999 = next(e for e in data["causes"][0]["evidence"] if e["signature"] == "nccl.cuda_failure_999")
    assert cuda999["count"] == 7  # Ray's [repeated 7x across cluster]
    assert any(s.startswith("rerun with NCCL_DEBUG=INFO") for s in data["next_steps"])


def test_profile_compares_the_log_nccl_with_the_image(explain, tmp_path):
    log = tmp_path / "seed.log"
    log.write_text(RAY_SEED)
    data = _json(explain(str(log), "--profile", "slime-v0.2.2-cu129", "--json", "-"))
    assert data["top"] == "C2"  # 2.27.3 in the log, 2.28.3 in the image
    row = next(r for r in data["profile"] if r["component"] == "nccl")
    assert row == {"component": "nccl", "image": "2.28.3", "log": ["2.27.3"], "verdict": "differs"}
    same = _json(explain(str(log), "--profile", "slime-v0.2.2-cu129", "--json", "-"))
    assert same == data


def test_profile_names_the_logs_libcuda_as_a_cuda_version_in_its_row_and_its_reason(explain, tmp_path):
    """NCCL prints cudaDriverVersion as CUDA's integer (12020); the row and the C1 reason both say 12.2."""
    log = tmp_path / "drv.log"
    log.write_text("node1:1:1 [0] NCCL INFO cudaDriverVersion 12020\n"
                   "RuntimeError: NCCL error: unhandled cuda error, NCCL version 2.27.5\n")
    data = _json(explain(str(log), "--profile", "slime-v0.3.1-cu130", "--json", "-"))
    row = next(r for r in data["profile"] if r["component"].startswith("libcuda"))
    assert row["log"] == ["12.2"] and row["verdict"] == "older than the image's CUDA"
    c1 = next(c for c in data["causes"] if c["id"] == "C1")
    reasons = [a["reason"] for a in c1["adjustments"] if a["reason"].startswith("the libcuda NCCL loaded")]
    assert reasons == ["the libcuda NCCL loaded is CUDA 12.2, below the image's CUDA 13.0: the image would run a "
                       "forward-compat libcuda"]


def test_healthy_log_exits_0_and_says_nothing_recognised(explain, tmp_path):
    log = tmp_path / "ok.log"
    log.write_text("step 1 loss 0.5\nnode1:1:1 [0] NCCL INFO NCCL version 2.28.3+cuda12.9\nstep 2 loss 0.4\n")
    proc = explain(str(log))
    assert proc.returncode == 0
    assert "no failure recognised" in proc.stdout.decode()
    data = _json(explain(str(log), "--json", "-"))
    assert data["verdict"] == "ok" and data["causes"] == [] and data["facts"]["nccl_version"][0]["value"] == "2.28.3"


def test_failure_nothing_explains_is_an_honest_unknown(explain, tmp_path):
    log = tmp_path / "odd.log"
    log.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nRuntimeError: flux capacitor\n")
    proc = explain(str(log))
    assert proc.returncode == 1
    data = _json(explain(str(log), "--json", "-"))
    # No signature names it: either an honest unknown, or the learned ranker's guess, never more than "low" and
    # saying it is the ranker's.
    if data["verdict"] == "unknown":
        assert "cause unknown" in proc.stdout.decode()
    else:
        top = data["causes"][0]
        assert ranker_only(top) and top["label"] == "low", top
        assert "learned ranker" in proc.stdout.decode()


def test_stdin_and_gzip_read_like_files(explain, tmp_path):
    data = (CORPUS / "nccl-1653.log").read_bytes()
    gz = tmp_path / "run.log.gz"
    gz.write_bytes(gzip.compress(data))
    for proc in (explain("-", stdin=data), explain(str(gz)), explain("-", stdin=gzip.compress(data))):
        assert proc.returncode == 1
        assert "verdict: most likely M1" in proc.stdout.decode()
        assert "NCCL_CUMEM_ENABLE=0" in proc.stdout.decode()


def test_ray_session_folder_gives_a_first_failure_timeline(explain, tmp_path):
    logs = tmp_path / "session_latest" / "logs"
    logs.mkdir(parents=True)
    (logs / "worker-b.err").write_text(
        "[2026-01-02 14:56:30] node2:2:2 [1] NCCL INFO transport/net_ib.cc:1 -> 3\n"
        "[2026-01-02 14:56:31] ncclRemoteError: remote process exited or there was a network error\n")
    (logs / "worker-a.err").write_text(
        "[2026-01-02 14:56:21] (TrainActor pid=7) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    (logs / "raylet.out").write_text("[2026-01-02 14:50:00] raylet started\n")
    data = _json(explain(str(tmp_path / "session_latest"), "--json", "-"))
    assert data["top"] == "U3"
    first = data["timeline"][0]
    assert first["first"] and first["source"].endswith("worker-a.err") and first["time"].startswith("2026-01-02 14:56:21")
    assert data["timeline"][1]["source"].endswith("worker-b.err")
    assert len(data["inputs"]["sources"]) == 3


def test_doctor_report_raises_what_failed_and_lowers_what_passed(explain, tmp_path):
    log = tmp_path / "seed.log"
    log.write_text(RAY_SEED)
    base = {c["id"]: c["score"] for c in _json(explain(str(log), "--json", "-"))["causes"]}
    report = json.loads((FIXTURES / "doctor-nccl-copies.json").read_text())
    rpath = tmp_path / "doctor.json"
    rpath.write_text(json.dumps(report))
    data = _json(explain(str(log), "--report", str(rpath), "--json", "-"))
    scores = {c["id"]: c for c in data["causes"]}
    assert data["top"] == "C3"
    assert any("stack.nccl_copies fail" in a["reason"] for a in scores["C3"]["adjustments"])
    assert "N1" not in scores or scores["N1"]["score"] < base["N1"]  # node.nvlink / fabric passes lower NVLS


def test_bundle_root_uses_its_report_and_kernel_log(explain):
    bundle = Path(__file__).resolve().parents[1] / "fixtures" / "bundles" / "h200x2"
    proc = explain(str(CORPUS / "nccl-1653.log"), "--root", str(bundle), "--json", "-")
    data = _json(proc)
    assert data["inputs"]["doctor_report"] is True
    c6 = [c for c in data["causes"] if c["id"] == "C6"]
    assert c6 and any(a["origin"] == "bundle" for a in c6[0]["adjustments"])  # the bundle's stack.cuda_wheel_mix fail


def test_json_file_and_text_together(explain, tmp_path):
    log = tmp_path / "seed.log"
    log.write_text(RAY_SEED)
    out = tmp_path / "out" / "explain.json"
    out.parent.mkdir()
    proc = explain(str(log), "--json", str(out))
    assert proc.returncode == 1 and b"verdict: most likely M4" in proc.stdout
    data = json.loads(out.read_text())
    jsonschema.validate(data, SCHEMA)
    assert data["top"] == "M4"


def test_two_nccl_versions_in_one_run_raise_two_copies(explain, tmp_path):
    log = tmp_path / "mixed.log"
    log.write_text("(TrainActor pid=1) h:1:1 [0] NCCL INFO NCCL version 2.27.3+cuda12.9\n"
                   "(RolloutActor pid=2) h:2:2 [1] NCCL INFO NCCL version 2.28.3+cuda12.9\n"
                   "(TrainActor pid=1) Cuda failure 999 'unknown error'\n")
    data = _json(explain(str(log), "--json", "-"))
    c3 = next(c for c in data["causes"] if c["id"] == "C3")
    assert any(a["origin"] == "log" and "2.27.3, 2.28.3" in a["reason"] for a in c3["adjustments"])


def test_without_re2_the_stdlib_engine_gives_the_same_answer(explain, tmp_path):
    """google-re2 is optional: with it hidden, Python's re finds the same causes and lines."""
    import os
    import sys

    log = CORPUS / "slime-1305-2.log"
    with_re2 = _json(explain(str(log), "--json", "-"))
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "re2.py").write_text("raise ImportError('hidden for the test')\n")
    env = dict(os.environ, PYTHONPATH=str(shim) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    without = _json(explain(str(log), "--json", "-", env=env))
    assert with_re2["inputs"]["engine"] == "re2" and without["inputs"]["engine"] == "re"
    for d in (with_re2, without):
        d["inputs"].pop("engine")
    assert without == with_re2
