"""`envbuild explain RUN_DIR` on run dirs written per docs/record.md by a small explicit builder."""
import json
import subprocess
import sys
from pathlib import Path


def _proc(root: Path, host: str, pid: int, role: str, nccl: str, env: dict, events: list, tail: str = "") -> None:
    pd = root / host / "proc" / f"{pid}-100"
    pd.mkdir(parents=True)
    (pd / "start.json").write_text(json.dumps({"schema": "envbuild.record.process/1", "pid": pid, "role": role,
                                               "host": host, "t_start": 1000.0, "env": env}))
    (pd / "libs.jsonl").write_text(json.dumps({"t": 1001, "when": "cuda", "libs": {
        "libnccl": {"path": f"/opt/{nccl}/libnccl.so.2", "version": nccl}}}) + "\n")
    (pd / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events) + tail)


def _explain(root: Path) -> tuple:
    p = subprocess.run([sys.executable, "-m", "envbuild", "explain", str(root), "--json", "-"], capture_output=True, timeout=120)
    return p.returncode, json.loads(p.stdout), p.stderr


def _events(rank: int, t_fail: float) -> list:
    return [{"t": 1002, "kind": "process_group", "group": "weight_sync", "rank": rank},
            {"t": t_fail, "kind": "exception", "type": "RuntimeError", "message": "NCCL error", "first": True}]


def test_wrong_libnccl_in_one_process_is_named_first_with_that_process(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"schema": "envbuild.record.run/1", "envbuild_version": "0.7"}))
    _proc(tmp_path, "h1", 11, "MegatronTrainRayActor", "2.28.9", {"NCCL_CUMEM_ENABLE": "0"}, _events(0, 1050))
    _proc(tmp_path, "h1", 12, "MegatronTrainRayActor", "2.28.9", {"NCCL_CUMEM_ENABLE": "0"}, _events(1, 1051))
    _proc(tmp_path, "h1", 13, "sglang scheduler", "2.28.3", {"NCCL_CUMEM_ENABLE": "0"}, _events(2, 1052), tail='{"t": 10')
    rc, r, err = _explain(tmp_path)
    assert rc == 1 and b"Traceback" not in err
    assert r["top"] == "C3" and "pid 13" in r["causes"][0]["adjustments"][0]["reason"]
    assert any("cut short" in m["message"] for m in r["missing"])


def test_cumem_flipped_in_one_process_is_c5(tmp_path):
    _proc(tmp_path, "h1", 11, "trainer", "2.28.9", {"NCCL_CUMEM_ENABLE": "0"}, _events(0, 1050))
    _proc(tmp_path, "h1", 12, "trainer", "2.28.9", {"NCCL_CUMEM_ENABLE": "1"}, _events(1, 1051))
    _proc(tmp_path, "h1", 13, "rollout", "2.28.9", {"NCCL_CUMEM_ENABLE": "0"}, _events(2, 1052))
    rc, r, _ = _explain(tmp_path)
    assert r["top"] == "C5" and "pid 12" in r["causes"][0]["adjustments"][0]["reason"]
    assert any(m["file"] == "run.json" for m in r["missing"])


def test_a_process_that_goes_silent_first_is_u6(tmp_path):
    _proc(tmp_path, "h1", 11, "trainer", "2.28.9", {}, [{"t": 1002, "kind": "process_group", "group": "default_pg", "rank": 0},
                                                       {"t": 1010, "kind": "collective", "name": "all_reduce", "seq": 7}])
    _proc(tmp_path, "h1", 12, "trainer", "2.28.9", {}, _events(1, 1700))
    rc, r, _ = _explain(tmp_path)
    assert r["top"] == "U6" and "pid 11" in r["causes"][0]["adjustments"][0]["reason"]
    assert r["run"]["first_failures"][0]["pid"] == "11"
    assert r["run"]["failed"] is True  # a process went silent: the run failed, U6 is its cause, not a risk


def test_a_proc_dir_with_nothing_and_a_huge_events_file_still_answers(tmp_path):
    _proc(tmp_path, "h1", 11, "trainer", "2.28.9", {}, _events(0, 1050))
    big = tmp_path / "h1" / "proc" / "11-100" / "events.jsonl"
    with open(big, "r+b") as f:
        f.truncate(1 << 30)
        f.seek(0, 2)
        f.write(b"\n" + json.dumps({"t": 1060, "kind": "exception", "type": "RuntimeError", "message": "x"}).encode() + b"\n")
    (tmp_path / "h1" / "proc" / "12-100").mkdir()
    rc, r, err = _explain(tmp_path)
    assert rc in (0, 1) and b"Traceback" not in err
    assert any("start.json" in m["message"] for m in r["missing"]) and any("read the first" in m["message"] for m in r["missing"])


def test_expandable_segments_in_one_process_is_m3_and_a_fatal_signal_is_its_first_failure(tmp_path):
    _proc(tmp_path, "h1", 11, "Trainer", "2.28.9", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
          [{"t": 1002, "kind": "process_group", "op": "init", "rank": 0}])
    _proc(tmp_path, "h1", 12, "Rollout", "2.28.9", {}, [{"t": 1002, "kind": "process_group", "op": "init", "rank": 1}])
    _proc(tmp_path, "h1", 13, "Rollout", "2.28.9", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}, [])
    pd = tmp_path / "h1" / "proc" / "12-100"
    (pd / "faulthandler.log").write_text("Fatal Python error: Aborted\n\nThread 0x1 (most recent call first):\n")
    (pd / "alive.json").write_text(json.dumps({"t": 1003.5, "pid": 12}))
    rc, r, err = _explain(tmp_path)
    assert rc == 1 and b"Traceback" not in err
    m3 = next(c for c in r["causes"] if c["id"] == "M3")
    assert "pid 11" in m3["adjustments"][0]["reason"] and "pid 13" not in m3["adjustments"][0]["reason"]
    first = r["run"]["first_failures"][0]
    assert first["pid"] == "12" and first["what"] == "fatal signal: Aborted" and first["t"] == 1003.5


def test_a_flight_recorder_dump_is_read_by_the_process_that_wrote_it(tmp_path):
    """Dumps are named fr/<pid>-<starttime>.nccl_trace_rank_<r> by the recorder: the verdict lands on the writer."""
    import pickle

    pg = {"process_group": ("0", "default_pg"), "profiling_name": "nccl:all_reduce", "is_p2p": False}
    _proc(tmp_path, "h1", 11, "Trainer", "2.28.9", {}, [{"t": 1002, "kind": "process_group", "op": "init", "rank": 0},
                                                        {"t": 1090, "kind": "exception", "type": "RuntimeError",
                                                         "message": "Watchdog caught collective operation timeout"}])
    _proc(tmp_path, "h1", 12, "Trainer", "2.28.9", {}, [{"t": 1002, "kind": "process_group", "op": "init", "rank": 1},
                                                        {"t": 1010, "kind": "hang", "stuck_s": 5}])
    fr = tmp_path / "h1" / "fr"
    fr.mkdir()
    config = {"0": {"name": "default_pg", "ranks": "[0, 1]"}}
    (fr / "11-100.nccl_trace_rank_0").write_bytes(pickle.dumps({"version": "2.4", "pg_config": config, "entries": [
        dict(pg, collective_seq_id=5, state="completed"), dict(pg, collective_seq_id=6, state="started")]}))
    (fr / "12-100.nccl_trace_rank_1").write_bytes(pickle.dumps({"version": "2.4", "pg_config": config, "entries": [
        dict(pg, collective_seq_id=5, state="completed")]}))
    rc, r, err = _explain(tmp_path)
    assert rc == 1 and b"Traceback" not in err
    [v] = r["run"]["flight_recorder"]
    assert v["kind"] == "never_entered" and v["ranks"] == [1] and v["seq"] == 6
    assert r["top"] == "U6"
    reason = r["causes"][0]["adjustments"][0]["reason"]
    assert reason.startswith("Trainer h1/pid 12") and "rank 1 never entered collective 6" in reason
