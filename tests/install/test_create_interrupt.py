"""Ctrl-C during create: before the swap the old env is as it was; right after the swap (while the old env is
being removed) create says the new env is in place — never "is as it was" about an env it just replaced.
Also: the lock and the manifest it writes get the umask's mode."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from fixturegen.conda_channel import build_channel, write_fixture_profile


def _run(args, env, extra=None):
    full = dict(os.environ, **env, **(extra or {}))
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True, env=full,
                          timeout=180)


def test_ctrl_c_right_after_the_swap_reports_the_new_env(tmp_path):
    build_channel(tmp_path / "channel")
    write_fixture_profile(tmp_path / "lockfiles", tmp_path / "channel")
    env = {"ENVBUILD_LOCKFILES": str(tmp_path / "lockfiles"), "ENVBUILD_CACHE_DIR": str(tmp_path / "cache")}
    target = tmp_path / "env"
    old_umask = os.umask(0o022)
    try:
        assert _run(["lock"], env).returncode == 0
        assert _run(["create", "--prefix", str(target)], env).returncode == 0
    finally:
        os.umask(old_umask)
    # files create and lock write honour the umask (a non-root reader can read a root-built env's manifest)
    for written in (tmp_path / "lockfiles" / "fx" / "conda-lock.yml", target / "envbuild" / "manifest.json"):
        assert stat.S_IMODE(written.stat().st_mode) == 0o644, written
    old_key = json.loads((target / "envbuild" / "manifest.json").read_text())["lock_key"]
    profile = tmp_path / "lockfiles" / "fx" / "profile.toml"
    profile.write_text(profile.read_text().replace('FIXTURE_MARK = "a"', 'FIXTURE_MARK = "b"'))

    r = _run(["create", "--prefix", str(target)], env, {"ENVBUILD_TEST_KILL_AT": "swap",
                                                          "ENVBUILD_TEST_KILL_SIGNAL": "INT"})
    assert r.returncode == 130, r.stderr
    assert "is as it was" not in r.stderr and "the new env was put in place" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    new = json.loads((target / "envbuild" / "manifest.json").read_text())
    assert new["lock_key"] != old_key and 'export FIXTURE_MARK=b' in (target / "etc/conda/activate.d/envbuild.sh").read_text()

    r = _run(["create", "--prefix", str(target)], env, {"ENVBUILD_TEST_KILL_AT": "conda",
                                                          "ENVBUILD_TEST_KILL_SIGNAL": "INT"})
    assert r.returncode == 0 and "nothing to do" in r.stderr  # already built from these locks
