"""Errors that end a command with exit code 2 (bad usage or bad input).

Every message names the file (and line, where there is one) so that the user can fix the input
without reading a traceback.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union


class EnvbuildError(Exception):
    """Bad usage or bad input: printed as one clear message, exit code 2."""

    exit_code = 2


class InputFileError(EnvbuildError):
    """A file the user gave us (profile, lockfile, bundle) is malformed."""

    def __init__(self, path: Union[str, Path], message: str, line: Optional[int] = None):
        self.path = Path(path)
        self.line = line
        where = f"{self.path}:{line}" if line else str(self.path)
        super().__init__(f"{where}: {message}")
