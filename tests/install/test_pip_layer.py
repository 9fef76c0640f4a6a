"""Installing a pip lock into a real venv with real pip: offline from a wheelhouse, tampered wheels refused."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from envbuild.errors import EnvbuildError
from envbuild.install.pip_layer import WheelHashMismatch, fetch_locked_wheel, install_locked
from envbuild.lock.pip_lock import platform_tags_for, resolve_pip_lock
from envbuild.lock.pip_lockfile import find_entry, parse_pip_lock
from fixturegen.wheels import make_wheel, serve, tamper, write_simple_index

PYVER = "%d.%d" % sys.version_info[:2]


def _venv(path: Path) -> Path:
    """A fresh venv whose pip is this interpreter's (a .pth), which is much faster than ensurepip."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, capture_output=True)
    site = path / "lib" / f"python{PYVER}" / "site-packages"
    (site / "_host_pip.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return path / "bin" / "python"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    root = tmp_path_factory.mktemp("piplayer")
    house = root / "wheelhouse"
    make_wheel(house, "alpha", "1.0", requires=["beta"])
    make_wheel(house, "beta", "2.0")
    lock = root / "pip.lock"
    lock.write_text(resolve_pip_lock(["alpha"], [], PYVER, platform_tags_for("linux-64"), find_links=[house]))
    return {"root": root, "house": house, "lock": lock}


def test_offline_install_returns_what_was_installed(locked, tmp_path):
    python = _venv(tmp_path / "env")
    got = install_locked(python, locked["lock"], find_links=[locked["house"]], offline=True)
    assert [(w.name, w.version, w.file) for w in got] == [
        ("alpha", "1.0", "alpha-1.0-py3-none-any.whl"), ("beta", "2.0", "beta-2.0-py3-none-any.whl")]
    assert [w.sha256 for w in got] == [_sha(locked["house"] / w.file) for w in got]
    out = subprocess.run([str(python), "-c", "import alpha, beta; print(alpha.__version__, beta.__version__)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1.0", "2.0"]


def test_tampered_wheel_is_refused_by_name_and_nothing_installed(locked, tmp_path):
    house = tmp_path / "house"
    shutil.copytree(locked["house"], house)
    wanted = find_entry(parse_pip_lock(locked["lock"].read_text()), "beta").hashes[0]
    tamper(house / "beta-2.0-py3-none-any.whl")
    python = _venv(tmp_path / "env")
    with pytest.raises(WheelHashMismatch) as err:
        install_locked(python, locked["lock"], find_links=[house], offline=True)
    msg = str(err.value)
    assert msg.startswith("beta-2.0-py3-none-any.whl: ")
    assert wanted in msg and _sha(house / "beta-2.0-py3-none-any.whl") in msg
    probe = subprocess.run([str(python), "-c", "import alpha"], capture_output=True)
    assert probe.returncode != 0, "alpha was installed although beta was refused"


def test_missing_wheel_offline_names_the_requirement(locked, tmp_path):
    house = tmp_path / "house"
    shutil.copytree(locked["house"], house)
    (house / "beta-2.0-py3-none-any.whl").unlink()
    with pytest.raises(EnvbuildError) as err:
        install_locked(_venv(tmp_path / "env"), locked["lock"], find_links=[house], offline=True)
    assert "beta==2.0" in str(err.value)


def test_fetch_locked_wheel_verifies_the_download(tmp_path):
    wheel = make_wheel(tmp_path / "w", "gamma", "3.0")
    write_simple_index(tmp_path / "idx", [wheel])
    from envbuild.profile.recipe import PipIndex

    with serve(tmp_path / "idx") as base:
        lock = resolve_pip_lock(["gamma"], [PipIndex("pypi", base)], PYVER, platform_tags_for("linux-64"))
        entry = find_entry(parse_pip_lock(lock), "gamma")
        got = fetch_locked_wheel(entry, tmp_path / "dest")
        assert _sha(got) == entry.hashes[0]
        tamper(tmp_path / "idx" / "gamma" / wheel.name)
        with pytest.raises(WheelHashMismatch):
            fetch_locked_wheel(entry, tmp_path / "dest2")
    assert not list((tmp_path / "dest2").iterdir())


def test_direct_url_wheel_is_fetched_for_an_online_install(tmp_path):
    """`name @ URL` requirements (e.g. a release-page wheel) lock to their URL and install with the indexes."""
    from envbuild.profile.recipe import PipIndex

    files = tmp_path / "site" / "files"
    direct = make_wheel(files, "delta", "1.0", requires=["beta"])
    write_simple_index(tmp_path / "site" / "simple", [make_wheel(tmp_path / "w", "beta", "2.0")])
    with serve(tmp_path / "site") as base:
        lock = tmp_path / "pip.lock"
        lock.write_text(resolve_pip_lock([f"delta @ {base}files/{direct.name}"], [PipIndex("pypi", base + "simple/")],
                                         PYVER, platform_tags_for("linux-64")))
        entry = find_entry(parse_pip_lock(lock.read_text()), "delta")
        assert (entry.index, entry.hashes) == ("url", (_sha(direct),))
        python = _venv(tmp_path / "env")
        got = install_locked(python, lock, index_urls=[base + "simple/"])
    assert sorted(w.name for w in got) == ["beta", "delta"]


def test_a_version_with_several_accepted_wheels_installs_the_chosen_one(tmp_path):
    """uv takes one hash per direct reference: with two manylinux wheels locked, the chosen file's own hash
    is used (from pylock.toml beside the lock, or the wheelhouse file checked against the lock)."""
    from envbuild.lock.pip_outputs import PIP_LOCK_FILE  # noqa: F401
    from envbuild.lock.pip_lock import resolve_pip_entries
    from envbuild.lock.pip_lockfile import render_pip_lock
    from envbuild.lock.pylock import render_pylock
    from envbuild.profile.recipe import PipIndex

    tag = "cp%d%d-cp%d%d" % (sys.version_info[:2] * 2)
    wheels = [make_wheel(tmp_path / "w", "multi", "1.0", tag=f"{tag}-manylinux_2_{m}_x86_64") for m in (17, 28)]
    write_simple_index(tmp_path / "idx", wheels)
    with serve(tmp_path / "idx") as base:
        entries, header = resolve_pip_entries(["multi"], [PipIndex("pypi", base)], PYVER, platform_tags_for("linux-64"))
        assert len(entries[0].hashes) == 2
        lock = tmp_path / "lock" / "requirements.lock.txt"
        lock.parent.mkdir()
        lock.write_text(render_pip_lock(entries, header))
        (lock.parent / "pylock.toml").write_text(render_pylock(entries, PYVER, platform_tags_for("linux-64"), {}))
        got = install_locked(_venv(tmp_path / "env"), lock, index_urls=[base])
    assert [(w.name, w.file) for w in got] == [("multi", f"multi-1.0-{tag}-manylinux_2_28_x86_64.whl")]
    assert got[0].sha256 == _sha(wheels[1])
    house = tmp_path / "house"
    house.mkdir()
    shutil.copy(wheels[1], house)
    (lock.parent / "pylock.toml").unlink()  # no per-file hashes: the wheelhouse file is checked against the lock
    got = install_locked(_venv(tmp_path / "env2"), lock, find_links=[house], offline=True)
    assert got[0].sha256 == _sha(wheels[1])
