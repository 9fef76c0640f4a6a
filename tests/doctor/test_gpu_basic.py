"""gpu.basic on a machine without a driver: the real payload (checks/gpu_basic.py) runs once per GPU NVML
reports, each rank's verdict is its GPU's result, and a rank that hangs is the runner's fail next to the
verdicts of the ranks that answered."""
import sys
from typing import Any, Dict

from envbuild.doctor.context import DoctorContext
from envbuild.doctor.registry import discover
from envbuild.doctor.runner import run_check
from envbuild.facts.source import FactSource
from envbuild.report.model import Status


class TwoGpus(FactSource):
    is_live = True
    description = "a live node whose NVML reports two GPUs (this test machine has no driver)"

    def nvml(self) -> Dict[str, Any]:
        return {"device_count": 2}


def test_without_libcuda_every_gpu_fails_naming_the_missing_driver_library():
    results = run_check(discover()["gpu.basic"], DoctorContext(facts=TwoGpus(), python=sys.executable))
    assert [r.subject for r in results] == ["gpu0", "gpu1"]
    for r in results:
        assert r.check_id == "gpu.basic" and r.status is Status.FAIL
        assert "libcuda.so.1 cannot be loaded" in r.summary and r.causes == ["D5"]


def test_a_gpu_that_hangs_is_named_and_the_other_keeps_its_verdict(monkeypatch):
    from envbuild.doctor import launcher
    from envbuild.doctor.launcher import LaunchOutcome, RankOutcome

    ok = {"status": "pass", "summary": "GPU 0 ok", "evidence": {}, "metrics": []}
    ranks = [RankOutcome(rank=0, returncode=0, result=ok, phase="memory", stderr_tail="", log_path="",
                         stack_dump=""),
             RankOutcome(rank=1, returncode=-9, result=None, phase="cuinit", stderr_tail="", log_path="",
                         stack_dump="", phase_elapsed_s=30.0)]
    outcome = LaunchOutcome(ranks=ranks, timed_out=True, hung_ranks=[1], crashed_ranks=[], wall_s=31.0,
                            reason="rank 1 spent 30 s in phase 'cuinit'")
    seen = {}
    monkeypatch.setattr(launcher, "launch", lambda payload, n, **kw: seen.update(payload=payload, n=n, **kw) or outcome)
    hung, good = run_check(discover()["gpu.basic"], DoctorContext(facts=TwoGpus(), mode="full", python=sys.executable))
    assert seen["payload"] == "gpu_basic.py" and seen["n"] == 2 and seen["args"] == ["--mem-mib", "4096"]
    assert seen["deadline_s"] == 90 and seen["phase_deadlines"] == {"cuinit": 30, "context": 60, "*": 45, "<start>": 45}
    assert hung.status is Status.FAIL and "rank 1 hung in phase 'cuinit'" in hung.summary
    assert hung.causes == ["D1", "D4", "D7"]
    assert good.status is Status.PASS and good.subject == "gpu0" and good.check_id == "gpu.basic"
