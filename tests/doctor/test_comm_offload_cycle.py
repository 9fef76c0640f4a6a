"""comm.offload_cycle: the recorded lent-machine run (docs/gpu-runs/offload-cumem-backend-quick.json) replayed
through the check with the launcher replaced, so the verdict, subject and per-rank metrics come out as
recorded; the declared options reach the payload's command line."""
import json
import sys
from pathlib import Path
from typing import Any, Dict

from envbuild.doctor.context import DoctorContext
from envbuild.doctor.registry import discover
from envbuild.doctor.runner import run_check
from envbuild.facts.source import FactSource
from envbuild.report.model import Status

RUN = Path(__file__).resolve().parents[2] / "docs" / "gpu-runs" / "offload-cumem-backend-quick.json"


class TwoGpus(FactSource):
    is_live = True
    description = "the lent 2xH200, as recorded"

    def nvml(self) -> Dict[str, Any]:
        return {"device_count": 2}


def recorded_outcome(rec: Dict[str, Any]):
    """What each rank wrote in the recorded run: its evidence and its own metrics (names without rank<k>.)."""
    from envbuild.doctor.launcher import LaunchOutcome, RankOutcome

    ranks = []
    for k in (0, 1):
        metrics = [dict(m, name=m["name"].split(".", 1)[1]) for m in rec["metrics"] if m["name"].startswith(f"rank{k}.")]
        result = {"status": rec["status"], "summary": rec["summary"], "evidence": rec["evidence"][f"rank{k}"],
                  "metrics": metrics}
        ranks.append(RankOutcome(rank=k, returncode=0, result=result, phase="teardown", stderr_tail="",
                                 log_path="", stack_dump=""))
    return LaunchOutcome(ranks=ranks, timed_out=False, hung_ranks=[], crashed_ranks=[], wall_s=20.0)


def test_the_recorded_run_replays_to_its_verdict_and_the_options_reach_the_payload(monkeypatch):
    from envbuild.doctor import launcher

    [rec] = [r for r in json.loads(RUN.read_text())["results"] if r["check_id"] in ("offload.cycle",
                                                                                       "comm.offload_cycle")]
    seen = {}
    monkeypatch.setattr(launcher, "launch",
                        lambda payload, n, **kw: seen.update(payload=payload, n=n, **kw) or recorded_outcome(rec))
    ctx = DoctorContext(facts=TwoGpus(), mode="quick", python=sys.executable, options={"offload.backend": "cumem"})
    [res] = run_check(discover()["comm.offload_cycle"], ctx)
    assert seen["payload"] == "comm_offload_cycle.py" and seen["n"] == 2
    assert seen["args"] == ["--mode", "quick", "--backend", "cumem", "--hook", "preload"]
    # quick mode caps the spec's 90 s phases (probe_run.QUICK_PHASE_CAP_S)
    assert seen["deadline_s"] == 120 and seen["phase_deadlines"] == {"init": 30.0, "*": 30.0, "<start>": 30.0}
    assert res.check_id == "comm.offload_cycle" and res.status is Status(rec["status"]) is Status.PASS
    assert res.summary == rec["summary"] and res.subject == rec["subject"] == "2 GPU(s)"
    assert [(m.name, m.value) for m in res.metrics] == [(m["name"], m["value"]) for m in rec["metrics"]]


def test_the_payload_names_the_preload_hook_its_ranks_start_with(tmp_path):
    """`--print-start-env`: what the payload would re-exec itself with (the TMS preload hook for torch's CUDA
    major), found without importing torch or TMS, so the check can start warm ranks under the hook."""
    import subprocess
    import sys

    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("raise ImportError('torch must not be imported here')\n")
    (site / "torch" / "version.py").write_text("cuda = '13.0'\n")
    (site / "torch_memory_saver").mkdir()
    (site / "torch_memory_saver" / "__init__.py").write_text("raise ImportError('nor torch_memory_saver')\n")
    hook = site / "torch_memory_saver_hook_mode_preload_cu13.abi3.so"
    hook.write_bytes(b"")
    payload = Path(__file__).resolve().parents[2] / "checks" / "comm_offload_cycle.py"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)}

    def start_env(*args):
        proc = subprocess.run([sys.executable, str(payload), "--print-start-env", *args], env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    found = start_env("--mode", "quick", "--backend", "auto", "--hook", "preload")
    assert found["LD_PRELOAD"] == str(hook) and found["ENVBUILD_TMS_PRELOADED"] == "1"
    assert start_env("--mode", "quick", "--backend", "cumem", "--hook", "preload") == {}
    assert start_env("--mode", "quick", "--backend", "auto", "--hook", "torch") == {}
