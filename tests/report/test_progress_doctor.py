"""The doctor's progress as a log sees it (envbuild.report.progress on envbuild.progress.Display): one flushed
line per finished check, and a `(running)` line each interval while a long check runs, with the estimate
from the durations a previous run recorded; `quiet` prints nothing."""
from __future__ import annotations

import io
import re
import time
from types import SimpleNamespace

from envbuild.report.model import Result, Status
from envbuild.report.progress import Progress


def _run(progress: Progress, seconds: float) -> None:
    progress.start(SimpleNamespace(id="train.moe_step"), remaining=["comm.weight_sync"])
    time.sleep(seconds)
    progress.result(Result("train.moe_step", "train", Status.PASS, "3 steps, 0.59 s each"))
    progress.stop()


def test_a_long_check_is_not_silent_in_a_log(monkeypatch):
    monkeypatch.setenv("ENVBUILD_PROGRESS_INTERVAL", "0.1")
    log = io.StringIO()
    _run(Progress(total=2, estimates={"train.moe_step": 60.0, "comm.weight_sync": 12.0}, stream=log), 0.45)
    lines = log.getvalue().splitlines()
    beats = [ln for ln in lines if ln.startswith("doctor: [1/2] train.moe_step")]
    assert len(beats) >= 2, lines
    assert all(re.fullmatch(r"doctor: \[1/2\] train\.moe_step  [0-9.]+ s  · about 1 min \d\d s left  \(running\)", b)
               for b in beats), beats
    assert re.fullmatch(r"\[1/2\] PASS  train\.moe_step  0\.\d\d s  3 steps, 0\.59 s each", lines[-1]), lines
    n = len(lines)
    time.sleep(0.3)
    assert len(log.getvalue().splitlines()) == n  # the beat stopped with the check


def test_quiet_and_no_interval_print_no_beat(monkeypatch):
    monkeypatch.setenv("ENVBUILD_PROGRESS_INTERVAL", "0.1")
    quiet = io.StringIO()
    _run(Progress(total=1, quiet=True, stream=quiet), 0.3)
    assert quiet.getvalue() == ""
    monkeypatch.setenv("ENVBUILD_PROGRESS_INTERVAL", "0")
    off = io.StringIO()
    _run(Progress(total=1, stream=off), 0.3)
    assert [ln for ln in off.getvalue().splitlines() if "(running)" in ln] == []
