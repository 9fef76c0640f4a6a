"""Live progress of a doctor run: each check's verdict and time as it finishes, and what runs now.

A `--full` run takes minutes; silence reads as a hang, in a terminal and in a Slurm log alike. In a
terminal a rich status line shows the running check, its elapsed time and an estimate of what is left
(from the durations this node's previous runs recorded); in a pipe or a log every finished check is one
plain line, flushed at once, so `tail -f` and Slurm's output file show it as it happens, and a check that
runs longer than ENVBUILD_PROGRESS_INTERVAL seconds (default 30) adds a `doctor: [i/N] id  T  (running)`
line each interval (a ten-minute train step is not ten silent minutes in a log). `--quiet` prints
nothing here (the final verdict line stays). The lines are drawn by envbuild.progress.Display, the one
display `lock`, `create` and `pack` use too.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import IO, Any, Dict, List, Optional

from envbuild.progress import Display, Heartbeat, fmt_seconds
from envbuild.report.model import Result, Status

STATUS_WORD = {Status.PASS: "PASS", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.SKIP: "skip",
               Status.ERROR: "ERROR"}
STATUS_STYLE = {Status.PASS: "green", Status.WARN: "yellow", Status.FAIL: "bold red", Status.SKIP: "dim",
                Status.ERROR: "bold magenta"}
SUMMARY_CHARS = 110


def durations_path() -> Path:
    """Where finished runs leave each check's duration, read back as the next run's estimate."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "envbuild" / "doctor-durations.json"


def load_durations(mode: str, path: Optional[Path] = None) -> Dict[str, float]:
    """check id -> seconds it took in the last run of `mode` on this node; {} when none was recorded or the
    file is unreadable (an estimate is a nicety, never a reason to fail)."""
    try:
        data = json.loads((path or durations_path()).read_text(encoding="utf-8"))
        table = data.get(mode) if isinstance(data, dict) else None
        return {str(k): float(v) for k, v in (table or {}).items() if isinstance(v, (int, float))}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def save_durations(mode: str, seconds: Dict[str, float], path: Optional[Path] = None) -> None:
    """Merge this run's per-check seconds into the durations file; failures to write are ignored."""
    from envbuild.fsutil import atomic_write_text

    target = path or durations_path()
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    table = data.get(mode) if isinstance(data.get(mode), dict) else {}
    table.update({k: round(v, 2) for k, v in seconds.items()})
    data[mode] = table
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(target, json.dumps(data, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass


class Progress:
    """Told when each check starts (`start`) and of each result (`result`); prints as described above.

    `total` is the number of checks the run will execute, `estimates` the seconds each took last time.
    """

    def __init__(self, total: int, estimates: Optional[Dict[str, float]] = None, quiet: bool = False,
                 stream: Optional[IO[str]] = None):
        self.total = total
        self.estimates = dict(estimates or {})
        self.quiet = quiet
        self.display = Display(stream=stream, quiet=quiet)
        self.live = self.display.tty
        self.done = 0
        self.durations: Dict[str, float] = {}
        self._current: Optional[str] = None
        self._pending: List[str] = []
        self._started_at = 0.0
        self._beat: Optional[Heartbeat] = None

    # --- the runner's hooks -------------------------------------------------------------------------
    def start(self, check: Any, remaining: Optional[List[str]] = None) -> None:
        """A check begins; `remaining` are the ids still to run after it (for the estimate)."""
        self._finish_current()
        self._current = check.id
        self._pending = list(remaining or [])
        self._started_at = time.monotonic()
        self.display.show(self.status_text)
        self._beat = Heartbeat.start(self.display, lambda: f"doctor: {self.status_text()}  (running)")

    def result(self, result: Result) -> None:
        """One result of the running check (a check may give several: one per GPU pair)."""
        if self.quiet:
            return
        took = time.monotonic() - self._started_at if self._current == result.check_id else result.duration_s
        line = (f"[{self.done + 1:>{len(str(self.total))}}/{self.total}] {STATUS_WORD[result.status]:<5} "
                f"{result.check_id}  {fmt_seconds(took or 0.0)}  {_one_line(result.summary)}")
        self.display.line(line, style=STATUS_STYLE[result.status])

    def stop(self) -> None:
        """The run ended (or was interrupted): close the status line."""
        self._finish_current()
        self.display.hide()

    # --- internals ------------------------------------------------------------------------------------
    def _finish_current(self) -> None:
        if self._beat is not None:
            self._beat.stop()
            self._beat = None
        if self._current is not None:
            self.durations[self._current] = time.monotonic() - self._started_at
            self.done += 1
            self._current = None

    def left_estimate(self) -> Optional[float]:
        """Seconds the running check and those after it should still take, from the recorded durations;
        None when any of them has no record (a guess would mislead more than no estimate)."""
        if self._current is None:
            return None
        ids = [self._current] + self._pending
        if any(i not in self.estimates for i in ids):
            return None
        elapsed = time.monotonic() - self._started_at
        return max(0.0, self.estimates[self._current] - elapsed) + sum(self.estimates[i] for i in self._pending)

    def status_text(self) -> str:
        elapsed = time.monotonic() - self._started_at
        text = f"[{self.done + 1}/{self.total}] {self._current}  {fmt_seconds(elapsed)}"
        left = self.left_estimate()
        if left is not None:
            text += f"  · about {fmt_seconds(left)} left"
        return text


def _one_line(text: str) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= SUMMARY_CHARS else flat[: SUMMARY_CHARS - 1] + "…"
