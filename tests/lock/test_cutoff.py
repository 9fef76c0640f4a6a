"""A re-lock is byte-identical at any later time: the upload cutoff is a moment already past, written into the
lock, the existing lock's versions are kept where they still fit, and `lock --check` re-resolves to prove it (the
inputs alone cannot see a change on the index)."""
from __future__ import annotations

import datetime as dt
import subprocess
import sys

from fixturegen.e2e import make_pip_world
from fixturegen.wheels import make_wheel, serve, write_simple_index


def _lock(world, *args):
    return subprocess.run([sys.executable, "-m", "envbuild", "lock", "--only", "pip", "--lockfiles",
                           str(world.lockfiles), *args], capture_output=True, text=True, timeout=300)


def _profile(world, url, cutoff=None):
    folder = world.write_profile(url)
    if cutoff:
        path = folder / "profile.toml"
        path.write_text(path.read_text().replace('requirements = ["alpha"]',
                                                 f'requirements = ["alpha"]\nexclude_newer = "{cutoff}"'))
    return folder


def _iso(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_cutoff_in_the_future_is_refused_before_anything_is_written(tmp_path):
    world = make_pip_world(tmp_path)
    future = _iso(dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=30))
    with serve(world.index_dir) as url:
        folder = _profile(world, url, future)
        r = _lock(world)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"exclude_newer = {future} is in the future" in r.stderr and "Traceback" not in r.stderr
    assert not (folder / "requirements.lock.txt").exists()


def test_without_a_cutoff_the_lock_records_the_moment_it_was_made_and_a_relock_keeps_it(tmp_path):
    world = make_pip_world(tmp_path)
    w = tmp_path / "w2"
    alpha, beta = make_wheel(w, "alpha", "1.0", requires=["beta"]), make_wheel(w, "beta", "2.0")
    with serve(world.index_dir) as url:
        folder = _profile(world, url)
        assert _lock(world).returncode == 0
        lock = folder / "requirements.lock.txt"
        first = lock.read_bytes()
        recorded = next(ln for ln in first.decode().splitlines() if ln.startswith("# exclude-newer: "))
        made = dt.datetime.strptime(recorded.split(": ", 1)[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
        assert abs((dt.datetime.now(dt.timezone.utc) - made).total_seconds()) < 300
        # beta 3.0 appears after the lock was made: neither a check nor a re-lock may pick it up
        newer = make_wheel(w, "beta", "3.0")
        write_simple_index(world.index_dir, [alpha, beta, newer], upload_times={
            alpha.name: "2026-01-01T00:00:00Z", beta.name: "2026-01-01T00:00:00Z",
            newer.name: _iso(made + dt.timedelta(hours=1))})
        check = _lock(world, "--check")
        relock = _lock(world)
    assert check.returncode == 0 and "fx: fresh (re-resolved: the same bytes)" in check.stdout, check.stdout
    assert relock.returncode == 0 and lock.read_bytes() == first


def test_a_file_dated_before_the_cutoff_that_appears_later_changes_no_byte_until_upgrade(tmp_path):
    """The December case: an index shows a file dated before the cutoff only after the lock was made (this
    project's PyPI did so with filelock 4.3.2 and httpcore2 2.17.0). A re-lock and a check keep the locked
    version (the existing pylock.toml is uv's preference); `--upgrade` takes the newer one."""
    world = make_pip_world(tmp_path)
    w = tmp_path / "w2"
    alpha, beta = make_wheel(w, "alpha", "1.0", requires=["beta"]), make_wheel(w, "beta", "2.0")
    late = make_wheel(w, "beta", "2.1")
    times = {alpha.name: "2026-01-01T00:00:00Z", beta.name: "2026-01-01T00:00:00Z"}
    write_simple_index(world.index_dir, [alpha, beta], upload_times=times)
    with serve(world.index_dir) as url:
        folder = _profile(world, url, "2026-06-01T00:00:00Z")
        assert _lock(world).returncode == 0
        lock = folder / "requirements.lock.txt"
        before = lock.read_bytes()
        write_simple_index(world.index_dir, [alpha, beta, late], upload_times={**times, late.name: "2026-05-01T00:00:00Z"})
        check = _lock(world, "--check")
        relock = _lock(world)
        kept = lock.read_bytes()
        both = _lock(world, "--check", "--upgrade")
        upgrade = _lock(world, "--upgrade")
        upgraded = lock.read_text()
        after = _lock(world, "--check")
    assert check.returncode == 0 and "fx: fresh (re-resolved: the same bytes)" in check.stdout, check.stdout
    assert relock.returncode == 0 and kept == before
    assert both.returncode == 2 and "--upgrade goes without --check" in both.stderr
    assert upgrade.returncode == 0 and "beta==2.1" in upgraded and "beta==2.0" not in upgraded, upgrade.stderr
    assert after.returncode == 0 and "fresh" in after.stdout


def test_check_re_resolves_and_sees_what_the_inputs_cannot_show(tmp_path):
    """The locked version left the index (deleted, or now dated after the cutoff): the inputs still match, a
    re-resolve cannot keep it."""
    world = make_pip_world(tmp_path)
    w = tmp_path / "w2"
    alpha, beta = make_wheel(w, "alpha", "1.0", requires=["beta"]), make_wheel(w, "beta", "2.0")
    other = make_wheel(w, "beta", "2.1")
    times = {alpha.name: "2026-01-01T00:00:00Z", beta.name: "2026-01-01T00:00:00Z", other.name: "2025-12-01T00:00:00Z"}
    write_simple_index(world.index_dir, [alpha, beta, other], upload_times=times)
    with serve(world.index_dir) as url:
        folder = _profile(world, url, "2026-06-01T00:00:00Z")
        assert _lock(world).returncode == 0
        before = (folder / "requirements.lock.txt").read_bytes()
        assert b"beta==2.1" in before
        write_simple_index(world.index_dir, [alpha, beta], upload_times=times)
        fast = _lock(world, "--check", "--inputs-only")
        full = _lock(world, "--check")
    assert fast.returncode == 0 and "fresh (inputs only: not re-resolved)" in fast.stdout
    assert full.returncode == 1 and "fx: STALE" in full.stdout
    assert "-beta==2.1" in full.stdout and "+beta==2.0" in full.stdout
    assert (folder / "requirements.lock.txt").read_bytes() == before  # --check never writes


def test_inputs_only_needs_check(tmp_path):
    world = make_pip_world(tmp_path)
    with serve(world.index_dir) as url:
        _profile(world, url)
        r = _lock(world, "--inputs-only")
    assert r.returncode == 2 and "--inputs-only goes with --check" in r.stderr
