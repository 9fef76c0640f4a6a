"""What an environment variable's value, or a prefix that goes on PATH, can hold: checked when the profile is
read and before create builds anything, instead of failing later or silently.

- a NUL byte cannot be in any environment string (execve's strings end at the first NUL): bash drops what follows;
- a NAME=value string of MAX_ARG_STRLEN (32 pages: 131072 bytes on Linux) or more makes every later execve
  fail with E2BIG ("Argument list too long"), so an activated shell could not start any program;
- a prefix that is not valid UTF-8 (a byte Python keeps as a surrogate) cannot be written into the UTF-8
  activation scripts and failed late in create.
"""
from __future__ import annotations

from typing import Optional

MAX_ARG_STRLEN = 32 * 4096  # linux/binfmts.h: the longest single argv or environment string, NUL included


def value_problem(name: str, value: str) -> Optional[str]:
    """Why `name=value` cannot be exported as an environment variable, or None."""
    if "\0" in value:
        return f"{name}'s value contains a NUL byte, which no environment variable can hold"
    try:
        size = len(f"{name}={value}".encode("utf-8")) + 1
    except UnicodeEncodeError:
        return f"{name}'s value is not valid UTF-8 text"
    if size >= MAX_ARG_STRLEN:
        return (f"{name}'s value makes a {size}-byte environment string; the kernel refuses those of "
                f"{MAX_ARG_STRLEN} bytes or more (every program started from the activated shell would fail with "
                "'Argument list too long')")
    return None


def prefix_problem(prefix: str) -> Optional[str]:
    """Why `prefix` cannot be written into the activation scripts, or None (':' and control characters are
    envbuild.install.activation.check_prefix's)."""
    try:
        prefix.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = prefix[exc.start].encode("utf-8", "surrogateescape")
        return (f"prefix {prefix!r}: byte 0x{byte.hex()} at position {exc.start} is not UTF-8; the activation scripts "
                "are UTF-8 text: choose a prefix of UTF-8 characters")
    return None
