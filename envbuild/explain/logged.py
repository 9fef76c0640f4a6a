"""Exceptions a program logged and went on from, told apart from the one that ended it.

`logger.exception("...")` (or `logger.error(..., exc_info=True)`) prints an error-level record and the traceback
directly under it; Python's own end of a program prints a traceback under nothing of the kind. A program that logged
its exception and then kept logging at INFO in the same format, with nothing louder after the traceback, handled it:
a kernel that failed to compile and was rebuilt, a request that failed while the server served on. On the corpus
(1720 logs, session 27): 51 logs hold a traceback under an error-level record, 23 healthy and 28 faults; the rule holds
for 8 of the healthy ones (our GPU runs; gpu-s28-03 and -05 only since a last record that says the program stops was
allowed after more than SLACK lines) and none of the faults. Most of the other healthy ones end on a line that is not a
record (a table, a summary), which the rule does not read as going on.

One tracker per source: the scanner tells it of each traceback it reads (with the line above it) and of each
exception line, and gives it the source's last line at the end.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from envbuild.explain.records import record_shape

# the record above a traceback: logging's level names that a handled exception is logged at
_ERROR_LEVELS = frozenset({"ERROR", "WARNING", "WARN", "CRITICAL"})
_GOING_ON_LEVELS = frozenset({"INFO", "NOTICE"})
# a last record that says the program failed; one that says it stops is read as going on only where the program did
# more than stop after the traceback (more than SLACK lines after it: "shutdown complete" after a load test, not
# "shutting down" right under the exception it logged)
_FAILING = re.compile(r"(?i)\b(?:fail|error|abort|crash|kill|terminat|fatal)|\bexit(?:ed)?(?: with)?(?: code| status)? ?[1-9]|non-?zero")
_STOPPING = re.compile(r"(?i)\b(?:shut(?:ting)?\s*down|exit|stopp?(?:ing|ed)|cancel)")
_CHAINED = ("The above exception was the direct cause", "During handling of the above exception")
# lines after a logged traceback's last exception line that may still belong to it (an exception message over several
# lines: Triton's CompilationError quotes the kernel source)
SLACK = 12


@dataclass
class _Span:
    start: int  # the error-level record's line
    end: int = -1  # the last exception line of the traceback (and of those chained to it); -1 while it is read


class LoggedExceptions:
    """Per source: the first logged traceback's record line, the last one's span, the record shapes that logged
    them, and whether a traceback or an exception line that no record announced came after (a crash: the rule does
    not apply)."""

    def __init__(self) -> None:
        self._start: Optional[int] = None
        self._last: Optional[_Span] = None
        self._shapes: set = set()
        self._unlogged = False

    def traceback(self, line_no: int, above: str) -> None:
        """A `Traceback (most recent call last):` line; `above` is the nearest non-blank line before it."""
        if any(above.startswith(c) for c in _CHAINED):  # the same report goes on: read to its last exception line
            if self._last is not None and self._last.end >= 0 and line_no - self._last.end <= 4:
                self._last.end = -1
            return
        shape = record_shape(above)
        if shape is None or shape[0] not in _ERROR_LEVELS:
            if self._last is not None:
                self._unlogged = True
            return
        self._last = _Span(line_no - 1)
        if self._start is None:
            self._start = self._last.start
        self._shapes.add(shape[1])

    def exception(self, line_no: int) -> None:
        """An exception line: the end of the logged traceback being read (or of one chained to it), else one more
        exception reported after it, which the program did not log first."""
        if self._last is None:
            return
        if self._last.end < 0:
            self._last.end = line_no
        else:
            self._unlogged = True

    def went_on_from(self, last_line: str, last_no: int, last_loud: int) -> Optional[int]:
        """The line from which failures were logged and gone on from, or None. `last_line`/`last_no`: the source's
        last non-blank line; `last_loud`: the last line a failure was printed on not at a warning or info level."""
        span = self._last
        if span is None or self._unlogged or span.end < 0 or last_no <= span.end:
            return None
        shape = record_shape(last_line)
        if shape is None or shape[0] not in _GOING_ON_LEVELS or shape[1] not in self._shapes:
            return None
        if _FAILING.search(last_line) or (_STOPPING.search(last_line) and last_no - span.end <= SLACK):
            return None
        if last_loud > span.end + SLACK:
            return None
        return self._start
