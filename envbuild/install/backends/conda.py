"""conda from PATH: installs the verified archives from an @EXPLICIT file, offline (see explicit.py)."""
from __future__ import annotations

from typing import Callable, Optional

from envbuild.install.backends import BaseRequest, explicit

HELP = "conda from PATH, offline @EXPLICIT install of the verified archives"
USES_CONDA_LOCK = True
PER_PACKAGE_PROGRESS = False


def health_check() -> Optional[str]:
    return explicit.missing("conda")


def install(request: BaseRequest, advance: Optional[Callable[[], None]] = None) -> None:
    explicit.install("conda", ["--offline", "--no-default-packages"], request)
