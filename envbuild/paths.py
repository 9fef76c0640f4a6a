"""Where envbuild's own data lives: payloads (checks/), templates/ and lockfiles/, and its cache root.

In a source checkout they sit at the repository's top level; in an installed wheel they are package
data under envbuild/data/. Both are looked up here so no other module guesses.
"""
from __future__ import annotations

import os
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
_REPO_DIR = _PACKAGE_DIR.parent


def _top_level(name: str) -> Path:
    in_checkout = _REPO_DIR / name
    if in_checkout.is_dir():
        return in_checkout
    return _PACKAGE_DIR / "data" / name


def payload_dir() -> Path:
    """Directory of the probe programs that run inside the environment under test."""
    return _top_level("checks")


def templates_dir() -> Path:
    return _top_level("templates")


def lockfiles_dir() -> Path:
    return _top_level("lockfiles")


def cache_dir() -> Path:
    """envbuild's cache root: $ENVBUILD_CACHE_DIR, else ~/.envbuild/cache.

    The one place that decides it: verified archives, source-built wheels and extracted bundles all live
    under it, so pointing ENVBUILD_CACHE_DIR elsewhere moves every cache together.
    """
    return Path(os.environ.get("ENVBUILD_CACHE_DIR") or Path.home() / ".envbuild" / "cache").expanduser()
