"""The pip-layer resolver against loopback PEP 503 indexes: index priority, target markers, hashes, determinism.

Everything is real pip talking HTTP to 127.0.0.1; the two indexes mimic the cu129 index (torch + CUDA libs)
and PyPI, where PyPI also carries a HIGHER torch and CUDA-lib version: the lock must not take them.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from envbuild.errors import EnvbuildError, InputFileError
from envbuild.lock.pip_lock import platform_tags_for, resolve_pip_lock
from envbuild.lock.pip_lockfile import find_entry, parse_pip_lock
from envbuild.profile.recipe import PipIndex
from fixturegen.wheels import make_wheel, serve, write_simple_index

TAGS = platform_tags_for("linux-64", "2.28")


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    root = tmp_path_factory.mktemp("piplock")
    w = root / "wheels"
    cuda = [
        make_wheel(w / "cuda", "torchy", "2.0.0+cu129", requires=["nvlib==1.0"]),
        make_wheel(w / "cuda", "nvlib", "1.0"),
    ]
    pypi = [
        make_wheel(w / "pypi", "torchy", "3.0.0"),  # a higher version on the fallback index: must be ignored
        make_wheel(w / "pypi", "nvlib", "9.0"),
        make_wheel(w / "pypi", "app", "1.0", requires_python=">=3.13",
                   requires=["helper; python_version >= '3.13'", "legacy; python_version < '3.13'"]),
        make_wheel(w / "pypi", "helper", "0.5"),
        make_wheel(w / "pypi", "legacy", "0.1"),
        make_wheel(w / "pypi", "ghost", "1.0"),
        make_wheel(w / "pypi", "natty", "1.0", tag="cp313-cp313-manylinux_2_17_x86_64"),
        make_wheel(w / "pypi", "natty", "1.0", tag="cp313-cp313-manylinux_2_28_x86_64"),
        make_wheel(w / "pypi", "natty", "1.0", tag="cp313-cp313-win_amd64"),
    ]
    write_simple_index(root / "idx" / "cuda", cuda)
    write_simple_index(root / "idx" / "pypi", pypi)
    write_simple_index(root / "idx" / "nohash", [make_wheel(w / "nohash", "plain", "2.0")], with_hashes=False)
    with serve(root / "idx") as base:
        yield {
            "base": base,
            "idx": root / "idx",
            "priority": [PipIndex("cu129", base + "cuda/", ["torchy", "nvlib"]), PipIndex("pypi", base + "pypi/")],
        }


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_named_packages_come_only_from_their_index(indexes):
    text = resolve_pip_lock(["torchy", "app"], indexes["priority"], "3.13", TAGS)
    entries = parse_pip_lock(text)
    torchy, nvlib = find_entry(entries, "torchy"), find_entry(entries, "nvlib")
    assert (torchy.version, torchy.index) == ("2.0.0+cu129", "cu129")
    assert (nvlib.version, nvlib.index) == ("1.0", "cu129")
    assert torchy.hashes == (_sha(indexes["idx"] / "cuda" / "torchy" / torchy.filename),)
    # markers are evaluated for the 3.13 target, whatever Python runs the resolver
    assert find_entry(entries, "helper") is not None
    assert find_entry(entries, "legacy") is None


def test_same_input_gives_byte_identical_lock(indexes):
    a = resolve_pip_lock(["app", "torchy"], indexes["priority"], "3.13", TAGS)
    b = resolve_pip_lock(["app", "torchy"], indexes["priority"], "3.13", TAGS)
    assert a == b
    names = [e.name for e in parse_pip_lock(a)]
    assert names == sorted(names)


def test_every_compatible_file_is_hashed_and_no_other(indexes):
    entry = find_entry(parse_pip_lock(resolve_pip_lock(["natty"], indexes["priority"], "3.13", TAGS)), "natty")
    folder = indexes["idx"] / "pypi" / "natty"
    linux = sorted(_sha(p) for p in folder.glob("*manylinux*.whl"))
    assert list(entry.hashes) == linux
    assert _sha(next(folder.glob("*win_amd64.whl"))) not in entry.hashes


def test_named_package_missing_from_its_index_is_not_taken_from_pypi(indexes):
    prio = [PipIndex("cu129", indexes["base"] + "cuda/", ["torchy", "nvlib", "ghost"]), PipIndex("pypi", indexes["base"] + "pypi/")]
    with pytest.raises(EnvbuildError) as err:
        resolve_pip_lock(["ghost"], prio, "3.13", TAGS)
    assert "ghost" in str(err.value) and "cu129" in str(err.value)


def test_index_without_hashes_is_hashed_by_download(indexes):
    text = resolve_pip_lock(["plain"], [PipIndex("bare", indexes["base"] + "nohash/")], "3.12", TAGS)
    entry = find_entry(parse_pip_lock(text), "plain")
    assert entry.hashes == (_sha(indexes["idx"] / "nohash" / "plain" / entry.filename),)


def test_find_links_wheel_is_locked_with_its_hash(indexes, tmp_path):
    local = make_wheel(tmp_path / "built", "localbuild", "0.1", requires=["helper"])
    text = resolve_pip_lock(["localbuild"], indexes["priority"], "3.13", TAGS, find_links=[tmp_path / "built"])
    entry = find_entry(parse_pip_lock(text), "localbuild")
    assert entry.index == "find-links" and entry.hashes == (_sha(local),)
    assert find_entry(parse_pip_lock(text), "helper").index == "pypi"


def test_malformed_lock_names_file_and_line(tmp_path):
    bad = "# header\nfoo==1.0 \\\n    --hash=sha256:nothex\n"
    with pytest.raises(InputFileError) as err:
        parse_pip_lock(bad, tmp_path / "pip.lock")
    assert str(err.value).startswith(f"{tmp_path / 'pip.lock'}:3:")


def test_requires_python_is_checked_against_the_target(indexes):
    """app needs Python >= 3.13: locking it for 3.12 fails, naming it, whatever Python runs the resolver."""
    with pytest.raises(EnvbuildError) as err:
        resolve_pip_lock(["app"], indexes["priority"], "3.12", TAGS)
    assert "app" in str(err.value)
