"""Shared pytest fixtures. Keep this file small: each engineer's fixtures live in their own modules."""
import os
import signal
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    """Ctrl-C reaches every process the tests start, as it does in a user's terminal. A shell starting pytest in
    the background (`nohup ... &`, some CI runners) leaves SIGINT ignored, every child inherits that, and the
    tests that send a child SIGINT would then measure nothing (an ignored signal: the child finishes with 0)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def envbuild_cmd():
    """argv prefix that runs the envbuild CLI of this checkout with the test interpreter."""
    return [sys.executable, "-m", "envbuild"]


@pytest.fixture
def no_gpu_env(monkeypatch):
    """Hide any GPU driver so live runs behave like the CI machine."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return dict(os.environ)


@pytest.fixture(scope="session", autouse=True)
def _own_uv_cache(tmp_path_factory):
    """uv's cache for this test session only: loopback index URLs (127.0.0.1:<port>) are reused by other
    runs' servers with other packages, so a shared ~/.cache/uv could answer with another run's pages."""
    if "UV_CACHE_DIR" not in os.environ:
        os.environ["UV_CACHE_DIR"] = str(tmp_path_factory.mktemp("uv-cache"))
    os.environ.setdefault("UV_HTTP_RETRIES", "0")  # a closed loopback port fails at once, not after backoff
    yield
