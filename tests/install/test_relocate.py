"""Relocation streams (a match across two chunks is found, memory stays flat on a large file) and leaves the
files of prebuilt, hash-locked wheels unread; prefix_files tells those files apart from what the installer
wrote, on a real uv install."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from envbuild.install import relocate
from envbuild.install.pip_layer import install_locked
from envbuild.install.prefix_files import prebuilt_files
from envbuild.install.relocate import relocate_tree
from envbuild.lock.pip_lock import platform_tags_for, resolve_pip_entries
from envbuild.lock.pip_lockfile import render_pip_lock
from envbuild.lock.pylock import render_pylock
from envbuild.profile.recipe import PipIndex
from envbuild.lock.uv_cli import uv_bin
from fixturegen.wheels import make_wheel, serve, write_simple_index

PYVER = "%d.%d" % sys.version_info[:2]


@pytest.fixture
def tiny_chunks(monkeypatch):
    monkeypatch.setattr(relocate, "CHUNK", 5)  # every path below spans several chunks


def _staged(tmp_path: Path):
    staging, target = tmp_path / ".env.envbuild-staging", tmp_path / "env"
    staging.mkdir()
    return staging, target


def test_text_and_elf_rewrites_find_the_path_across_chunk_boundaries(tmp_path, tiny_chunks):
    staging, target = _staged(tmp_path)
    old, new = str(staging).encode(), str(target).encode()
    text = b"#!" + old + b"/bin/python\nimport sys  # " + old + b"\n"
    (staging / "tool").write_bytes(text)
    elf = b"\x7fELF\0\0" + old + b"/lib:" + old + b"/lib64\0tail\0" + old + b"\0end"
    (staging / "ext.so").write_bytes(elf)
    assert relocate_tree(staging, staging, target) == 2
    assert (staging / "tool").read_bytes() == b"#!" + new + b"/bin/python\nimport sys  # " + new + b"\n"
    first = new + b"/lib:" + new + b"/lib64"
    padded = first + b"\0" * (len(old + b"/lib:" + old + b"/lib64") - len(first))
    assert (staging / "ext.so").read_bytes() == (b"\x7fELF\0\0" + padded + b"\0tail\0" + new
                                                 + b"\0" * (len(old) - len(new)) + b"\0end")


def test_a_large_file_is_rewritten_without_reading_it_whole(tmp_path):
    staging, target = _staged(tmp_path)
    big = staging / "big.txt"
    with open(big, "wb") as fh:
        for _ in range(48):
            fh.write(b"x" * (1 << 20))
        fh.write(str(staging).encode() + b"\n")
    tracemalloc.start()
    try:
        assert relocate_tree(staging, staging, target) == 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"relocation held {peak >> 20} MiB for a 48 MiB file"
    assert big.stat().st_size == 48 * (1 << 20) + len(str(target)) + 1
    with open(big, "rb") as fh:
        fh.seek(48 << 20)
        assert fh.read() == str(target).encode() + b"\n"


def test_a_rewritten_hardlink_leaves_the_other_link_alone(tmp_path):
    staging, target = _staged(tmp_path)
    cache = tmp_path / "cache-copy"
    cache.write_text(f"#!{staging}/bin/python\n")
    os.link(cache, staging / "tool")
    os.chmod(staging / "tool", 0o755)
    assert relocate_tree(staging, staging, target) == 1
    assert (staging / "tool").read_text() == f"#!{target}/bin/python\n"
    assert cache.read_text() == f"#!{staging}/bin/python\n"
    assert (staging / "tool").stat().st_mode & 0o777 == 0o755


@pytest.fixture
def uv_env_with_tool(tmp_path):
    """A venv with a wheel from a (loopback) index installed by the pip layer, as create installs it."""
    wheel = make_wheel(tmp_path / "w", "alpha", "1.0", module_text="def main():\n    print('alpha-tool ran')\n",
                       console_scripts=["alpha-tool = alpha:main"])
    write_simple_index(tmp_path / "idx", [wheel])
    staging = tmp_path / ".env.envbuild-staging"
    subprocess.run([uv_bin(), "venv", "--no-config", "-q", "--python", sys.executable, str(staging)], check=True)
    with serve(tmp_path / "idx") as base:
        entries, header = resolve_pip_entries(["alpha"], [PipIndex("pypi", base)], PYVER, platform_tags_for("linux-64"))
        lock = tmp_path / "lock" / "requirements.lock.txt"
        lock.parent.mkdir()
        lock.write_text(render_pip_lock(entries, header))
        (lock.parent / "pylock.toml").write_text(render_pylock(entries, PYVER, platform_tags_for("linux-64"),
                                                               {"pypi": base}))
        installed = install_locked(staging / "bin" / "python", lock, indexes={"pypi": base},
                                   cache_dir=tmp_path / "uv-cache")
    return staging, [w.__dict__ for w in installed]


def test_prebuilt_files_are_the_wheels_own_files_with_their_real_hashes(uv_env_with_tool):
    staging, installed = uv_env_with_tool
    assert [w["prebuilt"] for w in installed] == [True]
    got = prebuilt_files(staging, installed)
    site = f"lib/python{PYVER}/site-packages"
    assert set(got) == {f"{site}/alpha/__init__.py"}  # not the dist-info (the installer writes there), not bin/
    for rel, (sha, size) in got.items():
        data = (staging / rel).read_bytes()
        assert (sha, size) == (hashlib.sha256(data).hexdigest(), len(data))
    assert prebuilt_files(staging, [dict(w, prebuilt=False) for w in installed]) == {}


def test_relocation_skips_prebuilt_files_and_fixes_the_console_script(uv_env_with_tool, tmp_path):
    staging, installed = uv_env_with_tool
    target = tmp_path / "env"
    verbatim = prebuilt_files(staging, installed)
    module = staging / next(iter(verbatim))
    before = module.stat()
    assert relocate_tree(staging, staging, target, verbatim=verbatim) >= 1
    script = staging / "bin" / "alpha-tool"
    assert script.read_text().splitlines()[0] == f"#!{target}/bin/python"
    after = module.stat()
    assert (after.st_ino, after.st_nlink) == (before.st_ino, before.st_nlink)  # still uv's hardlink, untouched


def test_a_distribution_reinstalled_by_pip_is_not_trusted(uv_env_with_tool):
    staging, installed = uv_env_with_tool
    info = next((staging / f"lib/python{PYVER}/site-packages").glob("alpha-1.0.dist-info"))
    (info / "INSTALLER").write_text("pip\n")  # what a later `pip install` of the same name and version leaves
    assert prebuilt_files(staging, installed) == {}
