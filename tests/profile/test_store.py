"""One profile store: every command finds profiles by --lockfiles, then $ENVBUILD_LOCKFILES, then envbuild's
lockfiles/ — `profiles`, `profiles show` and `doctor --profile` included (they ignored both before)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
LONG = "site-a-slime-v0.3.1-cu129-with-a-name-longer-than-eighty-columns-for-the-cluster-team"


def envbuild(*args, env=None):
    full = dict(os.environ, **(env or {}))
    full.pop("ENVBUILD_LOCKFILES", None)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True, env=full,
                          timeout=120)


@pytest.fixture
def site(tmp_path):
    """A lockfiles folder of our own with one profile whose name is longer than a terminal."""
    folder = tmp_path / "site" / LONG
    shutil.copytree(REPO / "lockfiles" / "slime-v0.3.1-cu129", folder)
    p = folder / "profile.toml"
    p.write_text(p.read_text().replace('name = "slime-v0.3.1-cu129"', f'name = "{LONG}"', 1))
    return tmp_path / "site"


def test_env_var_lists_that_folders_profiles_full_names_one_per_line(site):
    r = envbuild("profiles", env={"ENVBUILD_LOCKFILES": str(site)})
    assert r.returncode == 0, r.stderr
    assert r.stdout == LONG + "\n"  # a pipe: the whole name, nothing else, not the shipped profiles
    r = envbuild("profiles", "--lockfiles", str(site))
    assert r.stdout == LONG + "\n"


def test_without_a_folder_the_shipped_profiles_are_listed_one_per_line():
    r = envbuild("profiles")
    assert r.returncode == 0
    assert r.stdout.splitlines() == sorted(p.parent.name for p in (REPO / "lockfiles").glob("*/profile.toml"))


def test_profiles_show_and_doctor_profile_find_the_profile_through_the_env_var(site, tmp_path):
    env = {"ENVBUILD_LOCKFILES": str(site)}
    r = envbuild("profiles", "show", LONG, "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["profile"]["name"] == LONG
    r = envbuild("profiles", "--lockfiles", str(site), "show", LONG, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["profile"]["name"] == LONG
    out = tmp_path / "r.json"
    r = envbuild("doctor", "--profile", LONG, "--check", "stack.profile_match", "-q", "--json", str(out), env=env)
    assert r.returncode in (0, 1), r.stderr
    assert json.loads(out.read_text())["profile"] == LONG


def test_unknown_profile_and_missing_folder_are_exit_2_naming_them(site, tmp_path):
    env = {"ENVBUILD_LOCKFILES": str(site)}
    for args in (("profiles", "show", "slime-v0.3.1-cu129"), ("doctor", "--profile", "slime-v0.3.1-cu129"),
                 ("lock", "--check", "--profile", "slime-v0.3.1-cu129")):
        r = envbuild(*args, env=env)
        assert r.returncode == 2, args
        assert f"unknown profile 'slime-v0.3.1-cu129' in {site}; known profiles: {LONG}" in r.stderr, r.stderr
    missing = tmp_path / "nowhere"
    for args in (("profiles",), ("profiles", "show", "x"), ("doctor", "--profile", "x"), ("lock", "--check"),
                 ("create", "--dry-run"), ("pack", "-o", str(tmp_path / "b.tar"))):
        r = envbuild(*args, env={"ENVBUILD_LOCKFILES": str(missing)})
        assert r.returncode == 2, args
        assert f"lockfiles folder {missing} ($ENVBUILD_LOCKFILES) does not exist" in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "b.tar").exists()


def test_lockfiles_option_wins_over_the_env_var(site, tmp_path):
    r = envbuild("profiles", "--lockfiles", str(site), env={"ENVBUILD_LOCKFILES": str(tmp_path / "nowhere")})
    assert r.returncode == 0 and r.stdout == LONG + "\n"
