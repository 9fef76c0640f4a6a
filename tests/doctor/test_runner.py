"""The runner: needs, skips with reasons, crashed checks, --require-gpu, causes on fail."""
from typing import Any, Dict

import pytest

from envbuild.doctor.context import DoctorContext
from envbuild.doctor.registry import Check
from envbuild.doctor.runner import run_check
from envbuild.facts.source import FactSource, FactUnavailable
from envbuild.report.model import Result, Status


class FakeFacts(FactSource):
    def __init__(self, nvml: Any, live: bool = True):
        self._nvml = nvml
        self.is_live = live
        self.description = "fake"

    def nvml(self) -> Dict[str, Any]:
        if isinstance(self._nvml, Exception):
            raise self._nvml
        return self._nvml


def make(fn, needs=(), causes=("D3",)):
    return Check(id="t.x", category="node", title="t", fn=fn, needs=frozenset(needs), causes=tuple(causes))


def ok(ctx):
    return Result("t.x", "node", Status.PASS, "fine")


@pytest.mark.parametrize("nvml,live,needs,expect", [
    (FactUnavailable("no NVIDIA driver: libnvidia-ml.so.1 not found"), True, ("gpu",), "no NVIDIA driver: libnvidia-ml.so.1 not found"),
    ({"device_count": 1}, True, ("multi_gpu",), "needs at least 2 GPUs; 1 selected"),
    ({"device_count": 2}, False, ("gpu",), "GPU probes need the live node"),
])
def test_unmet_needs_skip_with_reason(nvml, live, needs, expect):
    [r] = run_check(make(ok, needs), DoctorContext(facts=FakeFacts(nvml, live)))
    assert r.status is Status.SKIP
    assert expect in r.summary


def test_profile_need_says_how():
    [r] = run_check(make(ok, ("profile",)), DoctorContext(facts=FakeFacts({})))
    assert r.status is Status.SKIP and "--profile" in r.summary


def test_require_gpu_turns_skip_into_fail():
    ctx = DoctorContext(facts=FakeFacts(FactUnavailable("no NVIDIA driver")), require_gpu=True)
    [r] = run_check(make(ok, ("gpu",)), ctx)
    assert r.status is Status.FAIL


def test_crashing_check_is_error_with_traceback():
    def boom(ctx):
        raise KeyError("missing")

    [r] = run_check(make(boom), DoctorContext(facts=FakeFacts({})))
    assert r.status is Status.ERROR and "KeyError" in r.summary and "boom" in r.evidence["traceback"]


def test_fact_unavailable_inside_check_is_skip():
    def unreadable(ctx):
        raise FactUnavailable("permission denied reading /proc/x")

    [r] = run_check(make(unreadable), DoctorContext(facts=FakeFacts({})))
    assert r.status is Status.SKIP and "permission denied" in r.summary


def test_fail_without_causes_gets_declared_causes():
    def bad(ctx):
        return Result("t.x", "node", Status.FAIL, "broken")

    [r] = run_check(make(bad, causes=("D3", "D7")), DoctorContext(facts=FakeFacts({})))
    assert r.causes == ["D3", "D7"]


def test_gpu_selection_filters_to_present_devices():
    ctx = DoctorContext(facts=FakeFacts({"device_count": 2}), gpus=[1, 5])
    assert ctx.gpu_indices() == [1]


def test_a_probe_checks_results_say_how_long_its_ranks_took_to_reach_their_first_phase():
    """Every result of a probe check carries, last in its evidence, each launch's wall time and per rank whether
    it was warm and the seconds from its start to its first phase: where a probe's time went besides its work."""
    import sys
    from pathlib import Path

    from envbuild.doctor.probes import merged_result
    from envbuild.doctor.registry import ProbeSpec

    payload = Path(__file__).resolve().parents[1] / "payloads" / "ok_payload.py"
    spec = ProbeSpec(str(payload), "the ok probe", deadline_s={"quick": 60, "full": 60}, ranks="one", backend="none")
    check = Check(id="t.probe", category="comm", title="t", fn=lambda ctx, run: merged_result(run.launch()),
                  probe=spec)
    ctx = DoctorContext(facts=FakeFacts({"device_count": 0}), mode="quick", python=sys.executable)
    [res] = run_check(check, ctx)
    assert res.status == Status.PASS, res.summary
    assert list(res.evidence)[-1] == "launch"
    [launch] = res.evidence["launch"]
    [rank] = launch["ranks"]
    assert rank["rank"] == 0 and rank["warm"] is False
    assert 0 < rank["start_s"] < launch["wall_s"], launch  # a cold rank: python's start-up before its phase
    # where the rest went: each outermost phase's seconds, and the exit after the result
    assert set(rank["phase_s"]) == {"work"}, rank  # ok_payload.py: one outermost phase
    assert all(0 <= s < launch["wall_s"] for s in rank["phase_s"].values()), rank
    assert rank["start_s"] + sum(rank["phase_s"].values()) <= launch["wall_s"], launch
    assert 0 <= rank["after_result_s"] < launch["wall_s"], rank
