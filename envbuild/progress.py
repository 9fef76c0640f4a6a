"""What a long envbuild command shows while it works: one module for `lock`, `create`, `pack` and `doctor`.

Why: a `lock --only pip` was silent for 42 s and a `doctor --full` for ten minutes; silence reads as a hang,
in a terminal and in a Slurm or CI log alike. Everything here goes to stderr (stdout stays for results a
script reads: `lock` and `pack` summaries, `doctor --json -`, `profiles`).

- `Display` is where the lines go: in a terminal a rich live line under the permanent ones (redrawn eight
  times a second, so an elapsed time ticks even when nothing else moves); in a pipe or a file one plain
  line per event, flushed at once; with `quiet` nothing.
- `Steps` gives a command its phases: each phase says when it starts and ends, with its time and what it
  did (files, bytes, rate). In a terminal the running phase is a spinner with a bar when the totals are
  known; in a pipe a phase that runs longer than ENVBUILD_PROGRESS_INTERVAL seconds (default 30) prints a
  `still running` line each interval, so a log is never silent for long either.

The doctor's per-check progress (envbuild.report.progress) draws through the same `Display`.
Stdlib only at import time: rich is imported when a terminal needs it.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import IO, Any, Callable, Iterator, List, Optional

DEFAULT_INTERVAL_S = 30.0


def fmt_seconds(seconds: float) -> str:
    """1.23 s / 12.3 s / 2 min 05 s."""
    if seconds < 10:
        return f"{seconds:.2f} s"
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


def fmt_bytes(n: float) -> str:
    """Bytes in binary units: 512 B, 3.1 KiB, 12.0 MiB, 1.25 GiB."""
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB"):
        n /= 1024
        if n < 1024:
            return f"{n:.1f} {unit}"
    return f"{n / 1024:.2f} GiB"


def interval_s() -> float:
    """Seconds between `still running` lines in a pipe (ENVBUILD_PROGRESS_INTERVAL; 0 turns them off)."""
    try:
        return max(0.0, float(os.environ.get("ENVBUILD_PROGRESS_INTERVAL", DEFAULT_INTERVAL_S)))
    except ValueError:
        return DEFAULT_INTERVAL_S


class Display:
    """Permanent lines plus, in a terminal, one live line below them (see the module docstring)."""

    def __init__(self, stream: Optional[IO[str]] = None, quiet: bool = False, tty: Optional[bool] = None):
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        if tty is None:
            tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.tty = bool(tty) and not quiet
        self._console = None
        self._live = None
        self._spinner = None
        self._render: Optional[Callable[[], Any]] = None
        self._lock = threading.Lock()

    def line(self, text: str, style: Optional[str] = None) -> None:
        """One permanent line (above the live line in a terminal; flushed at once elsewhere)."""
        if self.quiet:
            return
        if self.tty:
            from rich.text import Text

            self.console().print(Text(text, style=style or ""), soft_wrap=True)
            return
        with self._lock:
            self.stream.write(text + "\n")
            self.stream.flush()

    def console(self):
        """The rich Console drawing on the stream (terminal only)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.stream, highlight=False, force_terminal=True)
        return self._console

    def show(self, render: Callable[[], Any]) -> None:
        """Keep `render()` (a str or a rich renderable) as the live line until `hide`; a no-op outside a terminal."""
        if not self.tty:
            return
        self._render = render
        if self._live is None:
            from rich.live import Live
            from rich.spinner import Spinner

            self._spinner = Spinner("dots", style="cyan")  # one instance: its frame follows the time since start
            self._live = Live(get_renderable=self._renderable, console=self.console(), refresh_per_second=8,
                              transient=True, redirect_stdout=False, redirect_stderr=False)
            self._live.start()

    def _renderable(self):
        from rich.text import Text

        try:
            body = self._render() if self._render is not None else ""
        except Exception:  # the live line is cosmetic: never let it break a run
            body = ""
        self._spinner.update(text=Text(body) if isinstance(body, str) else body)
        return self._spinner

    def hide(self) -> None:
        """Take the live line away (the permanent lines stay)."""
        if self._live is not None:
            self._live.stop()
            self._live = None
        self._render = None


class Phase:
    """The running phase of a `Steps`: counters the work advances (from any thread) and what it is on now."""

    def __init__(self, steps: "Steps", name: str, total: Optional[int], unit: str, total_bytes: Optional[int]):
        self.steps, self.name, self.total, self.unit, self.total_bytes = steps, name, total, unit, total_bytes
        self.done = 0
        self.bytes = 0
        self.result = ""  # what the end line says it did; default: the counters
        self._detail = ""
        self._lock = threading.Lock()
        self.started = time.monotonic()

    def advance(self, n: int = 1) -> None:
        """`n` more of the phase's `total` items done."""
        with self._lock:
            self.done += n

    def add_bytes(self, n: int) -> None:
        """`n` more bytes moved (fetched, copied, hashed)."""
        with self._lock:
            self.bytes += n

    def set_total(self, total: Optional[int] = None, total_bytes: Optional[int] = None) -> None:
        if total is not None:
            self.total = total
        if total_bytes is not None:
            self.total_bytes = total_bytes

    def detail(self, text: str) -> None:
        """What the phase is on now: shown on the live line and in `still running` lines, not logged."""
        self._detail = " ".join(str(text).split())

    def log(self, text: str) -> None:
        """A permanent sub-line of this phase (e.g. a tool's own summary: `uv: Resolved 12 packages in 2.1s`)."""
        self.steps.display.line(f"{self.steps.prefix}{self.name}: {text}")

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def still_running(self) -> str:
        """The line a pipe gets each interval while the phase runs."""
        what = ", ".join(x for x in (self.amounts(), self._detail) if x)
        return (f"{self.steps.prefix}{self.name}: still running, {fmt_seconds(self.elapsed())}"
                + (f" ({what})" if what else ""))

    def amounts(self) -> str:
        """`87/208 files, 5.2/12.7 MiB, 3.1 MiB/s` from the counters that were used."""
        parts: List[str] = []
        if self.total is not None or self.done:
            parts.append(f"{self.done}/{self.total} {self.unit}" if self.total is not None else f"{self.done} {self.unit}")
        if self.total_bytes is not None or self.bytes:
            shown = fmt_bytes(self.bytes)
            if self.total_bytes:
                shown = f"{shown} of {fmt_bytes(self.total_bytes)}"
            elapsed = self.elapsed()
            if self.bytes and elapsed > 0:
                shown += f", {fmt_bytes(self.bytes / elapsed)}/s"
            parts.append(shown)
        return ", ".join(parts)

    def render(self):
        """The live line: name, a bar when a total is known, the amounts, what it is on, the elapsed time."""
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        grid = Table.grid(padding=(0, 1))
        row: List[Any] = [f"{self.steps.prefix}{self.name}"]
        if self.total_bytes:
            row.append(ProgressBar(total=self.total_bytes, completed=min(self.bytes, self.total_bytes), width=24))
        elif self.total:
            row.append(ProgressBar(total=self.total, completed=min(self.done, self.total), width=24))
        tail = ", ".join(x for x in (self.amounts(), self._detail[:60]) if x)
        row.append(f"{tail}  {fmt_seconds(self.elapsed())}" if tail else fmt_seconds(self.elapsed()))
        for _ in row:
            grid.add_column(no_wrap=True)
        grid.add_row(*row)
        return grid


class Steps:
    """A command's phases, announced as they start and end (module docstring). `command` prefixes each line
    (`lock`, `create`, `pack`); `quiet` prints none of them."""

    def __init__(self, command: str, quiet: bool = False, stream: Optional[IO[str]] = None,
                 tty: Optional[bool] = None):
        self.prefix = f"{command}: " if command else ""
        self.display = Display(stream=stream, quiet=quiet, tty=tty)

    @contextlib.contextmanager
    def phase(self, name: str, total: Optional[int] = None, unit: str = "files",
              total_bytes: Optional[int] = None, reads_input: bool = False) -> Iterator[Phase]:
        """Run one phase: `<command>: <name> ...` as it starts, `<command>: <name>: done in 1.20 s (what)`
        as it ends, `... failed after` / `... interrupted after` when it raises (the error itself is the
        caller's to print). `reads_input` (reading the profile, the locks): no start line and no failed
        line, so bad input stays the one line that names the file; the end line and the live line stay."""
        ph = Phase(self, name, total, unit, total_bytes)
        if not self.display.tty and not reads_input:
            self.display.line(f"{self.prefix}{name} ...")
        self.display.show(ph.render)
        beat = Heartbeat.start(self.display, ph.still_running)
        ended = "failed"
        try:
            yield ph
            ended = "done"
        except KeyboardInterrupt:
            ended = "interrupted"
            raise
        finally:
            if beat:
                beat.stop()
            self.display.hide()
            took = fmt_seconds(ph.elapsed())
            if ended == "done":
                what = ph.result or ph.amounts()
                self.display.line(f"{self.prefix}{name}: done in {took}" + (f" ({what})" if what else ""),
                                  style="green")
            elif not (reads_input and ended == "failed"):
                self.display.line(f"{self.prefix}{name}: {ended} after {took}", style="red")


class Heartbeat:
    """In a pipe or a file: the line `text()` every ENVBUILD_PROGRESS_INTERVAL seconds until `stop` (one
    daemon thread), so a long step is never silent in a log; nothing in a terminal (the live line ticks
    there) or with quiet."""

    def __init__(self, display: Display, text: Callable[[], str], every: float):
        self.display, self.text, self.every = display, text, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="envbuild-progress", daemon=True)

    @classmethod
    def start(cls, display: Display, text: Callable[[], str]) -> Optional["Heartbeat"]:
        every = interval_s()
        if display.tty or display.quiet or every <= 0:
            return None
        beat = cls(display, text, every)
        beat._thread.start()
        return beat

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.display.line(self.text())
            except Exception:  # cosmetic: never let it break a run
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


__all__ = ["Display", "Steps", "Phase", "Heartbeat", "fmt_seconds", "fmt_bytes", "interval_s"]
