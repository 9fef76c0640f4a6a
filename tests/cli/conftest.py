"""The in-process CLI runner (tests/clirun.py) as a fixture."""
import pytest

from clirun import run_cli


@pytest.fixture
def cli():
    return run_cli
