"""What `envbuild lock` shows while it runs (issue 17: `lock --only pip` was silent for 42 s).

In a pipe: one flushed line as each phase starts and ends, in order, uv's own summary passed through, a
`still running` line while the index keeps uv waiting; stdout holds only the results. `--quiet`: no phase
line. In a terminal: a live line (spinner, ticking elapsed time) that is redrawn in place.
"""
from __future__ import annotations

import re
import threading
import time

import pytest

from fixturegen.e2e import make_pip_world
from fixturegen.wheels import serve
from progress_run import Streamed, in_pty, phase_lines


@pytest.fixture(scope="module")
def pip_world(tmp_path_factory):
    return make_pip_world(tmp_path_factory.mktemp("lockprogress"))


def _env(world, tmp_path, **extra):
    return {"ENVBUILD_LOCKFILES": str(world.lockfiles), "ENVBUILD_CACHE_DIR": str(tmp_path / "cache"), **extra}


def test_phase_lines_stream_while_uv_waits_on_the_index(pip_world, tmp_path):
    hold = threading.Event()
    with serve(pip_world.index_dir, hold=hold) as url:
        pip_world.write_profile(url)
        run = Streamed(["lock"], _env(pip_world, tmp_path, ENVBUILD_PROGRESS_INTERVAL="0.3"))
        started = run.wait_for("lock: fx: resolve the pip layer (1 requirements, uv) ...")
        assert run.alive(), "the start line must arrive while the phase runs, not at exit"
        beat = run.wait_for("still running")  # the index holds uv: the log is not silent meanwhile
        assert beat.startswith("lock: fx: resolve the pip layer") and run.alive()
        assert "resolve the pip layer (1 requirements, uv): done" not in " ".join(run.lines)
        hold.set()
        rc, out, lines = run.finish()
    assert rc == 0, lines
    phases = phase_lines(lines, "lock")
    order = ["lock: fx: read the profile: done in",
             "lock: fx: solve the conda layer for linux-64 (py-rattler) ...",
             "lock: fx: solve the conda layer for linux-64 (py-rattler): done in",
             "lock: fx: resolve the pip layer (1 requirements, uv) ...",
             "lock: fx: resolve the pip layer (1 requirements, uv): uv: Resolved 2 packages",
             "lock: fx: resolve the pip layer (1 requirements, uv): done in",
             "lock: fx: write the lockfiles ...", "lock: fx: write the lockfiles: done in"]
    at = [next(i for i, ln in enumerate(phases) if ln.startswith(want)) for want in order]
    assert at == sorted(at), phases
    assert re.search(r"solve the conda layer for linux-64 \(py-rattler\): done in [0-9.]+ s \(6 packages\)$",
                     "\n".join(phases), re.M), phases
    assert re.search(r"resolve the pip layer .*: done in [0-9.]+ s \(2 pins\)$", "\n".join(phases), re.M), phases
    # stdout is for scripts: the result line, no progress text
    assert out.splitlines() == [f"fx: wrote conda-lock.yml, environment.compat.yml, environment.yml, pylock.toml, "
                                f"requirements.lock.txt, virtual-packages.yml in {pip_world.lockfiles / 'fx'}"]


def test_quiet_prints_no_phase_line_and_only_pip_is_locked_with_only_pip(pip_world, tmp_path):
    with serve(pip_world.index_dir) as url:
        pip_world.write_profile(url)
        env = _env(pip_world, tmp_path)
        quiet = Streamed(["lock", "--quiet"], env)
        rc, out, lines = quiet.finish()
        assert rc == 0, lines
        assert lines == [] and out.startswith("fx: ")
        only = Streamed(["lock", "--only", "pip"], env)
        rc, out, lines = only.finish()
    assert rc == 0, lines
    phases = phase_lines(lines, "lock")
    assert not any("conda layer" in ln for ln in phases), phases
    assert any(ln.startswith("lock: fx: resolve the pip layer") and "done in" in ln for ln in phases), phases


def test_check_says_what_it_checks_on_stderr_and_keeps_stdout_to_the_verdict(pip_world, tmp_path):
    with serve(pip_world.index_dir) as url:
        pip_world.write_profile(url)
        env = _env(pip_world, tmp_path)
        assert Streamed(["lock", "-q"], env).finish()[0] == 0
        rc, out, lines = Streamed(["lock", "--check"], env).finish()
    assert rc == 0 and out == "fx: fresh (re-resolved: the same bytes)\n", (out, lines)
    phases = phase_lines(lines, "lock")
    assert re.fullmatch(r"lock: fx: check the locks' inputs against the profile: done in [0-9.]+ s \(inputs match\)",
                        phases[0]), lines
    assert any(ln.startswith("lock: fx: resolve the pip layer") and "done in" in ln for ln in phases[1:]), lines


def test_a_terminal_gets_a_live_line_with_a_ticking_time(pip_world, tmp_path):
    hold = threading.Event()
    seen = []

    def release_later(text: str) -> None:  # uv waits on the index 1.5 s after the terminal shows its phase
        if not seen and "resolve the pip layer" in text:
            seen.append(time.monotonic())
        if seen and time.monotonic() - seen[0] > 1.5:
            hold.set()

    with serve(pip_world.index_dir, hold=hold) as url:
        pip_world.write_profile(url)
        rc, out, tty = in_pty(["lock"], _env(pip_world, tmp_path), watch=release_later)
    assert rc == 0, tty
    assert "\x1b[2K" in tty or "\x1b[1A" in tty, tty  # redrawn in place (erase line / cursor up)
    assert "(py-rattler) ...\n" not in tty.replace("\r", "")  # the pipe's start lines are not used on a terminal
    shown = set(re.findall(r"resolve the pip layer \(1 requirements, uv\)[^\r\n]*?([0-9]+\.[0-9]+) s", tty))
    assert len(shown) >= 5, shown  # the elapsed time moved while uv waited
    assert "lock: fx: resolve the pip layer (1 requirements, uv): done in" in tty
    assert out.startswith("fx: wrote ")  # stdout is a pipe here: the results only
    assert "\x1b" not in out
