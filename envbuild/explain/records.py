"""The level word that opens a log record: one reading for the scanner's "printed at a warning or info level"
(scan._soft) and for the record shapes of logged exceptions (logged.py)."""
from __future__ import annotations

import re
from typing import Optional, Tuple

LEVEL = re.compile(r"(?<![\w.])(WARNING|WARN|INFO|DEBUG|TRACE|NOTICE|ERROR|CRITICAL|FATAL|SEVERE)(?![\w])")
_FAILED_WORD = re.compile(r"(?i)error|exception|fail")  # a level word after these is inside the message


def opening_level(head: str) -> Optional["re.Match[str]"]:
    """The first level word of `head` (a line's opening characters) where it opens a record, None where there is
    none or it sits inside a message (`RuntimeError: ... WARNING`)."""
    m = LEVEL.search(head)
    return None if m is None or _FAILED_WORD.search(head[:m.start()]) else m


def record_shape(line: str) -> Optional[Tuple[str, str]]:
    """(level, shape) of a log record: its level word and what precedes and follows it with digits masked
    (`ERROR 2026-12-07 08:21:14,423 [warmup]` and `INFO 2026-...` share a shape). None: not a record."""
    head = line.lstrip()[:96]
    m = opening_level(head)
    if m is None:
        return None
    return m.group(1), re.sub(r"\d", "0", head[:m.start()]) + "|" + head[m.end():m.end() + 1]
