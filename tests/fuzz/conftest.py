"""Fixtures of the fuzz suite: the in-process CLI and one locked fixture world shared by a module's cases."""
import pytest

from clirun import run_cli
from fixturegen.conda_channel import build_channel, write_fixture_profile
from fuzz_helpers import env_vars


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
