"""SIGKILL `envbuild create` at random moments (seeded): no pip/git/compiler child survives it, and the next
run removes every temporary the killed one left (its /tmp scratch folders, half cache entries), then finishes."""
from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from fixturegen.e2e import make_world
from fixturegen.wheels import serve

# the issue asks for 20 (ENVBUILD_TEST_KILLS=20, measured for docs/hardening.md); CI runs 8 for its time budget
KILLS = int(os.environ.get("ENVBUILD_TEST_KILLS", "8"))


def _marked(mark: str) -> list:
    """Processes whose environment carries `mark` (create's children inherit it)."""
    found = []
    needle = f"ENVBUILD_TEST_MARK={mark}".encode()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if needle in Path(f"/proc/{name}/environ").read_bytes().split(b"\0"):
                    found.append(int(name))
            except OSError:
                pass
    return found


def _children(mark: str, create_pid: int, word: bytes = b"") -> list:
    out = []
    for pid in _marked(mark):
        try:
            if pid != create_pid and word in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            pass
    return out


def _temporaries(pids: set, caches) -> list:
    tmp = Path(tempfile.gettempdir())
    left = [p for p in tmp.iterdir() if (m := re.match(r"envbuild-(?:pip|build|git)-(\d+)-", p.name))
            and int(m.group(1)) in pids]
    for cache in caches:
        left += [p for p in Path(cache).rglob("*") if (".part-" in p.name or p.name.startswith(".tmp-"))]
    return left


def test_random_sigkills_leave_no_child_and_no_temporary(tmp_path):
    world = make_world(tmp_path, c_functions=150)
    caches = [tmp_path / "cache", tmp_path / "wheels"]
    env = dict(os.environ, ENVBUILD_LOCKFILES=str(world.lockfiles), ENVBUILD_CACHE_DIR=str(caches[0]),
               ENVBUILD_WHEEL_CACHE=str(caches[1]))
    target = tmp_path / "envs" / "fx"
    rng = random.Random(12)
    survivors, killed, with_children = [], set(), 0
    with serve(world.index_dir) as base:
        world.write_profile(base)
        assert subprocess.run([sys.executable, "-m", "envbuild", "lock"], env=env, capture_output=True).returncode == 0
        for k in range(KILLS):
            mark = uuid.uuid4().hex
            proc = subprocess.Popen([sys.executable, "-m", "envbuild", "create", "--prefix", str(target), "--force"],
                                    env=dict(env, ENVBUILD_TEST_MARK=mark), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            if k % 3 == 0:  # any moment
                time.sleep(rng.uniform(0.3, 4.0))
            else:  # while create has a child (any; or a source build's compiler, which no pipe ties to create)
                want = b"" if k % 3 == 1 else b"wheel"
                start = time.monotonic()
                while not _children(mark, proc.pid, want) and time.monotonic() - start < 60:
                    time.sleep(0.02)
                time.sleep(rng.uniform(0.0, 0.5))
            with_children += bool(_children(mark, proc.pid))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed.add(proc.pid)
            deadline = time.monotonic() + 3  # the watchdog: SIGTERM at once (2 s grace, then SIGKILL)
            while _marked(mark) and time.monotonic() < deadline:
                time.sleep(0.1)
            survivors += [(k, pid) for pid in _marked(mark)]
        final = subprocess.run([sys.executable, "-m", "envbuild", "create", "--prefix", str(target), "--force"],
                               env=env, capture_output=True, text=True, timeout=300)
    assert with_children >= KILLS // 2, "too few kills landed while create had children to prove anything"
    assert survivors == [], f"children outlived their killed create: {survivors}"
    assert final.returncode == 0, final.stderr[-800:]
    assert _temporaries(killed, caches) == []
    probe = subprocess.run([str(target / "bin" / "python"), "-c", "import alpha, fastext; print('ok')"],
                           capture_output=True, text=True)
    assert probe.stdout.strip() == "ok", probe.stderr


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_during_a_compile_stops_the_compiler_and_keeps_the_previous_env(tmp_path, sig, code):
    """Ctrl-C (SIGINT to the terminal's process group) or SIGTERM (scancel, timeout) while gcc compiles a source
    build: create exits 128+signal saying how to resume, no compiler outlives it, no lock file is left beside
    the target, and the env already at the target is untouched."""
    world = make_world(tmp_path, c_functions=400)
    env = dict(os.environ, ENVBUILD_LOCKFILES=str(world.lockfiles), ENVBUILD_CACHE_DIR=str(tmp_path / "cache"),
               ENVBUILD_WHEEL_CACHE=str(tmp_path / "wheels"))
    target = tmp_path / "envs" / "fx"
    with serve(world.index_dir) as base:
        world.write_profile(base)
        assert subprocess.run([sys.executable, "-m", "envbuild", "lock"], env=env, capture_output=True).returncode == 0
        first = subprocess.run([sys.executable, "-m", "envbuild", "create", "--prefix", str(target)], env=env,
                               capture_output=True, text=True, timeout=900)
        assert first.returncode == 0, first.stderr[-800:]
        manifest = (target / "envbuild" / "manifest.json").read_bytes()
        mark = uuid.uuid4().hex
        cold = dict(env, ENVBUILD_TEST_MARK=mark, ENVBUILD_WHEEL_CACHE=str(tmp_path / "cold"))  # compile again
        proc = subprocess.Popen([sys.executable, "-m", "envbuild", "create", "--prefix", str(target), "--force"],
                                env=cold, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        start = time.monotonic()
        while not _children(mark, proc.pid, b"cc1") and time.monotonic() - start < 300:
            time.sleep(0.05)
        assert _children(mark, proc.pid, b"cc1"), "the compiler never started"
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)  # a terminal signals the whole foreground group
        else:
            proc.send_signal(sig)  # scancel/timeout signal create alone
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err[-800:]
    assert "Traceback" not in err and "rerun the same command to resume" in err
    assert not (target.parent / ".fx.envbuild-lock").exists()
    deadline = time.monotonic() + 5
    while _marked(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _marked(mark) == [], "a compiler outlived the interrupted create"
    assert (target / "envbuild" / "manifest.json").read_bytes() == manifest
