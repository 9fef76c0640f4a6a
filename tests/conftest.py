"""Shared pytest fixtures. Keep this file small: each engineer's fixtures live in their own modules."""
import os
import signal
import sys
from pathlib import Path

import pytest

from torch_env import torch_env  # noqa: F401  (defined once: a module importing it installs torch again, 0.9 GB)

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    """Ctrl-C reaches every process the tests start, as it does in a user's terminal. A shell starting pytest in
    the background (`nohup ... &`, some CI runners) leaves SIGINT ignored, every child inherits that, and the
    tests that send a child SIGINT would then measure nothing (an ignored signal: the child finishes with 0)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _stop_signals_kept():
    """Each test leaves the stop signals' handlers as it found them. envbuild.cli.main() ignores SIGINT on its way
    out (the exit itself must not be interrupted into a traceback), so a test running it in-process would leave
    Ctrl-C ignored in every process the later tests start."""
    stops = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
    saved = {s: signal.getsignal(s) for s in stops}
    yield
    for s, handler in saved.items():
        if handler is not None and signal.getsignal(s) is not handler:
            signal.signal(s, handler)


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
