"""What a user sees when a wheel on the index no longer matches the pip lock: `envbuild create` refuses it by
name, exits 2, and the env already at the target is left exactly as it was."""
from __future__ import annotations

import os
import subprocess
import sys

from fixturegen.e2e import make_world
from fixturegen.wheels import serve, tamper


def run(args, env):
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True,
                          env=dict(os.environ, **env, COLUMNS="300"), timeout=300)


def test_tampered_wheel_on_the_index_is_refused_and_the_old_env_kept(tmp_path):
    world = make_world(tmp_path, c_functions=2)
    env = {"ENVBUILD_CACHE_DIR": str(tmp_path / "cache"), "ENVBUILD_LOCKFILES": str(world.lockfiles)}
    target = tmp_path / "envs" / "fx"
    with serve(world.index_dir) as base:
        world.write_profile(base)
        assert run(["lock"], env).returncode == 0
        first = run(["create", "--prefix", str(target)], env)
        assert first.returncode == 0, first.stderr
        manifest = (target / "envbuild" / "manifest.json").read_bytes()

        tamper(world.index_dir / "beta" / "beta-2.0-py3-none-any.whl")
        # a cold cache: uv's cache still holds the locked bytes of beta (a warm create installs those)
        again = run(["create", "--prefix", str(target), "--force"], {**env, "ENVBUILD_CACHE_DIR": str(tmp_path / "cold")})
    assert again.returncode == 2, again.stderr
    message = " ".join(again.stderr.split())
    assert "beta-2.0-py3-none-any.whl: sha256" in message and "is not the locked hash of beta==2.0" in message
    assert (target / "envbuild" / "manifest.json").read_bytes() == manifest


def test_sigkill_in_the_pip_git_and_build_phases_then_rerun_finishes(tmp_path):
    """Killed right after each of the layers this module tests, a rerun resumes and the env is complete."""
    world = make_world(tmp_path, c_functions=2)
    env = {"ENVBUILD_CACHE_DIR": str(tmp_path / "cache"), "ENVBUILD_LOCKFILES": str(world.lockfiles)}
    with serve(world.index_dir) as base:
        world.write_profile(base)
        assert run(["lock"], env).returncode == 0
        for phase in ("pip", "git", "builds"):
            target = tmp_path / "envs" / phase
            killed = run(["create", "--prefix", str(target)], {**env, "ENVBUILD_TEST_KILL_AT": phase})
            assert killed.returncode == -9, killed.stderr
            assert not target.exists()
            again = run(["create", "--prefix", str(target)], env)
            assert again.returncode == 0, again.stderr
            probe = subprocess.run([str(target / "bin" / "python"), "-c", "import alpha, fastext; print('ok')"],
                                   capture_output=True, text=True)
            assert probe.stdout.strip() == "ok", (phase, probe.stderr)
            assert (target / "src" / "lib" / "pkg" / "extra.py").read_text() == "EXTRA = 2\n", phase
