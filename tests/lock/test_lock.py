"""`envbuild lock` against a real local conda channel (built here), with the network blocked."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fixturegen.conda_channel import write_fixture_profile

OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
           "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}


def envbuild(*args, env=None, cwd=None):
    full = dict(os.environ, **OFFLINE, **(env or {}))
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True, env=full,
                          cwd=cwd, timeout=120)


def test_lock_writes_conda_lock_v1_that_conda_lock_reads_and_renders(lockfiles, tmp_path):
    r = envbuild("lock", "--lockfiles", str(lockfiles))
    assert r.returncode == 0, r.stderr
    folder = lockfiles / "fx"
    assert {"conda-lock.yml", "environment.yml", "virtual-packages.yml"} <= {p.name for p in folder.iterdir()}
    doc = yaml.safe_load((folder / "conda-lock.yml").read_text())
    assert doc["version"] == 1
    by_name = {p["name"]: p for p in doc["package"]}
    # __cuda >=12.9 on footool only solves because the recipe's virtual packages say __cuda=12.9
    assert by_name["footool"]["dependencies"]["__cuda"] == ">=12.9"
    assert by_name["libfoo"]["version"] == "1.0"  # footool pins libfoo <1.1 although 1.1 exists
    assert by_name["cuda-compat"]["category"] == "compat" and by_name["cuda-compat"]["optional"] is True
    assert all(len(p["hash"]["sha256"]) == 64 and p["hash"]["md5"] for p in doc["package"])
    assert not any(p["name"].startswith("__") for p in doc["package"])

    from conda_lock.lockfile import parse_conda_lock_file

    parsed = parse_conda_lock_file(folder / "conda-lock.yml")
    assert {p.name for p in parsed.package} == set(by_name)
    out = tmp_path / "render"
    out.mkdir()
    shutil.copy(folder / "conda-lock.yml", out)
    conda_lock = Path(sys.executable).with_name("conda-lock")
    cmd = [str(conda_lock)] if conda_lock.exists() else [sys.executable, "-m", "conda_lock"]
    rr = subprocess.run(cmd + ["render", "--kind", "explicit", "-p", "linux-64", "conda-lock.yml"], cwd=out,
                        capture_output=True, text=True, env=dict(os.environ, **OFFLINE), timeout=120)
    assert rr.returncode == 0, rr.stderr
    explicit = (out / "conda-linux-64.lock").read_text()
    assert "@EXPLICIT" in explicit
    assert f"footool-2.0-cuda129_0.tar.bz2#{by_name['footool']['hash']['md5']}" in explicit
    assert "cuda-compat" not in explicit  # optional category left out unless asked for


def test_identical_input_gives_byte_identical_output(lockfiles, tmp_path, channel):
    assert envbuild("lock", "--lockfiles", str(lockfiles)).returncode == 0
    first = {p.name: p.read_bytes() for p in (lockfiles / "fx").iterdir()}
    other = tmp_path / "other"
    write_fixture_profile(other, channel)
    assert envbuild("lock", "--lockfiles", str(other)).returncode == 0
    second = {p.name: p.read_bytes() for p in (other / "fx").iterdir()}
    assert first == second
    again = envbuild("lock", "--lockfiles", str(lockfiles))
    assert again.returncode == 0 and "up to date" in again.stdout
    assert first == {p.name: p.read_bytes() for p in (lockfiles / "fx").iterdir()}


def test_check_fresh_then_stale_with_readable_diff(lockfiles):
    assert envbuild("lock", "--lockfiles", str(lockfiles)).returncode == 0
    fresh = envbuild("lock", "--check", "--lockfiles", str(lockfiles))
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert "fx: fresh" in fresh.stdout
    profile = lockfiles / "fx" / "profile.toml"
    before = (lockfiles / "fx" / "conda-lock.yml").read_text()
    profile.write_text(profile.read_text().replace('"footool 2.*"', '"footool 2.0.*"'))
    stale = envbuild("lock", "--check", "--lockfiles", str(lockfiles), "--profile", "fx")
    assert stale.returncode == 1
    assert "fx: STALE" in stale.stdout
    assert '-  - "footool 2.*"' in stale.stdout and '+  - "footool 2.0.*"' in stale.stdout
    assert "+++ b/lockfiles/fx/conda-lock.yml" in stale.stdout
    assert (lockfiles / "fx" / "conda-lock.yml").read_text() == before  # --check never writes


def test_check_without_a_lock_is_stale(lockfiles):
    r = envbuild("lock", "--check", "--lockfiles", str(lockfiles))
    assert r.returncode == 1 and "does not exist" in r.stdout


def test_missing_package_names_the_spec_and_its_line(lockfiles):
    profile = lockfiles / "fx" / "profile.toml"
    text = profile.read_text().replace('"foodata"]', '"foodata", "nosuchpkg >=1"]')
    profile.write_text(text)
    r = envbuild("lock", "--lockfiles", str(lockfiles))
    assert r.returncode == 2
    line = next(i + 1 for i, l in enumerate(text.splitlines()) if "nosuchpkg" in l)
    assert "spec 'nosuchpkg >=1'" in r.stderr and f"profile.toml:{line}" in r.stderr
    assert not (lockfiles / "fx" / "conda-lock.yml").exists()


def test_without_cuda_virtual_package_the_cuda_build_does_not_solve(lockfiles):
    profile = lockfiles / "fx" / "profile.toml"
    profile.write_text(profile.read_text().replace('"__cuda=12.9", ', ""))
    r = envbuild("lock", "--lockfiles", str(lockfiles))
    assert r.returncode == 2
    assert "__cuda" in r.stderr and "cannot solve" in r.stderr


def test_malformed_recipe_names_file_line_and_field(lockfiles):
    profile = lockfiles / "fx" / "profile.toml"
    text = profile.read_text().replace('"foodata"]', '"foodata >=1,<"]')
    profile.write_text(text)
    r = envbuild("lock", "--lockfiles", str(lockfiles))
    assert r.returncode == 2
    line = next(i + 1 for i, l in enumerate(text.splitlines()) if "foodata >=1,<" in l)
    assert f"profile.toml:{line}: [recipe.conda] specs: bad conda spec 'foodata >=1,<'" in r.stderr


def test_recipe_model_rejects_build_of_unknown_git_source(tmp_path):
    from envbuild.errors import InputFileError
    from envbuild.profile.reader import Reader
    from envbuild.profile.recipe import parse_recipe

    path = tmp_path / "profile.toml"
    path.write_text('[recipe]\n[recipe.conda]\nchannels = ["conda-forge"]\nspecs = ["python"]\n'
                    '[[recipe.build]]\nname = "apex"\ngit = "apex-src"\n')
    from envbuild.tomlcompat import toml

    with pytest.raises(InputFileError) as err:
        parse_recipe(Reader(path, path.read_text()), toml.loads(path.read_text())["recipe"])
    assert "[recipe.build] git: build 'apex': no [[recipe.git]] named 'apex-src'" in str(err.value)
    assert f"{path}:7" in str(err.value)


def test_real_profiles_recipes_render_and_check_offline():
    """The shipped profiles' [recipe] sections parse, render, and `lock --check` answers offline (no hang)."""
    from envbuild.lock import lockset
    from envbuild.paths import lockfiles_dir
    from envbuild.profile import load_profile, select_profiles

    names = select_profiles(lockfiles_dir(), ())
    assert names
    for name in names:
        profile = load_profile(name, lockfiles_dir())
        recipe = profile.require_recipe()
        spec = lockset.spec_outputs(profile, recipe)
        assert "python 3.12.*" in spec.files["environment.yml"]
        assert set(spec.hashes) == set(recipe.platforms)
        assert not any(s.split()[0] in ("nccl", "cudnn") for s in recipe.conda.specs), "one NCCL/cuDNN: pip only"
    r = envbuild("lock", "--check")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    for name in names:
        assert f"{name}: " in r.stdout


def test_lock_removes_a_pip_lock_the_recipe_no_longer_asks_for(lockfiles):
    assert envbuild("lock", "--lockfiles", str(lockfiles)).returncode == 0
    orphan = lockfiles / "fx" / "requirements.lock.txt"
    orphan.write_text("oldpkg==1.0 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    stale = envbuild("lock", "--check", "--lockfiles", str(lockfiles))
    assert stale.returncode == 1 and "exists but the recipe has no pip requirements" in stale.stdout
    r = envbuild("lock", "--lockfiles", str(lockfiles))
    assert r.returncode == 0 and "requirements.lock.txt (removed)" in r.stdout and not orphan.exists()
    assert envbuild("lock", "--check", "--lockfiles", str(lockfiles)).returncode == 0
