"""Nothing envbuild starts outlives its deadline: the node commands the checks run (journalctl, dmesg, ...) are
killed with their whole process group, and a node where they hang is reported as such, not passed.

The commands are wrapper scripts on PATH that fork a sleeper and wait, as a site's shim around journalctl may;
subprocess.run's own timeout killed only the wrapper, and its sleeper (holding the output pipe) stayed behind."""
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from procmark import marked  # noqa: E402

HANG = "#!/bin/sh\nsleep 300 &\nsleep 300\n"


def hanging_bin(tmp_path, *names):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in names:
        (bin_dir / name).write_text(HANG)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def test_a_node_whose_kernel_log_commands_hang_is_drained_and_nothing_outlives_them(tmp_path):
    bin_dir = hanging_bin(tmp_path, "journalctl", "dmesg")
    mark = f"hung-journal-{os.getpid()}"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURMD_NODENAME": "gpu-h1",
           "ENVBUILD_TEST_MARK": mark}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--health-check", "--check", "node.kernel_log"],
                          capture_output=True, text=True, env=env, timeout=120)
    took = time.monotonic() - t0
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = [l for l in proc.stdout.splitlines() if l.startswith("scontrol")]
    assert "node.kernel_log: kernel log unreadable: journalctl-kernel: journalctl -k" in line
    assert "did not answer within 15 s" in line, line
    assert took < 50, took  # two 15 s deadlines, inside the health check's budget
    assert marked(mark) == [], "a hung command's child outlived its deadline"


def test_run_bounded_kills_a_wrapper_and_the_sleeper_it_forked():
    from envbuild.children import CommandHung, run_bounded

    mark = f"run-bounded-{os.getpid()}"
    env = {**os.environ, "ENVBUILD_TEST_MARK": mark}
    t0 = time.monotonic()
    try:
        run_bounded(["sh", "-c", "sleep 300 & sleep 300"], 0.5, env=env)
    except CommandHung as exc:
        assert str(exc) == "sh -c sleep 300 & sleep 300 did not finish within 0.5 s (killed with its child processes)"
    else:
        raise AssertionError("no CommandHung")
    assert time.monotonic() - t0 < 5
    assert marked(mark) == []
    # a command that ends on its own: what it left running in its group ends with it
    done = run_bounded(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo started"], 5, env=env)
    assert done.returncode == 0 and done.stdout == "started\n"
    time.sleep(0.2)
    assert marked(mark) == []
