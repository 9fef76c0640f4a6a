"""Backends behind one interface: the registry is what `create --backend` offers, every backend module has
the same few names, a missing binary is exit 2 before anything is written, and the binary backends hand
their installer the verified archives of the lock (an offline @EXPLICIT file) and report its failure."""
from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envbuild.install import backends
from fixturegen.conda_channel import build_channel, write_fixture_profile

OFFLINE = {k: "http://127.0.0.1:9" for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
FAKE = """#!/bin/sh
# a stand-in {name}: keeps its arguments and the @EXPLICIT file it was given, then fails like a real one
echo "$@" > "{log}"
while [ $# -gt 0 ]; do [ "$1" = "--file" ] && cp "$2" "{log}.explicit"; shift; done
echo "critical libmamba: could not open the package cache" >&2
exit 3
"""


def envbuild(*args, env=None):
    full = dict(os.environ, **OFFLINE, **(env or {}))
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True, env=full,
                          timeout=180)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("backends")
    build_channel(tmp / "channel")
    write_fixture_profile(tmp / "lockfiles", tmp / "channel")
    env = {"ENVBUILD_LOCKFILES": str(tmp / "lockfiles"), "ENVBUILD_CACHE_DIR": str(tmp / "cache")}
    assert envbuild("lock", env=env).returncode == 0
    return {"tmp": tmp, "env": env}


def test_every_registered_backend_has_the_interface():
    assert backends.DEFAULT in backends.NAMES
    for name in backends.NAMES:
        mod = backends.get(name)
        assert isinstance(mod.HELP, str) and mod.HELP
        assert isinstance(mod.USES_CONDA_LOCK, bool) and isinstance(mod.PER_PACKAGE_PROGRESS, bool)
        assert list(inspect.signature(mod.install).parameters) == ["request", "advance"]
        assert not inspect.signature(mod.health_check).parameters
        assert mod.health_check() is None or isinstance(mod.health_check(), str)
    assert backends.get("rattler").health_check() is None  # embedded: always usable


def test_dry_run_names_the_backend_and_how_it_installs(world, tmp_path):
    r = envbuild("create", "--dry-run", "--name", "fx", env=dict(world["env"], ENVBUILD_ENVS_DIR=str(tmp_path), COLUMNS="300"))
    assert r.returncode == 0, r.stderr
    assert f"backend rattler ({backends.get('rattler').HELP})" in r.stderr


def test_create_offers_exactly_the_registry():
    r = envbuild("create", "--help", env={"COLUMNS": "200"})
    assert f"[{'|'.join(backends.NAMES)}]" in r.stdout
    r = envbuild("create", "--backend", "mamba")
    assert r.returncode == 2 and "'mamba' is not one of" in r.stderr


@pytest.mark.parametrize("name", ["micromamba", "conda"])
def test_missing_binary_is_exit_2_before_anything_is_written(world, name, tmp_path):
    env = dict(world["env"], PATH=str(tmp_path), ENVBUILD_ENVS_DIR=str(tmp_path / "envs"))
    for extra in (["--dry-run"], []):
        r = envbuild("create", "--name", "fx", "--backend", name, *extra, env=env)
        assert r.returncode == 2, r.stderr
        assert f"--backend {name}: no `{name}` executable on PATH" in r.stderr and "--backend rattler" in r.stderr
    assert not (tmp_path / "envs").exists()


@pytest.mark.parametrize("name,flags", [("micromamba", "--offline"), ("conda", "--offline --no-default-packages")])
def test_binary_backend_gets_the_verified_archives_offline_and_its_failure_is_reported(world, name, flags, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "args"
    (bindir / name).write_text(FAKE.format(name=name, log=log))
    (bindir / name).chmod(0o755)
    env = dict(world["env"], PATH=f"{bindir}:{os.environ['PATH']}", ENVBUILD_ENVS_DIR=str(tmp_path / "envs"))
    r = envbuild("create", "--name", "fx", "--backend", name, env=env)
    assert r.returncode == 2, r.stderr
    assert f"{name} create failed (exit 3)" in r.stderr and "could not open the package cache" in r.stderr
    assert not (tmp_path / "envs" / "fx").exists()
    args = log.read_text().split()
    assert args[:3] == ["create", "--yes", "--prefix"] and args[3].endswith(".fx.envbuild-staging")
    assert " ".join(args[6:]) == flags
    explicit = (tmp_path / "args.explicit").read_text().splitlines()
    assert explicit[0] == "@EXPLICIT" and len(explicit) == 7  # the 6 archives of the fixture lock
    cache = Path(world["env"]["ENVBUILD_CACHE_DIR"]) / "archives"
    for line in explicit[1:]:
        url, md5 = line.split("#")
        assert url.startswith(f"file://{cache}/") and len(md5) == 32  # the verified copies, never the channel's
