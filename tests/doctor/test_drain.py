"""A probe's teardown behind the next check (launcher.launch(drain=True), Drain, runner.judge_exits): the launch
returns once its ranks answered, their exits are still judged under the launch's deadlines, the next probe can wait
for them before it measures (Probe.settle), and a stop leaves no process behind."""
import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from envbuild.doctor import launcher
from envbuild.doctor.context import DoctorContext
from envbuild.doctor.interrupt import Stopped, stop_on_signals
from envbuild.doctor.probes import merged_result, rank_results
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
    final = out.drain.wait()
    waited = time.monotonic() - t0
    [rank] = final.ranks
    assert waited - returned >= 1.2, (returned, waited)  # the launch did not wait for the 1.5 s teardown
    assert final.ok and not rank.exiting and rank.returncode == 0 and rank.after_result_s >= 1.4
    assert rank.phase == "teardown"
    assert out.ranks[0].exiting  # the outcome the check read is left as it was
    assert_nothing_left(final)


def test_a_rank_that_hangs_after_its_answer_is_killed_under_its_phase_deadline_and_fails():
    out = start("hang", phase_deadlines={"*": 1.5})
    assert out.ok
    out = out.drain.wait()
    assert not out.ok and out.hung_ranks == [0] and out.timed_out and "'teardown'" in out.reason
    failure = launcher_failure(out)
    assert failure.status == Status.FAIL and "hung in phase 'teardown'" in failure.summary, failure.summary
    assert_nothing_left(out)


def test_a_rank_that_crashes_after_its_answer_fails_with_its_exit_code():
    out = start("crash", 0.5)
    out = out.drain.wait()
    assert out.crashed_ranks == [0] and out.ranks[0].returncode == 7
    failure = launcher_failure(out)
    assert failure.status == Status.FAIL and "exited with code 7 in phase 'teardown'" in failure.summary
    assert_nothing_left(out)


def test_a_first_record_is_not_an_answer():
    """comm_weight_sync.py writes an "error" record before its work: the launch must wait for the final one."""
    out = start("slow", 0.8, TEARDOWN_FIRST_RECORD="1")
    assert out.ranks[0].result["status"] == "pass" and out.ranks[0].result.get("final") is True
    assert out.drain.wait().ok


def test_a_launch_beside_a_drain_settles_before_it_measures():
    first = start("slow", 1.5)
    [exiting] = launcher.settle_pids()
    second = start("slow", 0.0, TEARDOWN_SETTLE="1")
    settle = second.ranks[0].result["evidence"]["settle"]
    assert settle["pids"] == [exiting] and settle["still_running"] == [] and settle["waited_s"] >= 0.8, settle
    assert not alive(exiting)  # gone before the second probe measured
    assert "settle" in second.ranks[0].result["phase_s"]
    for out in (first, second):
        final = out.drain.wait() if out.drain is not None else out
        assert final.ok
        assert_nothing_left(final)


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
    results = run_checks([hung, after], ctx, on_result=lambda r, _: shown.append(r))
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


def test_a_rank_that_exits_as_the_launch_returns_is_never_a_broken_probe():
    """The launch returns while its rank exits: however close the two, the rank is `exiting` (its exit is the
    drain's to read), never a rank with no return code, no crash and no hang, which read as "the probe itself is
    broken" (a reviewer saw 8 of 200 healthy runs so)."""
    random.seed(12)
    for _ in range(60):
        check = probe_check("t.ok", {"TEARDOWN_MODE": "slow", "TEARDOWN_S": "%.4f" % random.uniform(0.0, 0.03)},
                            teardown_behind=True)
        ctx = DoctorContext(facts=FakeFacts({"device_count": 0}), mode="quick", python=sys.executable)
        [result] = run_checks([check], ctx)
        assert result.status == Status.PASS, result.summary


def _per_rank(ctx, run):
    """gpu_basic's shape: one Result per rank, the broken launch's fail beside the good ranks' rows."""
    out = run.launch_outcome(env={"TEARDOWN_S": "0.5"}, nranks=2,
                             per_rank_env=[{"TEARDOWN_MODE": "slow"}, {"TEARDOWN_MODE": "crash"}])
    subjects = {0: "gpu0", 1: "gpu1"}
    broken = run.failure(out)
    if broken is not None:
        return [broken] + [res for res, ro in zip(rank_results(out, subjects), out.ranks)
                           if ro.result is not None and ro.rank not in out.crashed_ranks + out.hung_ranks]
    return rank_results(out, subjects)


@pytest.mark.parametrize("behind", [False, True])
def test_a_late_crash_is_judged_by_the_check_itself_as_inside_the_launch(behind):
    """A rank that crashes in its teardown: with its exit read by a drain, the check is judged again on the outcome
    with that exit, so the report is the one the check gives when the launch waits (its fail and the healthy GPU's
    row), not one generic failure in place of all its rows."""
    spec = ProbeSpec(str(PAYLOAD), "the basic probe", deadline_s={"quick": 30, "full": 30}, backend="gloo",
                     phase_deadlines={"*": 5}, teardown_behind=behind)
    check = Check(id="t.basic", category="gpu", title="t", fn=_per_rank, probe=spec)
    ctx = DoctorContext(facts=FakeFacts({"device_count": 0}), mode="quick", python=sys.executable)
    results = run_checks([check], ctx)
    assert [(r.status, r.subject) for r in results] == [(Status.FAIL, None), (Status.PASS, "gpu0")]
    assert "rank 1 exited with code 7 in phase 'teardown'" in results[0].summary
    if behind:
        assert results[0].evidence["results_before_exit"][1]["subject"] == "gpu1"


def test_a_stop_while_a_rank_is_still_exiting_leaves_its_check_unjudged():
    """SIGTERM while the runner waits for a rank stuck in its teardown: that check is an interrupted skip (how its
    rank would have ended is unknown), not the pass its first result said; the rank is killed."""
    check = probe_check("t.ws", {"TEARDOWN_MODE": "hang"}, teardown_behind=True)
    ctx = DoctorContext(facts=FakeFacts({"device_count": 0}), mode="quick", python=sys.executable)
    threading.Timer(2.0, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
    with stop_on_signals():
        with pytest.raises(Stopped) as stopped:
            run_checks([check], ctx)
    [result] = stopped.value.partial
    assert result.status == Status.SKIP and "interrupted by SIGTERM while its ranks were exiting" in result.summary
    assert result.evidence["results_before_exit"][0]["status"] == "pass"


# The CLI's doctor over two checks: gpu.t_rows, two ranks with rank 1 crashing in its teardown, which exits behind the
# run and has the check judged again at the run's end, to one fail row in place of its two pass rows; comm.t_after, one
# row, run before that re-judging. gpu.t_rows goes straight into the registry: a probe's payload must be checks/<id>.py.
ROWS_DRIVER = textwrap.dedent('''
    import sys
    from envbuild.doctor import registry
    from envbuild.doctor.probes import rank_results
    from envbuild.doctor.registry import Check, ProbeSpec, check
    from envbuild.report.model import Result, Status

    def rows(ctx, run):
        out = run.launch_outcome(env={"TEARDOWN_S": "0.5"}, nranks=2,
                                 per_rank_env=[{"TEARDOWN_MODE": "slow"}, {"TEARDOWN_MODE": "crash"}])
        broken = run.failure(out)
        return [broken] if broken is not None else rank_results(out, {0: "gpu0", 1: "gpu1"})

    spec = ProbeSpec(sys.argv[1], "the rows probe", deadline_s={"quick": 30, "full": 30}, backend="gloo",
                     phase_deadlines={"*": 5}, teardown_behind=True)
    registry._REGISTRY["gpu.t_rows"] = Check(id="gpu.t_rows", category="gpu", title="t", fn=rows, probe=spec)

    @check("comm.t_after", "comm", "a check after it", modes=("quick",))
    def after(ctx):
        return Result("comm.t_after", "comm", Status.PASS, "fine")

    from envbuild.cli import main
    main(["doctor", "--quick", "--check", "gpu.t_rows", "--check", "comm.t_after", "--json", sys.argv[2]])
''')
COUNTER = re.compile(r"^\[\s*(\d+)/(\d+)\] ", re.M)


def doctor_rows(tmp_path, cache):
    """The [k/N] pairs the doctor printed on stderr (a pipe: one line per row) and the rows of its report."""
    driver, report = tmp_path / "driver.py", tmp_path / "report.json"
    driver.write_text(ROWS_DRIVER)
    proc = subprocess.run([sys.executable, str(driver), str(PAYLOAD), str(report)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "XDG_CACHE_HOME": str(cache)}, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1, proc.stderr  # gpu.t_rows fails
    rows = json.loads(report.read_text())["results"]
    assert [(r["check_id"], r["status"]) for r in rows] == [("gpu.t_rows", "fail"), ("comm.t_after", "pass")]
    return [(int(k), int(n)) for k, n in COUNTER.findall(proc.stderr)], len(rows), proc.stderr


def test_a_check_judged_again_counts_its_new_rows_once_live_and_for_the_next_run(tmp_path):
    """The rows a re-judged check printed first are replaced, not added to: the counter never passes its total,
    ends at the report's row count, and the row count saved for the next run is the report's."""
    cache = tmp_path / "cache"
    lines, rows, err = doctor_rows(tmp_path, cache)
    assert "FAIL  gpu.t_rows" in err and "PASS  gpu.t_rows" in err  # its first rows were shown, then its fail
    assert all(k <= n for k, n in lines), err
    assert lines[-1] == (rows, rows), err
    saved = json.loads((cache / "envbuild" / "doctor-durations.json").read_text())["quick.rows"]
    assert saved == {"gpu.t_rows": 1.0, "comm.t_after": 1.0}
    lines, _, err = doctor_rows(tmp_path, cache)
    assert lines[-1] == (rows, rows) and all(k <= n for k, n in lines), err
