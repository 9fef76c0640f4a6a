import subprocess
import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).parent / "corpus"
FIXTURES = Path(__file__).parent / "fixtures"


def _run(*args: str, stdin: bytes = b"", **kw) -> subprocess.CompletedProcess:
    """`envbuild explain ARGS` as a user runs it: its exit code, stdout and stderr."""
    return subprocess.run([sys.executable, "-m", "envbuild", "explain", *args], input=stdin,
                          capture_output=True, **kw)


@pytest.fixture
def explain():
    return _run
