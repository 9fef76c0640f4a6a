"""The one line of a build's log that says what went wrong, for the error message that names the log.

pip wraps every build failure in the same closing lines ("subprocess-exited-with-error", "Encountered error
while generating package metadata"), so the last lines of a log say nothing; the first line that a compiler,
a setup script or the Python interpreter wrote about the failure does.
"""
from __future__ import annotations

import re

_CAUSE = re.compile(r"No module named|\w+Error: |error: (?!subprocess-|metadata-generation|command '.*' failed)"
                    r"|fatal error|: error |undefined reference|cannot find -l")


def cause(text: str) -> str:
    """The first line of `text` that names a cause, else its last non-empty line ('' for an empty log)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    hit = next((ln for ln in lines if _CAUSE.search(ln)), None)
    return (hit or (lines[-1] if lines else ""))[:300]
