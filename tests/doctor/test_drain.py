"""A probe's teardown behind the next check (launcher.launch(drain=True), Drain, runner.judge_exits): the launch
returns once its ranks answered, their exits are still judged under the launch's deadlines, the next probe can wait
for them before it measures (Probe.settle), and a stop leaves no process behind."""
import sys
import time
from pathlib import Path

import pytest

from envbuild.doctor import launcher
from envbuild.doctor.context import DoctorContext
from envbuild.doctor.probes import merged_result
from envbuild.doctor.registry import Check, ProbeSpec
from envbuild.doctor.runner import run_checks
from envbuild.report.model import Status

from test_launcher import alive, assert_nothing_left
from test_runner import FakeFacts

PAYLOAD = Path(__file__).resolve().parents[1] / "payloads" / "teardown_payload.py"


def start(mode="slow", seconds=1.5, phase_deadlines=None, **env):
    extra = {"TEARDOWN_MODE": mode, "TEARDOWN_S": str(seconds), **env}
    return launcher.launch(str(PAYLOAD), 1, python=sys.executable, gpus=None, args=[], deadline_s=30,
                           backend="none", env=extra, phase_deadlines=phase_deadlines, drain=True)


@pytest.fixture(autouse=True)
def no_drain_outlives_a_test():
    yield
    launcher.abort_drains()
    assert launcher.settle_pids() == []


def test_the_launch_returns_at_the_answer_and_the_drain_reads_the_exit():
    t0 = time.monotonic()
    out = start("slow", 1.5)
    returned = time.monotonic() - t0
    [rank] = out.ranks
    assert out.ok and rank.exiting and rank.returncode is None and rank.result["status"] == "pass"
    assert out.drain is not None and launcher.settle_pids() and rank.pid in launcher.settle_pids()
    out.drain.wait()
    waited = time.monotonic() - t0
    [rank] = out.ranks
    assert waited - returned >= 1.2, (returned, waited)  # the launch did not wait for the 1.5 s teardown
    assert out.ok and not rank.exiting and rank.returncode == 0 and rank.after_result_s >= 1.4
    assert rank.phase == "teardown"
    assert_nothing_left(out)


def test_a_rank_that_hangs_after_its_answer_is_killed_under_its_phase_deadline_and_fails():
    out = start("hang", phase_deadlines={"*": 1.5})
    assert out.ok
    out.drain.wait()
    assert not out.ok and out.hung_ranks == [0] and out.timed_out and "'teardown'" in out.reason
    failure = launcher_failure(out)
    assert failure.status == Status.FAIL and "hung in phase 'teardown'" in failure.summary, failure.summary
    assert_nothing_left(out)


def test_a_rank_that_crashes_after_its_answer_fails_with_its_exit_code():
    out = start("crash", 0.5)
    out.drain.wait()
    assert out.crashed_ranks == [0] and out.ranks[0].returncode == 7
    failure = launcher_failure(out)
    assert failure.status == Status.FAIL and "exited with code 7 in phase 'teardown'" in failure.summary
    assert_nothing_left(out)


def test_a_first_record_is_not_an_answer():
    """comm_weight_sync.py writes an "error" record before its work: the launch must wait for the final one."""
    out = start("slow", 0.8, TEARDOWN_FIRST_RECORD="1")
    assert out.ranks[0].result["status"] == "pass" and out.ranks[0].result.get("final") is True
    out.drain.wait()
    assert out.ok


def test_a_launch_beside_a_drain_settles_before_it_measures():
    first = start("slow", 1.5)
    [exiting] = launcher.settle_pids()
    second = start("slow", 0.0, TEARDOWN_SETTLE="1")
    settle = second.ranks[0].result["evidence"]["settle"]
    assert settle["pids"] == [exiting] and settle["still_running"] == [] and settle["waited_s"] >= 0.8, settle
    assert not alive(exiting)  # gone before the second probe measured
    assert "settle" in second.ranks[0].result["phase_s"]
    for out in (first, second):
        if out.drain is not None:
            out.drain.wait()
        assert out.ok
        assert_nothing_left(out)


def test_abort_kills_a_draining_rank_at_once():
    out = start("hang")
    pid = out.ranks[0].pid
    t0 = time.monotonic()
    launcher.abort_drains()
    assert time.monotonic() - t0 < launcher.TERM_GRACE_S + 2
    assert not alive(pid)
    assert_nothing_left(out)


def launcher_failure(out):
    spec = ProbeSpec(str(PAYLOAD), "the teardown probe", deadline_s={"quick": 30, "full": 30}, ranks="one",
                     backend="none")
    return spec.failure(out)


def probe_check(cid, env, **flags):
    spec = ProbeSpec(str(PAYLOAD), f"the {cid} probe", deadline_s={"quick": 30, "full": 30}, ranks="one",
                     backend="none", phase_deadlines={"*": 2}, **flags)
    return Check(id=cid, category="comm", title=cid, fn=lambda ctx, run: merged_result(run.launch(env=env)),
                 probe=spec)


def test_the_runner_fails_a_check_whose_rank_hung_in_teardown_while_the_next_check_ran():
    hung = probe_check("t.hangs", {"TEARDOWN_MODE": "hang"}, teardown_behind=True)
    after = probe_check("t.next", {"TEARDOWN_MODE": "slow", "TEARDOWN_S": "0", "TEARDOWN_SETTLE": "1"},
                        starts_beside_teardown=True)
    ctx = DoctorContext(facts=FakeFacts({"device_count": 0}), mode="quick", python=sys.executable)
    shown = []
    results = run_checks([hung, after], ctx, on_result=shown.append)
    assert [r.check_id for r in results] == ["t.hangs", "t.next"]
    first, second = results
    assert first.status == Status.FAIL and "hung in phase 'teardown'" in first.summary, first.summary
    assert first.evidence["results_before_exit"][0]["status"] == "pass"
    assert second.status == Status.PASS, second.summary
    # the next check started while the hung rank was still there, and its settle gave up on no one early: it
    # waited until the drain had killed the rank (its 2 s teardown deadline)
    assert second.evidence["settle"]["pids"], second.evidence
    assert [r.check_id for r in shown][-1] == "t.hangs" and shown[-1].status == Status.FAIL
    assert launcher.settle_pids() == []


def test_a_check_that_may_not_start_beside_a_teardown_waits_for_it():
    slow = probe_check("t.slow", {"TEARDOWN_MODE": "slow", "TEARDOWN_S": "1.0"}, teardown_behind=True)
    after = probe_check("t.next", {"TEARDOWN_MODE": "slow", "TEARDOWN_S": "0", "TEARDOWN_SETTLE": "1"})
    ctx = DoctorContext(facts=FakeFacts({"device_count": 0}), mode="quick", python=sys.executable)
    first, second = run_checks([slow, after], ctx)
    assert first.status == Status.PASS and second.status == Status.PASS
    assert "settle" not in second.evidence  # nothing was exiting any more when it started
    [launch] = first.evidence["launch"]
    assert launch["ranks"][0]["after_result_s"] >= 0.9  # the evidence got the exit the drain saw
