"""`envbuild explain RUN_DIR` on run dirs the real recorder wrote: the slime-shaped job on a real local Ray cluster
(conftest.py, slimejob.py), one job per injected fault. Each fault must be the cause explain names first, with
the evidence of the process the fault hit (its pid in the reason), in the JSON and in the text a person reads; the
healthy job must name nothing."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[2]

CASES = [  # fault, the cause named first, the process(es) it hit
    ("preload", "C3", ["trainer0"]),
    ("cumem", "C5", ["trainer1"]),
    ("sigstop", "U6", ["trainer1"]),
    ("sigkill", "U6", ["rollout"]),
    ("nodeloss", "U7", ["straggler", "straggler2"]),
]


def explain(run_dir, env, *extra):
    return subprocess.run([sys.executable, "-m", "envbuild", "explain", run_dir, *extra], capture_output=True,
                          text=True, env=env, timeout=120, cwd=REPO)


def record_reasons(cause):
    return [a["reason"] for a in cause["adjustments"] if a["origin"] == "record"]


@pytest.mark.parametrize("fault,cause,hit", CASES, ids=[c[0] for c in CASES])
def test_each_injected_fault_is_named_first_with_the_process_it_hit(fault_runs, record_env, fault, cause, hit):
    run = fault_runs[fault]
    proc = explain(run["run_dir"], record_env, "--json", "-")
    assert proc.returncode == 1, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["top"] == cause, [(c["id"], record_reasons(c)) for c in result["causes"]]
    reasons = record_reasons(result["causes"][0])
    for who in hit:
        assert any(f"pid {run['pids'][who]}" in r for r in reasons), (who, run["pids"], reasons)
    text = explain(run["run_dir"], record_env)
    assert text.returncode == 1 and "Traceback" not in text.stderr
    assert cause in text.stdout and f"pid {run['pids'][hit[0]]}" in text.stdout


def test_the_stopped_rank_is_told_by_its_waiting_peers_hang_record_and_drawn_first(fault_runs, record_env, tmp_path):
    run = fault_runs["sigstop"]
    result = json.loads(explain(run["run_dir"], record_env, "--json", "-").stdout)
    first = result["run"]["first_failures"][0]
    assert first["pid"] == str(run["pids"]["trainer1"]) and first.get("silent")
    reason = record_reasons(result["causes"][0])[0]
    assert f"pid {run['pids']['trainer0']} waited in all_reduce" in reason and "faulthandler.log" in reason
    page = tmp_path / "run.html"
    proc = subprocess.run([sys.executable, "-m", "envbuild", "report", "html", run["run_dir"], "-o", str(page)],
                          capture_output=True, text=True, env=record_env, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    rows = re.findall(r'<g id="proc-row-\d+" class="row state-(\w+)( first)?"><title>([^<]*)</title>', page.read_text())
    firsts = [title for _, first, title in rows if first]
    assert len(firsts) == 1 and f"pid {run['pids']['trainer1']} " in firsts[0] and "silent" in firsts[0]
    assert any(f"pid {run['pids']['trainer0']} " in title and state == "failed" for state, _, title in rows)


def test_the_healthy_job_names_no_recorded_cause(fault_runs, record_env):
    run = fault_runs["none"]
    proc = explain(run["run_dir"], record_env, "--json", "-")
    assert proc.returncode == 0, proc.stdout[-3000:]
    result = json.loads(proc.stdout)
    assert result["run"]["first_failures"] == [] and result["causes"] == []
    assert len(result["run"]["processes"]) >= 5  # 2 trainers, the rollout, its spawn and fork children
