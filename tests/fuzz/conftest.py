"""Fixtures of the fuzz suite: the in-process CLI and one locked fixture world shared by a module's cases."""
import os
import shutil
from contextlib import contextmanager

import pytest

from clirun import run_cli
from fixturegen.conda_channel import build_channel, write_fixture_profile


@pytest.fixture(scope="session")
def world(tmp_path_factory):
    """A local channel and a locked fixture profile `fx` (lock run once, in-process)."""
    root = tmp_path_factory.mktemp("fuzzworld")
    build_channel(root / "channel")
    write_fixture_profile(root / "lockfiles", root / "channel")
    with env_vars(ENVBUILD_LOCKFILES=str(root / "lockfiles"), ENVBUILD_CACHE_DIR=str(root / "cache")):
        res = run_cli(["lock"])
    assert res.code == 0, res.err
    return root


@contextmanager
def env_vars(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def fresh_copy(src, dest):
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest)
    return dest
