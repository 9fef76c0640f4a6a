"""`envbuild explain RUN_DIR` on run dirs the recorder wrote on a real GPU (the slime-shaped job of
docs/gpu-runs/s8_record_job.py, torch 2.11.0+cu130), kept as they came back, and PyTorch flight-recorder dumps
written on the GPU, replayed here.

h100-expandable-s11 (docs/gpu-runs/s11, lent 1xH100): the Trainer actor (pid 5020) ran with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True and handed its weights to the Rollout actor (pid 5021, no setting)
through CUDA IPC; the two are a 1:1 tie, which the first GPU run read the wrong way round (the Rollout as the odd one,
so no finding).

h200-{preload,sigstop,ncclhang}-s12 (docs/gpu-runs/s12/record, lent 1xH200): the Rollout with the system libnccl
2.28.3 in LD_PRELOAD; the Rollout SIGSTOPped inside the gloo all_reduce of step 1 (the Trainer then times out after
15 s, its flight recorder dumps: the gloo dump in its fr/); the Trainer's NCCL all_reduce queued behind a 60 s GPU
kernel (NCCL's watchdog aborts it).

fr-h200-s12 (docs/gpu-runs/s12_fr_capture.py, the same H200): one rank's NCCL flight recorder with three completed
all_reduces and a fourth queued behind a 20 s GPU sleep, dumped by hand while it waited (pending) and by NCCL's
watchdog on its 4 s timeout (timeout); manual-completed is the s8 job's Trainer dumping by hand after its healthy
steps (three groups, each all_reduce completed)."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

from envbuild.explain import flightrec

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


def test_the_rollout_that_preloaded_the_system_libnccl_is_named_with_both_copies():
    result = explain_json(FIXTURES / "h200-preload-s12")
    assert result["exit"] == 1 and result["top"] == "C3", result["causes"]
    reasons = " ".join(a["reason"] for a in result["causes"][0]["adjustments"] if a["origin"] == "record")
    assert "Rollout vm/pid 4642 mapped 2 copies of libnccl: 2.28.9" in reasons and "2.28.3" in reasons, reasons
    assert result["run"]["failed"] is False  # the job ran its steps: the preload is a risk, not this run's failure


def test_the_stopped_rollout_is_the_first_failure_before_the_trainer_that_waited_on_it():
    result = explain_json(FIXTURES / "h200-sigstop-s12")
    assert result["exit"] == 1 and result["top"] == "U6", result["causes"]
    first, second = result["run"]["first_failures"][:2]
    assert (first["pid"], first["role"]) == ("5136", "Rollout") and "went silent" in first["what"], first
    assert (second["pid"], second["role"]) == ("5135", "Trainer") and "Timed out waiting" in second["what"], second
    # the Trainer's dump is gloo's, whose entries stay "scheduled" (no completion tracked): read, but no verdict
    assert result["run"]["flight_recorder"] == []


def test_the_trainer_aborted_by_nccl_watchdog_died_first():
    result = explain_json(FIXTURES / "h200-ncclhang-s12")
    assert result["exit"] == 1 and result["top"] == "U6", result["causes"]
    [first] = result["run"]["first_failures"][:1]
    assert (first["pid"], first["role"], first["what"]) == ("5374", "Trainer", "fatal signal: Aborted"), first


def test_gpu_flight_recorder_dumps_name_the_collective_that_never_completed():
    for name in ("pending", "timeout"):
        dump = flightrec.load(FIXTURES / "fr-h200-s12" / f"{name}.nccl_trace_rank_0")
        assert dump["comm_lib_version"] == "2.28.9"
        assert [e["state"] for e in dump["entries"]] == ["completed"] * 3 + ["scheduled"], name
        [verdict] = flightrec.analyse({0: dump})
        assert (verdict.kind, verdict.seq, verdict.op, verdict.ranks) == ("not_completed", 4, "nccl:all_reduce", [0])
        assert "never started it on the GPU" in verdict.says
    healthy = flightrec.load(FIXTURES / "fr-h200-s12" / "manual-completed.nccl_trace_rank_0")
    assert len(healthy["entries"]) == 3 and flightrec.analyse({0: healthy}) == []


def test_a_watchdog_dump_in_the_run_dir_lands_on_the_process_that_wrote_it(tmp_path):
    """The ncclhang job's Trainer died before its dump (none came back from that run); the dump NCCL's watchdog wrote
    in the same situation on the same GPU (fr-h200-s12/timeout) put where the recorder puts the Trainer's: explain
    reads it as that process's, and its verdict comes with the run."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "h200-ncclhang-s12", run)
    (run / "vm" / "fr").mkdir(exist_ok=True)
    shutil.copy(FIXTURES / "fr-h200-s12" / "timeout.nccl_trace_rank_0", run / "vm" / "fr" / "5374-55557.nccl_trace_rank_0")
    result = explain_json(run)
    [verdict] = result["run"]["flight_recorder"]
    assert verdict["kind"] == "not_completed" and verdict["seq"] == 4 and verdict["ranks"] == [0], verdict
    assert result["top"] == "U6"
    assert any("5374" in a["reason"] and "collective 4" in a["reason"]
               for c in result["causes"] for a in c["adjustments"]), result["causes"][0]
