"""Turn SIGINT, SIGTERM and SIGHUP into one clean stop of a doctor run.

Slurm's scancel and `timeout` send SIGTERM, a closed terminal SIGHUP, Ctrl-C SIGINT. Python's defaults
would kill the doctor at once on the first two — the launcher's cleanup never runs and payload ranks keep
holding GPU memory. Here the first signal raises `Stopped` in the main thread, so every `finally` runs (the
launcher kills its ranks, the session writes the report of the checks finished so far); a second signal
while that cleanup runs is remembered, not raised, so the cleanup itself cannot be cut short. The exit code
is 128 + the first signal's number (130, 143, 129), as a shell reports a death by that signal.
"""
from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Dict, Iterator, List, Optional
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """Raised in the main thread by the first stop signal. A BaseException, like KeyboardInterrupt, so a
    check's `except Exception` cannot swallow it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopSignals:
    """The handlers' state: the signals received, in order (the first one decides the exit code)."""

    def __init__(self) -> None:
        self.received: List[int] = []
        self.held = False

    def handle(self, signum: int, frame: Optional[FrameType]) -> None:
        if not self.received and not self.held and _inside_import_machinery(frame):
            _deliver_again(signum)  # raised here, it could leave the import lock held: every thread's import hangs
            return
        self.received.append(signum)
        if len(self.received) == 1 and not self.held:
            raise Stopped(signum)

    def hold(self) -> None:
        """From now on record stop signals without raising: the checks are over and what is left (writing and
        printing the report) must finish; the caller exits 128 + `first` afterwards."""
        self.held = True

    @property
    def first(self) -> Optional[int]:
        return self.received[0] if self.received else None


def _inside_import_machinery(frame: Optional[FrameType]) -> bool:
    """Whether the main thread was stopped inside importlib's own code. There an exception can land between
    `_imp.acquire_lock()` and the `try:` that releases it (CPython 3.11's _get_module_lock and its weakref
    callback): the global import lock stays held, and the next import in any thread waits for it forever. Seen:
    a SIGHUP 0.12 s into a doctor run, while its stack and NVML threads were importing, hung it for good."""
    return frame is not None and frame.f_code.co_filename.startswith("<frozen importlib")


def _deliver_again(signum: int) -> None:
    """The same signal, sent to this process again 10 ms later from a timer thread; Python runs its handler in the
    main thread at the next bytecode, by then (nearly always) outside the import machinery; if not, it waits again."""
    import os

    timer = threading.Timer(0.01, os.kill, (os.getpid(), signum))
    timer.daemon = True
    timer.start()


@contextmanager
def stop_on_signals() -> Iterator[StopSignals]:
    """Within the block, the first of SIGINT/SIGTERM/SIGHUP raises Stopped; later ones are recorded only.

    Outside the main thread (a Ray actor's task thread, a test runner's worker) signal handlers cannot be
    installed; the block then runs with the handlers it found."""
    state = StopSignals()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    previous: Dict[int, object] = {}
    for sig in SIGNALS:
        try:
            previous[sig] = signal.signal(sig, state.handle)
        except (ValueError, OSError):  # pragma: no cover - not the main thread after all, or no such signal
            pass
    try:
        yield state
    finally:
        # Keep ignoring stop signals until the old handlers are back, so none lands between two restores.
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
