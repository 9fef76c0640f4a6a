"""`envbuild create --backend venv --python PATH`: a PyPI-only env on a given interpreter, built from the pip
lock alone (no conda-lock.yml, no channel), activated like a conda env; the wrong Python is refused first."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixturegen.conda_channel import FIXTURE_PROFILE
from fixturegen.wheels import make_wheel, serve, write_simple_index

PIP_ONLY = """
[recipe.pip]
indexes = [{{ name = "fixture", url = "{index}" }}]
requirements = ["alpha"]
exclude_newer = "2026-06-01T00:00:00Z"
"""


def envbuild(*args, env):
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, COLUMNS="300", **env))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("venvbackend")
    alpha = make_wheel(root / "w", "alpha", "1.0", requires=["beta"], console_scripts=["alpha-tool = alpha:main"],
                       module_text='__version__ = "1.0"\n\n\ndef main():\n    print("alpha-tool", __version__)\n')
    write_simple_index(root / "index", [alpha, make_wheel(root / "w", "beta", "2.0")])
    env = {"ENVBUILD_LOCKFILES": str(root / "lockfiles"), "ENVBUILD_CACHE_DIR": str(root / "cache")}
    with serve(root / "index") as base:
        folder = root / "lockfiles" / "pyonly"
        folder.mkdir(parents=True)
        (folder / "profile.toml").write_text(
            FIXTURE_PROFILE.format(name="pyonly", channel=(root / "nochannel").as_uri(), mark="v")
            + PIP_ONLY.format(index=base))
        r = envbuild("lock", "--only", "pip", env=env)  # no conda channel exists: only the pip layer is locked
        assert r.returncode == 0, r.stderr
        yield {"root": root, "env": env, "index": base}


def test_venv_env_from_the_pip_lock_alone(world):
    target = world["root"] / "envs" / "pyonly"
    r = envbuild("create", "--backend", "venv", "--python", sys.executable, "--prefix", str(target), env=world["env"])
    assert r.returncode == 0, r.stderr
    assert not (world["root"] / "lockfiles" / "pyonly" / "conda-lock.yml").exists()
    probe = subprocess.run([str(target / "bin" / "python"), "-c",
                            "import alpha, beta, sys; print(alpha.__version__, beta.__version__, sys.prefix)"],
                           capture_output=True, text=True)
    assert probe.stdout.split() == ["1.0", "2.0", str(target)], probe.stderr
    assert (target / "envbuild" / "manifest.json").is_file()
    assert sorted(p.name for p in target.parent.iterdir()) == ["pyonly"]  # no lock file or staging left beside it
    shell = subprocess.run(["bash", "-c", f'. "{target}/bin/activate" && echo "$FIXTURE_MARK $FOO_HOME"'],
                           capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert shell.stdout.split() == ["v", f"{target}/share/foodata"], shell.stderr
    again = envbuild("create", "--backend", "venv", "--python", sys.executable, "--prefix", str(target),
                     env=world["env"])
    assert again.returncode == 0 and "nothing to do" in again.stdout + again.stderr


def test_wrong_python_version_is_refused_before_anything_is_built(world, tmp_path):
    fake = tmp_path / "python3.99"
    fake.write_text("#!/bin/sh\necho 3.99\n")
    fake.chmod(0o755)
    target = tmp_path / "env"
    r = envbuild("create", "--backend", "venv", "--python", str(fake), "--prefix", str(target), env=world["env"])
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"--python {fake} is Python 3.99" in lines[0] and "needs Python 3.11" in lines[0]
    assert not target.exists() and not list(tmp_path.glob(".env.envbuild-*"))


def test_venv_backend_without_python_finds_one_of_the_profiles_version(world, tmp_path):
    """No --backend for a profile with a pip lock only: venv. No --python: a Python of the profile's version is looked for (PATH, pyenv); a pyenv shim of a version
    that is installed but not selected is passed over, since it cannot run."""
    shims = tmp_path / "shims"
    shims.mkdir()
    shim = shims / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    shim.write_text("#!/bin/sh\necho 'pyenv: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    pyenv = tmp_path / "pyenv"
    (pyenv / "versions").mkdir(parents=True)
    os.symlink(Path(sys.base_prefix), pyenv / "versions" / ("%d.%d.%d" % sys.version_info[:3]))
    env = {**world["env"], "PATH": f"{shims}:/usr/bin:/bin", "PYENV_ROOT": str(pyenv)}
    target = tmp_path / "env"
    r = envbuild("create", "--prefix", str(target), "--dry-run", env=env)  # no --backend: the profile has no conda lock
    assert r.returncode == 0, r.stderr
    assert "backend chosen: no conda-lock.yml, only a pip lock: --backend venv" in r.stderr
    found = pyenv / "versions" / ("%d.%d.%d" % sys.version_info[:3]) / "bin" / shim.name
    assert f"interpreter {found} (Python {sys.version_info[0]}.{sys.version_info[1]})" in r.stderr, r.stderr
    missing = envbuild("create", "--backend", "venv", "--python", "3.99", "--prefix", str(target), env=env)
    assert missing.returncode == 2 and "no working Python 3.99 found" in missing.stderr


@pytest.mark.parametrize("prefix", ["/proc/envbuild-x", "/proc/self/status/env"])
def test_an_unusable_prefix_is_one_line_before_anything_is_built(world, prefix):
    r = envbuild("create", "--backend", "venv", "--python", sys.executable, "--prefix", prefix, env=world["env"])
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("envbuild: error:")]
    assert len(lines) == 1 and f"prefix {prefix}:" in lines[0] and "Traceback" not in r.stderr


def test_create_shares_uvs_cache_and_its_manifest_holds_the_real_hashes(world, tmp_path):
    """Installed as uv installs: a plain `uv pip install` of the same lock afterwards takes every wheel from the
    cache create filled (it downloads nothing). The console script names the target's python, and every file
    the manifest lists has the sha256 and size it records, RECORD-derived or hashed."""
    import hashlib
    import json

    from envbuild.lock.uv_cli import uv_bin, uv_env

    cache = tmp_path / "cache"
    target = tmp_path / "env"
    r = envbuild("create", "--backend", "venv", "--python", sys.executable, "--prefix", str(target),
                 env={**world["env"], "ENVBUILD_CACHE_DIR": str(cache)})
    assert r.returncode == 0, r.stderr
    tool = subprocess.run([str(target / "bin" / "alpha-tool")], capture_output=True, text=True)
    assert tool.stdout.strip() == "alpha-tool 1.0", tool.stderr
    manifest = json.loads((target / "envbuild" / "manifest.json").read_text())
    files = [f for f in manifest["files"] if "sha256" in f]
    assert any(f["path"].endswith("site-packages/alpha/__init__.py") for f in files)
    for f in files:
        data = (target / f["path"]).read_bytes()
        assert (f["sha256"], f["size"]) == (hashlib.sha256(data).hexdigest(), len(data)), f["path"]

    plain = tmp_path / "plain"
    subprocess.run([uv_bin(), "venv", "--no-config", "-q", "--python", sys.executable, str(plain)], check=True)
    lock = world["root"] / "lockfiles" / "pyonly" / "requirements.lock.txt"
    again = subprocess.run([uv_bin(), "pip", "install", "--no-config", "--python", str(plain / "bin" / "python"),
                            "--require-hashes", "--no-deps", "--index-url", world["index"], "-r", str(lock)],
                           capture_output=True, text=True, env=uv_env(cache / "uv"))
    assert again.returncode == 0, again.stderr
    assert "Installed 2 packages" in again.stderr and "Prepared" not in again.stderr, again.stderr
