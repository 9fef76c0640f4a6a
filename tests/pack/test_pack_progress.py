"""What `envbuild pack` shows while it runs: each part of the bundle as a phase with files, bytes and rate,
flushed as it happens; `--quiet` prints the summary line only; stdout holds the summary and nothing else."""
from __future__ import annotations

import re
import threading

from fixturegen.e2e import make_pip_world
from fixturegen.wheels import serve
from progress_run import Streamed, phase_lines

WHEELS = "pack: pip: fetch + verify 2 wheels -> pypi/"


def test_pack_phases_stream_in_order_and_quiet_has_none(tmp_path):
    world = make_pip_world(tmp_path / "world")
    hold = threading.Event()
    hold.set()
    env = {"ENVBUILD_LOCKFILES": str(world.lockfiles), "ENVBUILD_CACHE_DIR": str(tmp_path / "cache"),
           "ENVBUILD_PROGRESS_INTERVAL": "0.3"}
    with serve(world.index_dir, hold=hold) as url:
        world.write_profile(url)
        assert Streamed(["lock", "-q"], env).finish()[0] == 0
        hold.clear()  # the wheel downloads wait on the index
        run = Streamed(["pack", "-o", str(tmp_path / "fx.tar")], env)
        run.wait_for(f"{WHEELS} ...")
        assert run.alive() and not (tmp_path / "fx.tar").exists()
        assert run.wait_for("still running").startswith(f"{WHEELS}: still running")
        hold.set()
        rc, out, lines = run.finish()
        assert rc == 0, lines
        quiet = Streamed(["pack", "-q", "-o", str(tmp_path / "fx-q.tar")], env).finish()
    phases = phase_lines(lines, "pack")
    order = ["pack: read the profile and check its locks are fresh: done in",
             "pack: conda: fetch + verify 5 archives for linux-64 (main) ...",
             "pack: conda: fetch + verify 5 archives for linux-64 (main): done in",
             "pack: conda: copy into channel/ and index it: done in",
             "pack: conda: fetch + verify 1 archives for linux-64 (compat): done in",
             f"{WHEELS} ...", f"{WHEELS}: done in", "pack: hash the members into the manifest: done in",
             f"pack: write {tmp_path / 'fx.tar'}: done in"]
    at = [next((i for i, ln in enumerate(phases) if ln.startswith(want)), -1) for want in order]
    assert -1 not in at and at == sorted(at), phases
    assert re.search(rf"^{re.escape(WHEELS)}: done in [0-9.]+ s \(2/2 wheels, [0-9.]+ KiB, [0-9.]+ \w+/s\)$",
                     "\n".join(phases), re.M), phases
    assert re.search(r"^pack: write .*fx\.tar: done in [0-9.]+ s \(\d+ members, [0-9.]+ KiB", "\n".join(phases), re.M)
    assert out.startswith("wrote ") and len(out.splitlines()) == 1  # stdout: the summary only
    rc, qout, qlines = quiet
    assert rc == 0 and qout.startswith("wrote ") and phase_lines(qlines, "pack") == [], qlines
