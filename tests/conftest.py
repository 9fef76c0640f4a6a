"""Shared pytest fixtures. Keep this file small: each engineer's fixtures live in their own modules."""
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def envbuild_cmd():
    """argv prefix that runs the envbuild CLI of this checkout with the test interpreter."""
    return [sys.executable, "-m", "envbuild"]


@pytest.fixture
def no_gpu_env(monkeypatch):
    """Hide any GPU driver so live runs behave like the CI machine."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return dict(os.environ)
