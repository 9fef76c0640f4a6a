"""What `envbuild create` shows while it runs: each phase as it starts and ends, in pipeline order, with
its time and size, flushed as it happens (a CI or Slurm log sees the phase that runs now); uv's own lines
for the pip layer; `--quiet` keeps the plan, the gate and the closing line only; a terminal gets a live
line with a bar. Nothing goes to stdout."""
from __future__ import annotations

import re
import threading

import pytest

from fixturegen.e2e import make_pip_world
from fixturegen.wheels import serve
from progress_run import Streamed, in_pty, phase_lines

PIP_PHASE = "create: pip layer (uv, --require-hashes --no-deps)"


@pytest.fixture
def locked(tmp_path):
    """A conda + pip profile, locked against a loopback index that stays up (held open when `hold` is cleared)."""
    world = make_pip_world(tmp_path / "world")
    hold = threading.Event()
    hold.set()
    with serve(world.index_dir, hold=hold) as url:
        world.write_profile(url)
        env = {"ENVBUILD_LOCKFILES": str(world.lockfiles), "ENVBUILD_CACHE_DIR": str(tmp_path / "cache")}
        rc, _, lines = Streamed(["lock", "-q"], env).finish()
        assert rc == 0, lines
        yield {"env": env, "hold": hold, "tmp": tmp_path}


def test_phases_in_order_each_flushed_while_the_next_one_runs(locked):
    locked["hold"].clear()  # uv's wheel downloads wait on the index: create sits in its pip phase
    run = Streamed(["create", "--prefix", str(locked["tmp"] / "env")], dict(locked["env"], ENVBUILD_PROGRESS_INTERVAL="0.3"))
    run.wait_for(f"{PIP_PHASE} ...")
    assert run.alive()
    assert any(re.match(r"create: fetch \+ verify 6 conda archives: done in [0-9.]+ s \(6/6 archives, 4\.\d KiB of "
                        r"4\.\d KiB, [0-9.]+ \w+/s\)$", ln) for ln in run.lines), run.lines  # count, bytes, rate
    beat = run.wait_for("still running")
    assert beat.startswith(f"{PIP_PHASE}: still running") and run.alive()
    assert not any("doctor stack checks" in ln for ln in run.lines)  # nothing printed ahead of the work
    locked["hold"].set()
    rc, out, lines = run.finish()
    assert rc == 0, lines
    assert out == ""  # create keeps stdout clean
    phases = phase_lines(lines, "create")
    order = ["create: read the profile and its locks: done in",
             "create: fetch + verify 6 conda archives ...", "create: fetch + verify 6 conda archives: done in",
             "create: link 6 conda packages (rattler) ...", "create: link 6 conda packages (rattler): done in",
             f"{PIP_PHASE} ...", f"{PIP_PHASE}: uv: Installed 2 packages", f"{PIP_PHASE}: done in",
             "create: doctor stack checks on the staged env ...", "create: doctor stack checks on the staged env: done in",
             "create: relocate paths to", "create: activation scripts: done in",
             "create: manifest: hash the installed files: done in", "create: swap into"]
    at = [next((i for i, ln in enumerate(phases) if ln.startswith(want)), -1) for want in order]
    assert -1 not in at and at == sorted(at), phases
    assert re.search(rf"^{re.escape(PIP_PHASE)}: done in [0-9.]+ s \(2 wheels\)$", "\n".join(phases), re.M), phases
    assert any(ln.startswith("created ") for ln in lines)


def test_quiet_keeps_the_plan_and_the_closing_line_without_phase_lines(locked):
    rc, out, lines = Streamed(["create", "--quiet", "--prefix", str(locked["tmp"] / "env")], locked["env"]).finish()
    assert rc == 0, lines
    assert phase_lines(lines, "create") == [] and not any("still running" in ln for ln in lines)
    assert lines[0].startswith("envbuild create: profile fx") and any(ln.startswith("created ") for ln in lines)
    assert any("doctor stack checks:" in ln for ln in lines)


def test_a_terminal_gets_a_live_line_with_a_bar(locked):
    rc, out, tty = in_pty(["create", "--prefix", str(locked["tmp"] / "env")], locked["env"])
    assert rc == 0, tty
    assert "\x1b[2K" in tty or "\x1b[1A" in tty, tty  # the live line is redrawn in place
    assert "━" in tty  # a bar for the archives/packages
    assert "create: link 6 conda packages (rattler): done in" in tty
    assert "conda archives ...\r\n" not in tty  # the pipe's start lines are not used on a terminal
    assert out == ""
