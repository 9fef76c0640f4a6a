"""A doctor stopped from outside — Ctrl-C, `timeout`/Slurm's SIGTERM, a closed terminal's SIGHUP, or SIGKILL —
leaves no process behind, and (except for SIGKILL, which nothing can catch) writes the report of what it had
finished with the interrupted check marked, exiting 128 + the signal.

The doctor here is the real CLI (envbuild.cli.main in its own process) running one probe check that launches
a real torch CPU payload (checks/nccl_churn.py, two gloo ranks); the check is registered by a small driver
script, since no shipped check runs without a GPU. Every process the run starts inherits a marker variable,
so after each kill /proc tells whether anything survived.
"""
import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from typing import Optional

import pytest

from procmark import cmdline, marked

DRIVER = textwrap.dedent('''
    import sys
    from envbuild.doctor.registry import check
    from envbuild.report.model import Result, Status

    @check("comm.stop_probe", "comm", "a long gloo churn, to be interrupted", modes=("quick",))
    def stop_probe(ctx):
        from envbuild.doctor.launcher import launch
        out = launch("comm_nccl_churn.py", 2, python=sys.executable, gpus=None, backend="gloo", deadline_s=120,
                     args=["--cycles", "400", "--groups", "4", "--numel", "256"])
        return Result("comm.stop_probe", "comm", Status.PASS if out.ok else Status.FAIL, "churned")

    @check("comm.stop_first", "comm", "a check that finishes before the probe", modes=("quick",))
    def stop_first(ctx):
        return Result("comm.stop_first", "comm", Status.PASS, "done before the stop")

    from envbuild.cli import main
    argv = ["doctor", "--check", "comm.stop_first", "--check", "comm.stop_probe", "--json", sys.argv[1]]
    if len(sys.argv) > 2:  # "warm": the probe's ranks come from a warm pool, as on a GPU node
        from envbuild.doctor import warm
        with warm.pool(sys.executable, 2, None):
            main(argv)
    else:
        main(argv)
''')


def probe_rank(marker: str, payload: str = "comm_nccl_churn.py") -> Optional[str]:
    """"cold" or "warm" once a rank of the probe runs, else None. A cold rank is a process started as `payload`; a
    warm one is an interpreter of the pool (checks/_warm.py) that the launcher has handed the launch: it keeps
    `_warm.py` as its command line for life and is known by its stdout, which it points at the run directory's
    rank<k>.stdout.log on taking the job. Waiting for the pool's interpreters alone is not enough: the pool starts
    them before the doctor has even parsed its arguments, and a stop that landed in that start-up (0.42-1.02 s
    after them for three of the eight seeded moments, longer under load) hit a doctor that had not reached the
    probe or not yet installed its signal handlers."""
    for pid in marked(marker):
        line = cmdline(pid)
        if payload in line:
            return "cold"
        try:
            out = os.path.basename(os.readlink(f"/proc/{pid}/fd/1"))
        except OSError:  # gone
            continue
        if "_warm.py" in line and re.fullmatch(r"rank\d+\.stdout\.log", out):
            return "warm"
    return None


def finish(proc: subprocess.Popen, seconds: float):
    """proc's (stdout, stderr) once it ends. One that has not ended in `seconds` hung: it gets SIGABRT, which
    `-X faulthandler` turns into every thread's Python stack on its stderr, then its whole session is killed (a
    doctor left running would hold the next tests' CPUs and files) and the test fails with that stack."""
    try:
        return proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # still there: killed below, and what it wrote by then is read after
            out, err = None, None
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.kill()
        late_out, late_err = proc.communicate()
        err = err if err is not None else late_err or ""
        pytest.fail(f"the doctor did not end within {seconds:g} s; its threads when it was aborted:\n{err[-6000:]}")


def wait_gone(marker: str, seconds: float):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        left = marked(marker)
        if not left:
            return []
        time.sleep(0.1)
    return marked(marker)


def start(tmp_path, torch_env, k, warm=False):
    python, env = torch_env
    marker = uuid.uuid4().hex
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    report = tmp_path / f"report{k}.json"
    proc_env = {**os.environ, **env, "ENVBUILD_TEST_MARK": marker}
    proc = subprocess.Popen([python, "-X", "faulthandler", str(driver), str(report)] + (["warm"] if warm else []),
                            env=proc_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    end = time.monotonic() + 90
    while (kind := probe_rank(marker)) is None:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "the probe's ranks never started"
        time.sleep(0.05)
    assert kind == ("warm" if warm else "cold"), f"the probe's rank started {kind}"
    return proc, marker, report


@pytest.mark.slow
@pytest.mark.parametrize("warm,stops", [(False, 20), (True, 8)], ids=["cold", "warm"])
def test_stop_signals_at_random_moments_leave_nothing_and_write_the_report(tmp_path, torch_env, warm, stops):
    """20 stops: SIGINT, SIGTERM, SIGHUP and SIGKILL in turn, each at a random moment of the probe (rank start-up
    and torch import, gloo rendezvous, the churn loop). Warm: 8 more with a warm pool (envbuild/doctor/warm.py)
    whose interpreters may be importing torch, waiting, or running the probe when the signal comes."""
    rng = random.Random(1305)
    sigs = ([signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL] * 5)[:stops]
    for k, sig in enumerate(sigs):
        proc, marker, report = start(tmp_path, torch_env, k, warm=warm)
        time.sleep(rng.uniform(0.0, 4.0))
        os.kill(proc.pid, sig)
        out, err = finish(proc, 60)
        left = wait_gone(marker, 10.0)
        assert left == [], f"stop {k} ({sig.name}): processes left {left}"
        if sig == signal.SIGKILL:
            assert proc.returncode == -signal.SIGKILL
            continue
        assert proc.returncode == 128 + sig, (sig.name, proc.returncode, err[-2000:])
        assert "Traceback" not in err, err[-2000:]
        data = json.loads(report.read_text())
        assert data["interrupted"]["signal"] == sig.name and data["exit_code"] == 128 + sig
        by_id = {r["check_id"]: r for r in data["results"]}
        assert by_id["comm.stop_first"]["status"] == "pass"
        stopped = by_id["comm.stop_probe"]
        assert stopped["status"] == "skip" and f"interrupted by {sig.name}" in stopped["summary"]
        assert "comm_nccl_churn.py: rank" in stopped["summary"], stopped["summary"]
        assert f"STOPPED by {sig.name}" in out + err


def test_progress_prints_one_flushed_line_per_check_in_a_pipe(tmp_path):
    """In a pipe every finished check is one plain line with its verdict and time, before the final table; the
    lines count 1, 2, ... and the last reads N/N. The first line's N is only a plan: it comes from the row counts of
    this node's last run (envbuild/doctor/progress_rows.py), which another run — a bundle's two GPUs, say — may have
    left higher, and shrinks as checks print fewer rows (a fixed N failed this test after such a run)."""
    (tmp_path / "cache" / "envbuild").mkdir(parents=True)
    # more rows than any node prints for these checks (one per GPU at most), so the plan is too high everywhere
    (tmp_path / "cache" / "envbuild" / "doctor-durations.json").write_text(
        json.dumps({"static.rows": {"node.ecc": 400, "node.pcie_link": 300}}))
    proc = subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--check", "node.*"],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("[")]
    assert len(lines) >= 5, proc.stderr
    assert all(any(w in ln for w in ("PASS", "WARN", "FAIL", "skip", "ERROR")) and " s " in ln + " " for ln in lines)
    rows = [int(ln[1:ln.index("/")]) for ln in lines]
    assert rows == list(range(1, len(lines) + 1)), lines
    assert int(lines[0].split("/")[1].split("]")[0]) > len(lines)  # planned from the last run's rows
    assert lines[-1].startswith(f"[{len(lines)}/{len(lines)}]"), lines[-1]


def test_a_stop_signal_after_the_checks_still_ends_cleanly(tmp_path):
    """A signal that lands once the checks are done — while the report is assembled, written or printed — used to
    escape as a traceback with exit 1 (benchmarks/stop_doctor.py found it: 2 of 4 early stops of a static run).
    Now the report is finished and the doctor exits 128 + the signal; a run the signal missed exits as usual."""
    rng = random.Random(17)
    sigs = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP] * 4
    for k, sig in enumerate(sigs):
        report = tmp_path / f"r{k}.json"
        proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "envbuild", "doctor", "--json", str(report)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        time.sleep(rng.uniform(0.15, 0.7))
        sent = proc.poll() is None
        if sent:
            proc.send_signal(sig)
        out, err = finish(proc, 120)
        assert "Traceback" not in err, (sig.name, err[-1500:])
        if not sent:
            assert proc.returncode in (0, 1)
            continue
        # killed by the default handler before the doctor installed its own, or stopped by it
        assert proc.returncode in (-sig, 128 + sig, 0, 1), (sig.name, proc.returncode, err[-800:])
        if proc.returncode == 128 + sig and report.exists():
            data = json.loads(report.read_text())
            # stopped during the checks: the interrupted report; stopped after them: the whole report
            assert data.get("interrupted") or data["results"], "a late stop must leave the complete report"


def test_a_stop_inside_the_import_machinery_is_raised_just_after_it():
    """Stopped raised inside importlib's own code can leave the global import lock held (an exception between
    `_imp.acquire_lock()` and its `try:`): every later import in any thread then hangs, as a doctor did on a SIGHUP
    0.12 s into its run. A signal that finds the main thread there is delivered again moments later and raised
    outside it; the first signal still decides the exit code."""
    from envbuild.doctor.interrupt import Stopped, stop_on_signals

    inside = {"sys": sys}
    exec(compile("def here():\n    return sys._getframe()\n", "<frozen importlib._bootstrap>", "exec"), inside)
    with stop_on_signals() as state:
        state.handle(signal.SIGHUP, inside["here"]())  # as if the signal had landed there: nothing raised yet
        assert state.received == []
        with pytest.raises(Stopped) as stopped:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                time.sleep(0.01)
        assert stopped.value.signum == signal.SIGHUP and state.first == signal.SIGHUP
