"""Fixtures shared by the lock tests: the local conda channel (built once per module) and a lockfiles
folder holding the fixture profile that solves against it."""
from __future__ import annotations

import pytest

from fixturegen.conda_channel import build_channel, write_fixture_profile


@pytest.fixture(scope="module")
def channel(tmp_path_factory):
    ch = tmp_path_factory.mktemp("channel")
    build_channel(ch)
    return ch


@pytest.fixture
def lockfiles(tmp_path, channel):
    base = tmp_path / "lockfiles"
    write_fixture_profile(base, channel)
    return base
