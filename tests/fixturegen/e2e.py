"""A fixture profile with every layer, for pack/create end-to-end tests and benchmarks/bench_create.py.

- conda: H3's fixture channel packages, with a `python` that makes the prefix a venv of the test
  interpreter (pyvenv.cfg: sys.prefix is the env, so pip installs into it as in a real conda env; a .pth
  lends it this interpreter's pip and setuptools);
- pip: `alpha` (needs `beta`) from a loopback PEP 503 index;
- git: a repository with two ordered patches, and a C-extension project built from source (`fastext`).
"""
from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from fixturegen.conda_channel import FIXTURE_PROFILE, Pkg, build_channel, default_packages
from fixturegen.gitrepos import PatchedRepo, make_c_extension_repo, make_patched_repo
from fixturegen.wheels import make_wheel, write_simple_index

PYVER = "%d.%d" % sys.version_info[:2]

RECIPE_TAIL = """
[recipe.pip]
indexes = [{{ name = "fixture", url = "{index}" }}]
requirements = ["alpha"]

[[recipe.git]]
name = "lib"
url = "{lib_url}"
commit = "{lib_commit}"
patches = ["patches/0001-answer.patch", "patches/0002-extra.patch"]
install = "none"

[[recipe.git]]
name = "fastext"
url = "{fast_url}"
commit = "{fast_commit}"
install = "build"

[[recipe.build]]
name = "fastext"
git = "fastext"
"""


def venv_python_package() -> Pkg:
    real = os.path.realpath(sys.executable)
    cfg = f"home = {os.path.dirname(real)}\ninclude-system-site-packages = false\nversion = {PYVER}\n"
    site = f"lib/python{PYVER}/site-packages"
    return Pkg("python", "3.11.7", "h0_venv", depends=["__glibc >=2.17"], symlinks={"bin/python": real},
               files={"pyvenv.cfg": cfg.encode(),
                      f"{site}/_fixture_host.pth": (sysconfig.get_paths()["purelib"] + "\n").encode()})


@dataclass
class World:
    root: Path
    channel: Path
    index_dir: Path  # serve it, then call write_profile with its URL
    lockfiles: Path
    lib: PatchedRepo
    fast: PatchedRepo

    @property
    def upstreams(self):
        return [self.channel, self.index_dir, self.lib.path, self.fast.path]

    def write_profile(self, index_url: str, name: str = "fx") -> Path:
        folder = self.lockfiles / name
        if not folder.exists():
            shutil.copytree(self.lib.patch_dir, folder)
        text = FIXTURE_PROFILE.format(name=name, channel=self.channel.as_uri(), mark="a") + RECIPE_TAIL.format(
            index=index_url, lib_url=self.lib.path, lib_commit=self.lib.commits[0], fast_url=self.fast.path,
            fast_commit=self.fast.commits[0])
        (folder / "profile.toml").write_text(text)
        return folder


def make_world(root: Path, c_functions: int = 40) -> World:
    """Build the channel, index, repositories; `c_functions` sets how much work the C build is."""
    root = Path(root)
    channel = root / "channel"
    build_channel(channel, [p for p in default_packages() if p.name != "python"] + [venv_python_package()])
    write_simple_index(root / "index", [make_wheel(root / "w", "alpha", "1.0", requires=["beta"]),
                                        make_wheel(root / "w", "beta", "2.0")])
    lib = make_patched_repo(root / "git")
    fast = make_c_extension_repo(root / "git", functions=c_functions)
    return World(root=root, channel=channel, index_dir=root / "index", lockfiles=root / "lockfiles", lib=lib, fast=fast)


PIP_TAIL = """
[recipe.pip]
indexes = [{{ name = "fixture", url = "{index}" }}]
requirements = ["alpha"]
"""


@dataclass
class PipWorld:
    """The fixture channel (with the venv python) and a loopback index of alpha (needs beta): a profile with
    a conda and a pip layer and nothing to compile, for tests that watch lock/create/pack run."""

    root: Path
    channel: Path
    index_dir: Path
    lockfiles: Path

    def write_profile(self, index_url: str, name: str = "fx") -> Path:
        folder = self.lockfiles / name
        folder.mkdir(parents=True, exist_ok=True)
        text = FIXTURE_PROFILE.format(name=name, channel=self.channel.as_uri(), mark="a") + PIP_TAIL.format(index=index_url)
        (folder / "profile.toml").write_text(text)
        return folder


def make_pip_world(root: Path) -> PipWorld:
    root = Path(root)
    channel = root / "channel"
    build_channel(channel, [p for p in default_packages() if p.name != "python"] + [venv_python_package()])
    write_simple_index(root / "index", [make_wheel(root / "w", "alpha", "1.0", requires=["beta"]),
                                        make_wheel(root / "w", "beta", "2.0")])
    return PipWorld(root=root, channel=channel, index_dir=root / "index", lockfiles=root / "lockfiles")
