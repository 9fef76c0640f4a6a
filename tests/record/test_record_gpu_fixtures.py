"""`envbuild explain RUN_DIR` on run dirs the recorder wrote on a real GPU (docs/gpu-runs/s11: the slime-shaped
job of docs/gpu-runs/s8_record_job.py on a lent 1xH100, torch 2.11.0+cu130), kept as they came back.

h100-expandable-s11: the Trainer actor (pid 5020) ran with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True and
handed its weights to the Rollout actor (pid 5021, no setting) through CUDA IPC; the two are a 1:1 tie, which the
first GPU run read the wrong way round (the Rollout as the odd one, so no finding)."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def explain_json(run_dir: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "envbuild", "explain", str(run_dir), "--json", "-"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert "Traceback" not in proc.stderr, proc.stderr
    return {"exit": proc.returncode, **json.loads(proc.stdout)}


def test_the_process_with_expandable_segments_is_named_not_its_ipc_peer():
    result = explain_json(FIXTURES / "h100-expandable-s11")
    assert result["exit"] == 1 and result["top"] == "M3", result["causes"]
    reasons = [a["reason"] for a in result["causes"][0]["adjustments"] if a["origin"] == "record"]
    assert len(reasons) == 1 and "Trainer vm/pid 5020 runs with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" \
        in reasons[0] and "Rollout vm/pid 5021" in reasons[0], reasons
    assert {str(p["pid"]) for p in result["run"]["processes"]} == {"5020", "5021"}
    # the job went through (3 steps, exit 0: root with CAP_SYS_PTRACE may pidfd_getfd): a risk, not its failure
    assert result["run"]["failed"] is False and result["run"]["first_failures"] == []
    text = subprocess.run([sys.executable, "-m", "envbuild", "explain", str(FIXTURES / "h100-expandable-s11")],
                          capture_output=True, text=True, timeout=120, cwd=REPO).stdout
    assert "no process of this run failed: the recorded facts are M3's mechanism" in text, text
