"""The recorder's bounds on disk (docs/record.md, "Bounds"): a process's NCCL WARN file stops taking disk past its
cap while NCCL keeps writing to it, flight-recorder dumps are named per process and switched off once the host's
fr/ folder is full, and a child names its own dump file instead of inheriting its parent's. Plain processes."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BOOT = REPO / "envbuild" / "record" / "bootstrap"

SHOW_ENV = ("import json, os; print(json.dumps({k: os.environ.get(k) for k in ('TORCH_FR_DUMP_TEMP_FILE', "
            "'TORCH_NCCL_DUMP_ON_TIMEOUT', 'ENVBUILD_RECORD_SET')}))")


def run_recorded(code, run_dir, **extra):
    env = {**os.environ, "PYTHONPATH": f"{BOOT}{os.pathsep}{REPO}", "ENVBUILD_RECORD_DIR": str(run_dir), **extra}
    for k in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "NCCL_DEBUG",
              "ENVBUILD_RECORD_SET"):
        if k not in extra:
            env.pop(k, None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)


def test_an_nccl_file_past_its_cap_keeps_its_ends_and_gives_the_middle_back(tmp_path):
    from envbuild.record.snapshot import punch_middle

    path = tmp_path / "host.123.log"
    with open(path, "wb") as f:  # as NCCL does: one writer that keeps its offset
        f.write(b"NCCL WARN first line\n" + b"x" * (6 << 20) + b"\nNCCL WARN last line\n")
        size = f.tell()
        before = os.stat(path).st_blocks * 512
        freed = punch_middle(str(path), 4 << 20, 1 << 20)
        f.write(b"NCCL WARN written after the cap\n")
    after = os.stat(path).st_blocks * 512
    data = path.read_bytes()
    if freed == 0:  # a filesystem without hole punching: the file is left as it was
        assert after >= before
        return
    assert after <= before - (3 << 20) and after <= (3 << 20), (before, after)
    assert data.startswith(b"NCCL WARN first line") and b"NCCL WARN last line\n" in data[-(1 << 20):]
    assert data.endswith(b"NCCL WARN written after the cap\n") and len(data) == size + 32
    assert punch_middle(str(path), 4 << 20, 1 << 20) == 0  # under the cap now: nothing more to give back


def test_flight_recorder_dumps_are_named_per_process_and_a_child_names_its_own(tmp_path):
    code = SHOW_ENV + "\nimport subprocess, sys\nsubprocess.run([sys.executable, '-c', " + repr(SHOW_ENV) + "])"
    proc = run_recorded(code, tmp_path / "run")
    assert proc.returncode == 0, proc.stderr
    parent, child = (json.loads(line) for line in proc.stdout.splitlines())
    procs = sorted(p.name for p in (tmp_path / "run").glob("*/proc/*"))
    assert len(procs) == 2
    assert {Path(parent["TORCH_FR_DUMP_TEMP_FILE"]).name, Path(child["TORCH_FR_DUMP_TEMP_FILE"]).name} == \
        {f"{p}.nccl_trace_rank_" for p in procs}
    assert parent["TORCH_NCCL_DUMP_ON_TIMEOUT"] == child["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"


def test_a_user_set_dump_file_is_kept_and_a_full_fr_folder_turns_dumps_off(tmp_path):
    mine = str(tmp_path / "mine_rank_")
    proc = run_recorded(SHOW_ENV, tmp_path / "run", TORCH_FR_DUMP_TEMP_FILE=mine)
    assert json.loads(proc.stdout)["TORCH_FR_DUMP_TEMP_FILE"] == mine
    host = next((tmp_path / "run").iterdir())
    (host / "fr").mkdir(exist_ok=True)  # not made for a process whose dump file the user set
    for i in range(64):
        (host / "fr" / f"1-{i}.nccl_trace_rank_0").write_bytes(b"x")
    proc = run_recorded(SHOW_ENV, tmp_path / "run")
    shown = json.loads(proc.stdout)
    assert shown["TORCH_FR_DUMP_TEMP_FILE"] is None and shown["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "0"
    notes = [json.loads(line) for d in (host / "proc").iterdir() for line in (d / "events.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "recorder_note" and "ENVBUILD_RECORD_FR_FILES_MAX" in e["what"] for e in notes)
