"""The lock files `envbuild lock` writes, read by the tools they are written for: conda-lock (its own
spec parser, content hash and `render`), uv (`uv pip install -r pylock.toml`) and pip >= 26.1
(`pip install -r pylock.toml`). All offline: a local conda channel and a loopback wheel index."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fixturegen.e2e import make_world
from fixturegen.wheels import serve

OFFLINE = {"CONDA_LOCK_OFFLINE": "1", "no_proxy": "*"}


def envbuild(*args, env=None):
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=300)


@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    root = tmp_path_factory.mktemp("interop")
    world = make_world(root, c_functions=2)
    with serve(world.index_dir) as base:
        world.write_profile(base)
        r = envbuild("lock", "--lockfiles", str(world.lockfiles))
        assert r.returncode == 0, r.stderr
        first = {p.name: p.read_bytes() for p in (world.lockfiles / "fx").iterdir() if p.is_file()}
        again = envbuild("lock", "--lockfiles", str(world.lockfiles))
        assert again.returncode == 0, again.stderr
        yield {"world": world, "folder": world.lockfiles / "fx", "base": base, "first": first, "root": root}


def test_relock_is_byte_identical(locked):
    now = {p.name: p.read_bytes() for p in locked["folder"].iterdir() if p.is_file()}
    assert now == locked["first"]
    assert {"pylock.toml", "requirements.lock.txt", "conda-lock.yml", "environment.compat.yml"} <= set(now)


def test_conda_lock_reads_every_package_of_our_environment_files(locked):
    """conda-lock's parser sees every spec, the optional cuda-compat included, in its category."""
    from conda_lock.src_parser import make_lock_spec

    folder = locked["folder"]
    sources = sorted(folder.glob("environment*.yml"))
    mapping = locked["root"] / "mapping.json"
    mapping.write_text('{"pip": {"conda_name": "pip", "conda_forge": "pip", "pypi_name": "pip"}}')
    spec = make_lock_spec(src_files=sources, mapping_url=str(mapping))
    deps = {d.name: d for d in spec.dependencies["linux-64"]}
    assert deps["cuda-compat"].category == "compat"
    assert deps["alpha"].manager == "pip"
    profile_specs = {"footool", "foodata", "cuda-compat"}
    assert profile_specs <= set(deps)


def test_our_content_hash_is_the_one_conda_lock_computes(locked):
    """conda-lock --check-input-hash would find our lock fresh: the stored hash is one conda-lock accepts."""
    from conda_lock.content_hash import backwards_compatible_content_hashes
    from conda_lock.src_parser import make_lock_spec
    from conda_lock.virtual_package import virtual_package_repo_from_specification

    folder = locked["folder"]
    mapping = locked["root"] / "mapping.json"
    mapping.write_text('{"pip": {"conda_name": "pip", "conda_forge": "pip", "pypi_name": "pip"}}')
    spec = make_lock_spec(src_files=sorted(folder.glob("environment*.yml")), mapping_url=str(mapping))
    vpr = virtual_package_repo_from_specification(folder / "virtual-packages.yml")
    stored = yaml.safe_load((folder / "conda-lock.yml").read_text())["metadata"]["content_hash"]["linux-64"]
    assert stored in backwards_compatible_content_hashes(spec, vpr, "linux-64")


def test_conda_lock_renders_the_pip_layer(locked, tmp_path):
    doc = yaml.safe_load((locked["folder"] / "conda-lock.yml").read_text())
    pip = {p["name"]: p for p in doc["package"] if p["manager"] == "pip"}
    assert set(pip) == {"alpha", "beta"}
    assert all(len(p["hash"]["sha256"]) == 64 and p["url"].endswith(".whl") for p in pip.values())
    (tmp_path / "conda-lock.yml").write_bytes((locked["folder"] / "conda-lock.yml").read_bytes())
    conda_lock = Path(sys.executable).with_name("conda-lock")
    rr = subprocess.run([str(conda_lock), "render", "--kind", "explicit", "-p", "linux-64", "conda-lock.yml"],
                        cwd=tmp_path, capture_output=True, text=True, env=dict(os.environ, **OFFLINE), timeout=120)
    assert rr.returncode == 0, rr.stderr
    explicit = (tmp_path / "conda-linux-64.lock").read_text()
    assert f"# pip beta @ {pip['beta']['url']}#sha256={pip['beta']['hash']['sha256']}" in explicit


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, capture_output=True)
    return path / "bin" / "python"


def test_uv_installs_our_pylock(locked, tmp_path):
    import uv

    python = _venv(tmp_path / "env")  # the lock names the files by URL on the module's loopback server
    r = subprocess.run([uv.find_uv_bin(), "pip", "install", "--no-config", "--python", str(python),
                        "-r", str(locked["folder"] / "pylock.toml")], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, UV_PYTHON_DOWNLOADS="never"))
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(python), "-c", "import alpha, beta; print(alpha.__version__, beta.__version__)"],
                         capture_output=True, text=True)
    assert out.stdout.split() == ["1.0", "2.0"], out.stderr


def test_pip_resolves_our_pylock(locked):
    from pip import __version__ as pip_version

    assert tuple(int(x) for x in pip_version.split(".")[:2]) >= (26, 1), "pip >= 26.1 reads pylock.toml"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
                        "--require-hashes", "--report", "-", "--quiet", "-r", str(locked["folder"] / "pylock.toml")],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, PIP_CONFIG_FILE=os.devnull))
    assert r.returncode == 0, r.stderr
    report = yaml.safe_load(r.stdout)
    assert sorted(i["metadata"]["name"] for i in report["install"]) == ["alpha", "beta"]
