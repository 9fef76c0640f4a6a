"""The upload cutoff of a pip lock (uv's --exclude-newer): a moment already past, written into the lock.

A cutoff hides every file uploaded after it, so the same requirements resolve to the same files at any later
time, on any machine. That holds only if the moment was already past when the lock was made: a cutoff in
the future hides nothing yet, and a re-lock after more uploads differs (a profile that said 2026-12-01
while being locked in November re-locked to newer httpx and smart-open in December). So:

- the profile's `[recipe.pip] exclude_newer`, when set, must lie in the past (else exit 2, saying so);
- without one, a re-lock keeps the cutoff the existing lock recorded, and a first lock takes the current
  second; either way it is written into the lock's header, and only a change to the profile moves it.
"""
from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Optional

from envbuild.errors import EnvbuildError

HEADER = "# exclude-newer: "
_RECORDED = re.compile(r"^# exclude-newer: (\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z)$", re.M)


def parse(value: str) -> dt.datetime:
    """An RFC 3339 time or a date (midnight UTC) as an aware datetime."""
    text = value.strip().replace("Z", "+00:00")
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        text += "T00:00:00+00:00"
    moment = dt.datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.timezone.utc)


def render(moment: dt.datetime) -> str:
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def recorded(lock_file: Path) -> Optional[str]:
    """The cutoff an existing pip lock was resolved with (its header line), or None."""
    try:
        with open(lock_file, encoding="utf-8", errors="replace") as fh:
            head = fh.read(64 * 1024)
    except OSError:
        return None
    m = _RECORDED.search(head)
    return m.group(1) if m else None


def lock_cutoff(declared: str, lock_file: Path, profile_file: Path, now: Optional[dt.datetime] = None) -> str:
    """The cutoff to resolve with: `declared` (the profile's, checked to be past), else the one `lock_file`
    recorded, else now; always in the form the lock header writes."""
    now = now or dt.datetime.now(dt.timezone.utc)
    if declared:
        moment = parse(declared)
        if moment > now:
            raise EnvbuildError(f"{profile_file}: [recipe.pip] exclude_newer = {declared} is in the future: files "
                                f"uploaded before it would still change a re-lock; use a moment already past "
                                f"(now is {render(now)}) or remove it to let the lock record the time it was made")
        return render(moment)
    return recorded(lock_file) or render(now)
