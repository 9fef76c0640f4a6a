"""The doctor starts its stack probe (and NVML's snapshot) before it resolves the run's options, when every check
runs on this node (envbuild/doctor/session.py start_stack_ahead): a node's first run then reads torch's libraries
while the settings import every check's module and load the profile. What must hold for a user: the probe really
starts that early; bad options still give one line and exit 2, with no probe, gate directory or process left; and
a run with --check starts nothing ahead.

The doctor is the real CLI; its --python is a wrapper that notes when the probe process started, then sleeps so a
probe left behind would still be running when the test looks, and execs this venv's python on checks/stack_probe.py.
"""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stackfix import REPO, clean_env, run_doctor


def slow_python(tmp_path: Path) -> Path:
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\ndate +%s.%N >> {tmp_path / 'started'}\nsleep 2\nexec {sys.executable} \"$@\"\n")
    script.chmod(0o755)
    return script


def left_behind(tmp_path: Path) -> list:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
    return [line for line in out if str(tmp_path) in line and "pytest" not in line]


def test_the_probe_starts_before_bad_options_are_found_and_nothing_is_left(tmp_path):
    bad_profile = tmp_path / "profile.toml"
    bad_profile.write_text("name = \"x\"\n[[[\n")
    env = clean_env(TMPDIR=str(tmp_path))
    proc, _ = run_doctor(["--python", str(slow_python(tmp_path)), "--profile", str(bad_profile)], env, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and str(bad_profile) in proc.stderr
    assert (tmp_path / "started").exists()  # the probe had started before the profile was read
    time.sleep(0.3)
    assert left_behind(tmp_path) == []
    assert not list(tmp_path.glob("*envbuild-run*")), list(tmp_path.iterdir())


def test_a_run_that_selects_checks_starts_no_probe_ahead(tmp_path):
    env = clean_env(TMPDIR=str(tmp_path))
    proc, results = run_doctor(["--python", str(slow_python(tmp_path)), "--check", "node.dev_shm",
                                "--set", "no.such=1"], env, tmp_path)
    assert proc.returncode == 2 and "no.such" in proc.stderr
    assert not (tmp_path / "started").exists()


def test_a_whole_static_run_reads_the_stack_started_ahead_once(tmp_path):
    """The probe started ahead is the one the stack checks read: one probe process for the whole run."""
    env = clean_env(TMPDIR=str(tmp_path))
    proc, results = run_doctor(["--python", str(slow_python(tmp_path))], env, tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    assert results["stack.torch"]["status"] in ("skip", "pass", "warn"), results["stack.torch"]
    assert len((tmp_path / "started").read_text().split()) == 1
    assert left_behind(tmp_path) == []


def test_a_cancelled_probe_is_killed_without_dumping_its_stacks(monkeypatch, tmp_path):
    """Bad options close the probe started ahead: nobody reads its stacks, so none are dumped first (SIGUSR1, a
    0.5 s wait and up to two py-spy dumps made a mistyped --profile take 0.5 s to 30 s longer to say so)."""
    import threading

    from envbuild.doctor import launcher, stack_reader
    from envbuild.facts.source import FactUnavailable

    dumped = []
    monkeypatch.setattr(launcher, "_dump_stacks", lambda ranks: dumped.append(len(ranks)))
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    try:
        stack_reader.read_stack(str(slow_python(tmp_path)), cancel=cancel)
    except FactUnavailable as exc:
        assert "stopped before it answered" in str(exc)
    assert dumped == []


def test_the_nvml_thread_ends_even_when_the_probe_was_closed_first(monkeypatch, tmp_path):
    """A snapshot that ends after close() (bad options found meanwhile) finds the gate's directory gone: the thread
    still ends and anyone asking gets the snapshot, no traceback and no wait for ever."""
    import time as _time

    from envbuild.doctor.session import StackAhead, stack_reader_for
    from envbuild.facts import nvml

    monkeypatch.setattr(nvml, "take_snapshot", lambda: (_time.sleep(0.5), {"devices": []})[1])
    ahead = StackAhead(stack_reader_for("static"), str(slow_python(tmp_path)))
    ahead.close()
    assert ahead.nvml() == {"devices": []}


STOP_INSIDE = r"""
import importlib, os, runpy, signal, sys
module, name, signame = sys.argv[1:4]
sys.argv = ["envbuild"] + sys.argv[4:]
target = importlib.import_module(module)
original = getattr(target, name)
def stop_here(*args, **kwargs):  # the stop signal lands as this step of the doctor's set-up begins
    os.kill(os.getpid(), getattr(signal, signame))
    return original(*args, **kwargs)
setattr(target, name, stop_here)
runpy.run_module("envbuild", run_name="__main__", alter_sys=False)
"""


@pytest.mark.parametrize("module, name, signame, code", [
    ("envbuild.doctor.settings", "resolve_doctor", "SIGTERM", 143),  # while the options are resolved
    ("envbuild.facts.source", "open_source", "SIGHUP", 129),  # while run_doctor sets the session up
])
def test_a_stop_signal_before_the_checks_ends_the_probe_started_ahead(tmp_path, module, name, signame, code):
    """scancel's SIGTERM or a closed terminal's SIGHUP while the doctor still sets up: by default it killed the
    process at once, leaving the gate directory of the probe started ahead. Now: one line, 128 + the signal, no
    probe, gate directory or process left."""
    env = clean_env(TMPDIR=str(tmp_path))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env["PYTHONPATH"]])
    proc = subprocess.run([sys.executable, "-c", STOP_INSIDE, module, name, signame, "doctor",
                           "--python", str(slow_python(tmp_path)), "--json", str(tmp_path / "r.json")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"envbuild: STOPPED by {signame} before the checks started; no report written")
    time.sleep(0.3)  # (the probe's thread may not have spawned it yet when the signal lands: both must end clean)
    assert left_behind(tmp_path) == []
    assert not list(tmp_path.glob("*envbuild-run*")), list(tmp_path.iterdir())
    assert not (tmp_path / "r.json").exists()
