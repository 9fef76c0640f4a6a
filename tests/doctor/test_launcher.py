"""The multi-rank launcher on torch-free payloads: results, hangs, crashes, phase deadlines, no orphans.

Each payload in tests/payloads/ uses checks/_harness.py exactly as a GPU probe does; only torch is
missing, which is the point: the launcher's guarantees must not depend on what the payload imports.
"""
import os
import sys
import time
from pathlib import Path

import pytest

from envbuild.doctor import launcher
from envbuild.doctor.launcher import group_members, launch
from envbuild.doctor.probes import failure_result
from envbuild.report.model import Status

PAYLOADS = Path(__file__).resolve().parents[1] / "payloads"


def run(name, nranks=2, **kw):
    kw.setdefault("deadline_s", 20)
    kw.setdefault("args", [])
    kw.setdefault("gpus", None)
    return launch(str(PAYLOADS / name), nranks, python=sys.executable, backend="gloo", **kw)


def alive(pid):
    """True when pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            data = fh.read()
    except OSError:
        return False
    return data[data.rfind(")") + 2] != "Z"


def assert_nothing_left(outcome, extra_pids=()):
    pids = [r.pid for r in outcome.ranks] + list(extra_pids)
    assert [p for p in pids if alive(p)] == []
    assert group_members([r.pid for r in outcome.ranks]) == []
    assert outcome.leftover_pids == []


def test_ranks_get_env_rendezvous_and_results(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # a user's shell must not turn NVLS on through us
    out = run("ok_payload.py", nranks=3, gpus=[1, 0], env={"EXTRA": "x"},
              per_rank_env=[{"PER_RANK": str(k)} for k in range(3)])
    assert out.ok and not out.timed_out and out.hung_ranks == [] and out.crashed_ranks == []
    ports = {r.result["evidence"]["MASTER_PORT"] for r in out.ranks}
    assert len(ports) == 1 and ports.pop().isdigit()
    for r in out.ranks:
        ev = r.result["evidence"]
        assert r.result["status"] == "pass" and r.phase == "work" and r.returncode == 0
        assert ev["NCCL_NVLS_ENABLE"] == "0" and ev["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
        assert ev["CUDA_VISIBLE_DEVICES"] == "1,0" and ev["LOCAL_RANK"] == str(r.rank)
        assert ev["ENVBUILD_GPU"] == str([1, 0][r.rank % 2])
        assert ev["EXTRA"] == "x" and ev["PER_RANK"] == str(r.rank) and ev["MASTER_ADDR"] == "127.0.0.1"
        assert r.result["metrics"] == [{"name": "value", "value": r.rank * 10 + 1, "unit": "count"}]
        assert Path(r.log_path).is_file()
    assert_nothing_left(out)


def test_nvls_needs_explicit_opt_in():
    with pytest.raises(ValueError, match="allow_nvls"):
        run("ok_payload.py", env={"NCCL_NVLS_ENABLE": "1"})
    out = run("ok_payload.py", nranks=1, env={"NCCL_NVLS_ENABLE": "1"}, allow_nvls=True)
    assert out.ranks[0].result["evidence"]["NCCL_NVLS_ENABLE"] == "1"


def test_opt_in_alone_keeps_nvls_off(monkeypatch):
    """allow_nvls lets the caller ask for NVLS; it does not hand the choice to the user's shell or to NCCL's
    default (on where the fabric supports it)."""
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    monkeypatch.setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "0")
    env = launcher.rank_env(0, 1, port=1, run_dir="/tmp", gpus=None, backend="gloo", deadline_s=1,
                            base=dict(os.environ), extra=None, per_rank=None, allow_nvls=True,
                            pythonpath=None)
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"


def test_hang_is_killed_inside_deadline_with_stacks_and_no_orphans():
    t0 = time.monotonic()
    out = run("hang_payload.py", nranks=3, args=["children"], deadline_s=3)
    took = time.monotonic() - t0
    assert out.timed_out and out.hung_ranks == [2] and out.crashed_ranks == []
    assert "deadline" in out.reason
    assert took < 3 + launcher.TERM_GRACE_S + 5, took
    hung = out.ranks[2]
    assert hung.phase == "collective" and hung.result is None
    assert "hang_payload.py" in hung.stack_dump and "in main" in hung.stack_dump  # faulthandler's dump
    kids = []
    for k in range(3):
        kids += [int(p) for p in (Path(out.run_dir) / f"rank{k}.kids").read_text().split()]
    assert len(kids) == 6
    assert_nothing_left(out, kids)  # including the children that left the process group

    res = failure_result(out, what="test probe")
    assert res.status is Status.FAIL and "hung" in res.summary and "'collective'" in res.summary
    assert res.causes == ["M4", "D7"] and res.evidence["phases"]["rank2"] == "collective"


def test_phase_deadline_stops_a_run_early():
    out = run("hang_payload.py", nranks=2, args=["all"], deadline_s=60, phase_deadlines={"collective": 1.0})
    assert out.timed_out and sorted(out.hung_ranks) == [0, 1]
    assert "phase 'collective'" in out.reason and out.wall_s < 10
    assert all(r.phase == "collective" and r.phase_elapsed_s >= 1.0 for r in out.ranks)
    assert_nothing_left(out)


def test_crash_reports_stderr_tail_and_stops_the_waiting_peers():
    out = run("crash_payload.py", nranks=3, deadline_s=60)
    assert not out.timed_out and out.crashed_ranks == [1] and sorted(out.hung_ranks) == [0, 2]
    assert out.wall_s < 60 / 2  # peers are stopped after the crash grace, not at the deadline
    crashed = out.ranks[1]
    assert crashed.returncode == 1 and "Cuda failure 999" in crashed.stderr_tail
    assert crashed.result["status"] == "error" and crashed.result["phase"] == "compute"
    res = failure_result(out, what="test probe")
    assert res.status is Status.FAIL and "rank 1" in res.summary and "999" in res.summary
    assert "Cuda failure 999" in res.evidence["rank1_stderr_tail"]
    assert_nothing_left(out)


def test_ranks_start_with_no_signal_blocked_and_die_with_the_launcher():
    """Ranks are started while the launcher holds SIGINT/SIGTERM/SIGHUP back; a rank that inherited that mask
    ran on after the launcher's SIGTERM (a SIGSTOPped churn rank reached 'teardown')."""
    out = run("ok_payload.py", nranks=2)
    assert out.ok
    assert [int(r.result["evidence"]["sig_blocked"], 16) for r in out.ranks] == [0, 0]


def test_signal_death_without_result():
    out = run("segv_payload.py", nranks=2)
    assert out.crashed_ranks == [0] and out.ranks[0].returncode == -11 and out.ranks[0].result is None
    assert "Fatal Python error" in out.ranks[0].stderr_tail  # faulthandler.enable() on fatal signals
    res = failure_result(out, what="test probe")
    assert res.status is Status.FAIL and "code -11" in res.summary and "'kernel'" in res.summary


def test_sigstopped_rank_is_reported_and_killed():
    out = run("ok_payload.py", nranks=2, deadline_s=3, env={"ENVBUILD_TEST_SIGSTOP_AT": "work"})
    assert out.timed_out and out.hung_ranks == [1] and out.ranks[0].returncode == 0
    assert out.ranks[1].phase == "work" and "stopped" in out.ranks[1].stack_dump and out.ranks[1].state == "T"
    res = failure_result(out, what="test probe")
    assert "rank 1 was stopped (state T" in res.summary and res.evidence["leftover_pids"] == []
    assert_nothing_left(out)


def test_missing_payload_and_python():
    with pytest.raises(FileNotFoundError, match="payload"):
        launch("no_such_probe.py", 1, python=sys.executable, gpus=None, args=[], deadline_s=1)
    with pytest.raises(FileNotFoundError, match="python"):
        launch(str(PAYLOADS / "ok_payload.py"), 1, python="/no/such/python", gpus=None, args=[], deadline_s=1)


def test_rendezvous_port_is_free_and_below_the_ephemeral_range():
    """bind(0) ports come from the range the kernel also hands to outgoing connections; one taken in the seconds
    before rank 0 listened failed a probe with EADDRINUSE inside a Ray worker (docs/gpu-runs, session 4)."""
    import socket

    from envbuild.doctor.rankproc import _ephemeral_low, rendezvous_port

    low = _ephemeral_low()
    ports = {rendezvous_port() for _ in range(20)}
    assert len(ports) > 1
    for port in ports:
        if low > 20100:
            assert 20000 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


# --- no wait without a deadline (issue 26): spawn to first phase, and between phases ------------------------------

def test_a_rank_stuck_before_its_first_phase_is_named_within_the_start_deadline():
    t0 = time.monotonic()
    out = run("slow_start_payload.py", nranks=2, args=["sleep"], deadline_s=120,
              phase_deadlines={launcher.START: 2.0, "*": 2.0})
    assert time.monotonic() - t0 < 12  # not the 120 s run deadline
    assert out.timed_out and out.hung_ranks == [1] and "rank 1 stuck starting: no phase within 2 s" in out.reason
    result = failure_result(out, what="the slow-start probe")
    assert result.status == Status.FAIL
    assert "rank 1 was stuck starting: no phase for" in result.summary and "after its start" in result.summary
    assert "slow_start_payload.py" in result.evidence["rank1_stacks"]  # faulthandler's stack of the stuck rank
    assert_nothing_left(out)


def test_a_rank_stopped_before_its_first_phase_is_caught_and_named_stopped():
    out = run("slow_start_payload.py", nranks=2, args=["stop"], deadline_s=120, phase_deadlines={launcher.START: 2.0})
    assert out.timed_out and out.wall_s < 12 and out.ranks[1].state == "T"
    summary = failure_result(out, what="the slow-start probe").summary
    assert "rank 1 was stopped (state T, e.g. SIGSTOP) before its first phase" in summary
    assert_nothing_left(out)


def test_the_harness_start_hook_stops_a_rank_before_its_first_phase(monkeypatch):
    monkeypatch.setenv("ENVBUILD_TEST_SIGSTOP_AT", "<start>")
    out = run("ok_payload.py", nranks=2, deadline_s=120, phase_deadlines={launcher.START: 2.0})
    assert out.hung_ranks == [1] and out.ranks[1].phase is None and out.ranks[1].state == "T"
    assert out.wall_s < 12
    assert_nothing_left(out)


def test_a_wait_between_two_phases_counts_against_the_any_phase_deadline():
    out = run("slow_start_payload.py", nranks=1, args=["gap"], deadline_s=120, phase_deadlines={"*": 2.0})
    assert out.timed_out and out.wall_s < 12 and "in phase 'first'" in out.reason
    assert_nothing_left(out)


def test_the_timed_stop_hook_stops_a_rank_mid_phase_and_logs_where(monkeypatch, tmp_path):
    """benchmarks/stop_rank.py's hook: the rank stops itself N s after its start and notes the moment and phase."""
    import json

    log = tmp_path / "stops.jsonl"
    monkeypatch.setenv("ENVBUILD_TEST_SIGSTOP_AFTER_S", "0.7")
    monkeypatch.setenv("ENVBUILD_TEST_SIGSTOP_LOG", str(log))
    out = run("phases_payload.py", nranks=2, deadline_s=120, phase_deadlines={launcher.START: 2.0, "*": 2.0})
    [entry] = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry["rank"] == 1 and entry["where"] in ("init", "work 0") and entry["how"] == "timer"
    assert out.hung_ranks == [1] and out.ranks[1].state == "T" and out.wall_s < 12
    assert out.ranks[0].result["status"] == "pass"  # the other rank finished its phases
    assert_nothing_left(out)
