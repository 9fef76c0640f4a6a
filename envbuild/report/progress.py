"""Live progress of a doctor run: each check's verdict and time as it finishes, and what runs now.

A `--full` run takes minutes; silence reads as a hang, in a terminal and in a Slurm log alike. In a
terminal a rich status line shows the running check, its elapsed time and an estimate of what is left
(from the durations this node's previous runs recorded); in a pipe or a log every finished check is one
plain line, flushed at once, so `tail -f` and Slurm's output file show it as it happens. `--quiet` prints
nothing here (the final verdict line stays).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import IO, Any, Dict, List, Optional

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


def _fmt_s(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


class Progress:
    """Told when each check starts (`start`) and of each result (`result`); prints as described above.

    `total` is the number of checks the run will execute, `estimates` the seconds each took last time.
    """

    def __init__(self, total: int, estimates: Optional[Dict[str, float]] = None, quiet: bool = False,
                 stream: Optional[IO[str]] = None):
        self.total = total
        self.estimates = dict(estimates or {})
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self.live = (not quiet) and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.done = 0
        self.durations: Dict[str, float] = {}
        self._current: Optional[str] = None
        self._pending: List[str] = []
        self._started_at = 0.0
        self._status = None  # rich Status while a check runs in a terminal
        self._console = None
        self._ticker = None  # the thread that refreshes the status line (terminal only)

    # --- the runner's hooks -------------------------------------------------------------------------
    def start(self, check: Any, remaining: Optional[List[str]] = None) -> None:
        """A check begins; `remaining` are the ids still to run after it (for the estimate)."""
        self._finish_current()
        self._current = check.id
        self._pending = list(remaining or [])
        self._started_at = time.monotonic()
        if self.live:
            self._show_status()

    def result(self, result: Result) -> None:
        """One result of the running check (a check may give several: one per GPU pair)."""
        if self.quiet:
            return
        took = time.monotonic() - self._started_at if self._current == result.check_id else result.duration_s
        line = (f"[{self.done + 1:>{len(str(self.total))}}/{self.total}] {STATUS_WORD[result.status]:<5} "
                f"{result.check_id}  {_fmt_s(took or 0.0)}  {_one_line(result.summary)}")
        if self.live:
            self._print_rich(line, result.status)
        else:
            self.stream.write(line + "\n")
            self.stream.flush()

    def stop(self) -> None:
        """The run ended (or was interrupted): close the status line."""
        self._finish_current()
        if self._status is not None:
            self._status.stop()
            self._status = None

    # --- internals ------------------------------------------------------------------------------------
    def _finish_current(self) -> None:
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
        text = f"[{self.done + 1}/{self.total}] {self._current}  {_fmt_s(elapsed)}"
        left = self.left_estimate()
        if left is not None:
            text += f"  · about {_fmt_s(left)} left"
        return text

    def _rich_console(self):
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.stream)
        return self._console

    def _show_status(self) -> None:
        console = self._rich_console()
        if self._status is None:
            self._status = console.status(self.status_text())
            self._status.start()
        else:
            self._status.update(self.status_text())
        _Ticker.ensure(self)

    def _print_rich(self, line: str, status: Status) -> None:
        from rich.text import Text

        self._rich_console().print(Text(line, style=STATUS_STYLE[status]), soft_wrap=True)


class _Ticker:
    """Refreshes the status line's elapsed time and estimate twice a second (rich redraws it; we update the
    text). One daemon thread per Progress."""

    @staticmethod
    def ensure(progress: Progress) -> None:
        import threading

        if progress._ticker is not None:
            return

        def tick() -> None:
            while progress._status is not None:
                if progress._current is not None:
                    try:
                        progress._status.update(progress.status_text())
                    except Exception:  # the status line is cosmetic: never let it break a run
                        return
                time.sleep(0.5)
            progress._ticker = None

        progress._ticker = threading.Thread(target=tick, name="envbuild-progress", daemon=True)
        progress._ticker.start()


def _one_line(text: str) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= SUMMARY_CHARS else flat[: SUMMARY_CHARS - 1] + "…"
