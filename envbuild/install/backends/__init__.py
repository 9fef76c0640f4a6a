"""The installers `envbuild create --backend` can use to lay down an env's base layer, one module each.

Shape (pre-commit's languages/): every backend is a module envbuild/install/backends/<name>.py with the
same few names, and this registry is the only list of them. `create --backend` takes its choices from
NAMES without importing any backend (so `--help` stays fast); the one chosen is imported when it runs.

A backend module defines:

    HELP: str                       one line for `create --help` and the docs
    USES_CONDA_LOCK: bool           True: it installs the verified archives of conda-lock.yml (the conda
                                    backends); False: a PyPI-only backend that builds the base itself
    PER_PACKAGE_PROGRESS: bool      True when install() calls `advance` once per package (a progress bar)
    def health_check() -> Optional[str]
        None when the backend can run here, else one line saying what is missing and how to get it
        (asked before any work, so a missing executable is exit 2 with nothing written)
    def install(request: BaseRequest, advance: Optional[Callable[[], None]] = None) -> None
        build the base env in request.staging so that its files name request.target as their prefix;
        raise EnvbuildError with the installer's own words on failure

Adding a backend: write its module, add its name to NAMES, add a docs row (docs/backends.md).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Optional, Sequence

from envbuild.errors import EnvbuildError

NAMES = ("rattler", "micromamba", "conda", "venv")  # venv: the PyPI-only backend (issue 15)
DEFAULT = "rattler"


@dataclass(frozen=True)
class BaseRequest:
    """What a backend needs to build the base layer; no backend reads the profile or the lock itself."""

    staging: Path  # where the env is built (an empty folder or a resumed one)
    target: Path  # where it will live after the swap: installed files must name this prefix
    archives: Sequence[Path]  # verified conda archives in lock order (empty when USES_CONDA_LOCK is False)
    python: str  # the profile's Python version ("3.12"), for a backend that picks its own interpreter
    cache: Path  # envbuild's cache root; a backend keeps its own caches under it
    interpreter: Optional[Path] = None  # create --python: the interpreter a PyPI-only backend builds on


def get(name: str) -> ModuleType:
    """The backend module `name`; an unknown name is bad usage naming the known ones."""
    if name not in NAMES:
        raise EnvbuildError(f"unknown backend {name!r}; one of {', '.join(NAMES)}")
    return importlib.import_module(f"envbuild.install.backends.{name}")


def require(name: str) -> ModuleType:
    """The backend module `name`, after its health check passed (else EnvbuildError with the fix)."""
    backend = get(name)
    problem = backend.health_check()
    if problem:
        raise EnvbuildError(f"--backend {name}: {problem}")
    return backend
