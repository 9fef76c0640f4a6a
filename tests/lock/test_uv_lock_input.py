"""The uv-based pip lock on bad or moving input: a resolution cutoff that holds when an index gains a
newer upload, an unreachable index, a wheel missing for the platform, hashes that are not sha256, and a
lock that pins nothing. Each bad case is one line naming the file, package or index."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from envbuild.errors import EnvbuildError, InputFileError
from envbuild.install.pip_layer import install_locked
from envbuild.lock.pip_lock import platform_tags_for, resolve_pip_lock
from envbuild.lock.pip_lockfile import find_entry, parse_pip_lock
from envbuild.lock.pylock import parse_pylock
from envbuild.profile.recipe import PipIndex
from fixturegen.e2e import make_world
from fixturegen.wheels import closed_port, make_wheel, serve, write_simple_index

TAGS = platform_tags_for("linux-64", "2.28")
PYVER = "%d.%d" % sys.version_info[:2]


def test_exclude_newer_keeps_the_lock_when_a_newer_version_is_uploaded(tmp_path):
    w = tmp_path / "w"
    old, new = make_wheel(w, "drift", "1.0"), make_wheel(w, "drift", "1.1")
    write_simple_index(tmp_path / "idx", [old], upload_times={old.name: "2026-03-01T00:00:00Z"})
    with serve(tmp_path / "idx") as base:
        before = resolve_pip_lock(["drift"], [PipIndex("pypi", base)], "3.12", TAGS, exclude_newer="2026-06-01T00:00:00Z")
        write_simple_index(tmp_path / "idx", [old, new], upload_times={old.name: "2026-03-01T00:00:00Z",
                                                                       new.name: "2026-09-01T00:00:00Z"})
        after = resolve_pip_lock(["drift"], [PipIndex("pypi", base)], "3.12", TAGS, exclude_newer="2026-06-01T00:00:00Z")
        unpinned = resolve_pip_lock(["drift"], [PipIndex("pypi", base)], "3.12", TAGS)
    assert after == before and "exclude-newer: 2026-06-01T00:00:00Z" in after
    assert find_entry(parse_pip_lock(after), "drift").version == "1.0"
    assert find_entry(parse_pip_lock(unpinned), "drift").version == "1.1"


def test_wheel_missing_for_the_platform_names_the_package(tmp_path):
    write_simple_index(tmp_path / "idx", [make_wheel(tmp_path / "w", "winonly", "1.0", tag="cp312-cp312-win_amd64")])
    with serve(tmp_path / "idx") as base, pytest.raises(EnvbuildError) as err:
        resolve_pip_lock(["winonly"], [PipIndex("pypi", base)], "3.12", TAGS)
    msg = str(err.value)
    assert "winonly" in msg and "\n" not in msg


def test_lock_against_an_unreachable_index_is_one_line_exit_2(tmp_path):
    world = make_world(tmp_path, c_functions=2)
    world.write_profile(f"http://127.0.0.1:{closed_port()}/")
    r = subprocess.run([sys.executable, "-m", "envbuild", "lock", "--only", "pip", "--lockfiles", str(world.lockfiles)],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, COLUMNS="300"))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "127.0.0.1" in r.stderr and "alpha" in r.stderr
    assert not (world.lockfiles / "fx" / "requirements.lock.txt").exists()


def test_a_hash_that_is_not_sha256_names_file_and_line(tmp_path):
    bad = "# header\nfoo==1.0 \\\n    --hash=sha256:abc123\n    # file: foo-1.0-py3-none-any.whl (index: pypi)\n"
    with pytest.raises(InputFileError) as err:
        parse_pip_lock(bad, tmp_path / "requirements.lock.txt")
    assert str(err.value).startswith(f"{tmp_path / 'requirements.lock.txt'}:3: foo: 'sha256:abc123'")
    toml = ('lock-version = "1.0"\n\n[[packages]]\nname = "foo"\nversion = "1.0"\n'
            'wheels = [{ url = "https://x/foo-1.0-py3-none-any.whl", hashes = { sha256 = "ABC" } }]\n')
    with pytest.raises(InputFileError) as err:
        parse_pylock(toml, tmp_path / "pylock.toml")
    assert str(err.value).startswith(f"{tmp_path / 'pylock.toml'}:4: foo==1.0")


def test_a_lock_that_pins_nothing_is_refused(tmp_path):
    lock = tmp_path / "requirements.lock.txt"
    lock.write_text("# envbuild pip lock\n# requirement: alpha\n")
    with pytest.raises(InputFileError) as err:
        install_locked(sys.executable, lock)
    assert str(err.value).startswith(f"{lock}: pins no package, but the profile has a pip layer")
