"""One freshness rule for `lock --check`, `create` and `pack`: the same stale lock is refused by all three,
with the reason and the fix; a hand-edited (tampered) entry is stale, never "fresh"."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from fixturegen.wheels import make_wheel, serve, write_simple_index

OFFLINE = {k: "http://127.0.0.1:9" for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}


@pytest.fixture
def world(tmp_path, lockfiles):
    base = lockfiles
    env = {"ENVBUILD_LOCKFILES": str(base), "ENVBUILD_CACHE_DIR": str(tmp_path / "cache"),
           "ENVBUILD_ENVS_DIR": str(tmp_path / "envs")}
    r = envbuild("lock", env=env)
    assert r.returncode == 0, r.stderr
    return {"base": base, "env": env, "tmp": tmp_path, "lock": base / "fx" / "conda-lock.yml"}


def envbuild(*args, env=None, offline=True):
    full = dict(os.environ, **(OFFLINE if offline else {}), **(env or {}))
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True, env=full,
                          timeout=180)


def refused_by_create_and_pack(world, reason):
    """create --dry-run and pack both exit 2 naming `reason` and the fix; pack writes nothing."""
    out = world["tmp"] / "fx.tar"
    for args in (("create", "--dry-run", "--name", "fx"), ("pack", "--profile", "fx", "-o", str(out))):
        r = envbuild(*args, env=world["env"])
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "is stale against" in r.stderr and reason in r.stderr, (args, r.stderr)
        assert "run `envbuild lock --profile fx`" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists() and not list(world["tmp"].glob("fx.tar*")) and not (world["tmp"] / "envs").exists()


def test_fresh_lock_passes_all_three(world):
    assert envbuild("lock", "--check", env=world["env"]).stdout.strip() == "fx: fresh (re-resolved: the same bytes)"
    assert envbuild("create", "--dry-run", "--name", "fx", env=world["env"]).returncode == 0


def test_changed_recipe_is_stale_for_lock_check_create_and_pack(world):
    profile = world["base"] / "fx" / "profile.toml"
    profile.write_text(profile.read_text().replace('"foodata"]', '"foodata 0.1"]'))
    r = envbuild("lock", "--check", env=world["env"])
    assert r.returncode == 1 and "fx: STALE" in r.stdout and "inputs for linux-64 changed" in r.stdout
    refused_by_create_and_pack(world, "conda-lock.yml: inputs for linux-64 changed")


def test_tampered_sha256_in_conda_lock_is_stale_not_fresh(world):
    text = world["lock"].read_text()
    old = re.search(r"^ +sha256: ([0-9a-f]{64})$", text, re.M).group(1)  # a package hash, not the seal
    world["lock"].write_text(text.replace(old, "ab" * 32, 1))  # still a well-formed hash: only the seal tells
    r = envbuild("lock", "--check", env=world["env"])
    assert r.returncode == 1, r.stdout
    assert "conda-lock.yml: its package entries were edited after `envbuild lock` wrote them" in r.stdout
    assert "ab" * 32 in r.stdout and old in r.stdout  # the re-solve's diff shows the edit
    refused_by_create_and_pack(world, "its package entries were edited")
    assert envbuild("lock", env=world["env"]).returncode == 0
    assert envbuild("lock", "--check", env=world["env"]).stdout.strip() == "fx: fresh (re-resolved: the same bytes)"


def test_lock_without_a_seal_is_stale(world):
    text = world["lock"].read_text()
    assert "envbuild.entries_sha256" in text
    world["lock"].write_text("\n".join(l for l in text.splitlines() if "envbuild.entries_sha256" not in l) + "\n")
    r = envbuild("lock", "--check", env=world["env"])
    assert r.returncode == 1 and "has no seal (envbuild.entries_sha256)" in r.stdout


def test_removed_rendered_spec_is_stale(world):
    (world["base"] / "fx" / "environment.yml").unlink()
    refused_by_create_and_pack(world, "environment.yml: differs from the profile's [recipe]")


def test_tampered_pip_lock_is_stale(world, tmp_path):
    wheels = [make_wheel(tmp_path / "w", "alpha", "1.0")]
    index = write_simple_index(tmp_path / "index", wheels)
    profile = world["base"] / "fx" / "profile.toml"
    with serve(index) as url:
        profile.write_text(profile.read_text() + f'\n[recipe.pip]\nindexes = [{{ name = "fx", url = "{url}" }}]\n'
                           'requirements = ["alpha"]\n')
        r = envbuild("lock", env=world["env"], offline=False)
        assert r.returncode == 0, r.stderr
        pip_lock = world["base"] / "fx" / "requirements.lock.txt"
        text = pip_lock.read_text()
        assert text.splitlines()[-1].startswith("# sealed by envbuild lock: sha256:")
        assert envbuild("lock", "--check", env=world["env"]).stdout.strip() == "fx: fresh (re-resolved: the same bytes)"
        old = re.search(r"--hash=sha256:([0-9a-f]{64})", text).group(1)
        pip_lock.write_text(text.replace(old, "f" * 64))
        r = envbuild("lock", "--check", env=world["env"], offline=False)
    assert r.returncode == 1
    assert "requirements.lock.txt: was edited after `envbuild lock` wrote it" in r.stdout
    refused_by_create_and_pack(world, "requirements.lock.txt: was edited after")
