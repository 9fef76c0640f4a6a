"""envbuild's pip layer never runs the pip of the Python envbuild is installed in (the issue: a stock venv's
pip 23.2.1 could not lock; CI upgraded pip and never saw it). Here that pip cannot even be imported, and
`envbuild lock --only pip` still locks and `create --backend venv` still builds: uv does both."""
from __future__ import annotations

import os
import subprocess
import sys

from fixturegen.conda_channel import FIXTURE_PROFILE
from fixturegen.wheels import make_wheel, serve, write_simple_index


def test_lock_and_venv_create_need_no_pip_in_envbuilds_python(tmp_path):
    shadow = tmp_path / "shadow" / "pip"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('this test hides pip from envbuild')\n")
    write_simple_index(tmp_path / "index", [make_wheel(tmp_path / "w", "alpha", "1.0")])
    folder = tmp_path / "lockfiles" / "stock"
    folder.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "shadow"), ENVBUILD_LOCKFILES=str(tmp_path / "lockfiles"),
               ENVBUILD_CACHE_DIR=str(tmp_path / "cache"))
    assert subprocess.run([sys.executable, "-c", "import pip"], env=env, capture_output=True).returncode != 0
    with serve(tmp_path / "index") as base:
        (folder / "profile.toml").write_text(
            FIXTURE_PROFILE.format(name="stock", channel=(tmp_path / "none").as_uri(), mark="s")
            + f'\n[recipe.pip]\nindexes = [{{ name = "i", url = "{base}" }}]\nrequirements = ["alpha"]\n')
        lock = subprocess.run([sys.executable, "-m", "envbuild", "lock", "--only", "pip"], env=env,
                              capture_output=True, text=True, timeout=300)
        assert lock.returncode == 0, lock.stderr
        made = subprocess.run([sys.executable, "-m", "envbuild", "create", "--backend", "venv", "--python",
                               sys.executable, "--prefix", str(tmp_path / "env")], env=env, capture_output=True,
                              text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    assert "alpha==1.0" in (folder / "requirements.lock.txt").read_text()
    assert (tmp_path / "env" / "lib").is_dir()
