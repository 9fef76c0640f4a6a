"""Errors that end a command with exit code 2 (bad usage or bad input).

Every message names the file (and line, where there is one) so that the user can fix the input
without reading a traceback.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, Optional, Union


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


def read_input_text(path: Union[str, Path], what: str, max_bytes: Optional[int] = None) -> str:
    """The UTF-8 text of an input file; one that cannot be read is an InputFileError naming it and `what` it is.
    Regular files only, of at most `max_bytes` (default envbuild.fsutil.INPUT_MAX_BYTES): see read_bounded."""
    from envbuild.fsutil import INPUT_MAX_BYTES, InputRefused, read_bounded

    path = Path(path)
    try:
        data = read_bounded(path, INPUT_MAX_BYTES if max_bytes is None else max_bytes)
    except InputRefused as exc:
        raise InputFileError(path, f"cannot read {what}: {exc}") from None
    except OSError as exc:
        raise InputFileError(path, f"cannot read {what}: {exc.strerror or exc}") from None
    the = "" if what.startswith(("the ", "a ")) else "the "  # callers say "profile" or "the report"
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputFileError(path, f"{the}{what} is UTF-16 (it starts with a UTF-16 byte-order mark); "
                                   "save it as UTF-8", 1)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise InputFileError(path, f"{the}{what} is not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                                   "save it as UTF-8", line) from None
    return text[1:] if text.startswith("\ufeff") else text  # a UTF-8 byte-order mark is harmless: dropped


def parse_input_toml(path: Union[str, Path], text: str) -> Dict[str, Any]:
    """`text` (read from `path`) parsed as TOML; a syntax error is an InputFileError naming the file and line.

    tomllib reports the line only inside its message before Python 3.14, so it is read from there."""
    from envbuild.tomlcompat import toml

    try:
        return toml.loads(text)
    except RecursionError:
        raise InputFileError(path, "malformed TOML: arrays or tables nested too deeply to read") from None
    except toml.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None)
        if line is None:
            m = re.search(r"line (\d+)", str(exc))
            line = int(m.group(1)) if m else None
        msg = getattr(exc, "msg", str(exc))
        raise InputFileError(path, f"malformed TOML: {msg}", line) from exc


def parse_input_json(path: Union[str, Path], text: str, what: str) -> Any:
    """`text` (read from `path`) parsed as JSON; malformed or too deeply nested JSON is an InputFileError naming the
    file and line (json's C decoder raises RecursionError past ~1000 levels, Python's default limit)."""
    import json

    try:
        return json.loads(text)
    except RecursionError:
        raise InputFileError(path, f"{what}: JSON nested too deeply to read") from None
    except json.JSONDecodeError as exc:
        # cut short: the error is at the end, or a string opened on the last line never closes
        cut = exc.pos >= len(text.rstrip()) or (exc.msg.startswith("Unterminated string") and "\n" not in text[exc.pos:])
        why = "the file ends early (truncated?)" if cut else exc.msg
        raise InputFileError(path, f"{what}: not valid JSON: {why} at column {exc.colno}", exc.lineno) from None

