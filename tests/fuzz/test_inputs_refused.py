"""Inputs that were accepted and must be refused (exit 2 naming the file): unknown [recipe] keys, activation names
that are no shell names, a non-hex sha256 in conda-lock.yml (issue 12's "locks accepted that should not be")."""
from __future__ import annotations

import re

import pytest

from clirun import run_cli
from fuzz_helpers import env_vars, fresh_copy


def _dry_run(world, tmp_path, edit):
    base = fresh_copy(world / "lockfiles", tmp_path / "lockfiles")
    edit(base / "fx")
    with env_vars(ENVBUILD_LOCKFILES=str(base), ENVBUILD_CACHE_DIR=str(world / "cache")):
        return run_cli(["create", "--dry-run", "--prefix", str(tmp_path / "env")])


def test_unknown_recipe_key_is_refused(world, tmp_path):
    def edit(folder):
        p = folder / "profile.toml"
        p.write_text(p.read_text().replace("[recipe]\n", "[recipe]\nplatfroms = [\"linux-64\"]\n", 1))
    res = _dry_run(world, tmp_path, edit)
    assert res.code == 2 and "platfroms" in res.err and "profile.toml" in res.err


def test_activation_name_that_is_not_a_shell_name_is_refused_before_building(world, tmp_path):
    def edit(folder):
        p = folder / "profile.toml"
        p.write_text(p.read_text().replace("FIXTURE_MARK =", '"1-BAD" = "x", FIXTURE_MARK =', 1))
    res = _dry_run(world, tmp_path, edit)
    assert res.code == 2 and "1-BAD" in res.err


def test_non_hex_sha256_in_the_conda_lock_is_refused(world, tmp_path):
    def edit(folder):
        p = folder / "conda-lock.yml"
        p.write_text(re.sub(r"sha256: [0-9a-f]{64}", "sha256: " + "z" * 64, p.read_text(), count=1))
    res = _dry_run(world, tmp_path, edit)
    assert res.code == 2 and "conda-lock.yml" in res.err and "sha256" in res.err
