"""A disk that fills up mid-write, without root: RLIMIT_FSIZE in the child, with SIGXFSZ ignored so that a write
past the cap fails with EFBIG ("File too large") instead of killing the process. Python restores SIGXFSZ's default
in the processes that child starts, so they (uv, pip) die of the signal at the cap instead."""
import resource
import signal
from typing import Callable


def file_size_cap(max_bytes: int) -> Callable[[], None]:
    """A `preexec_fn` for subprocess: no file the child writes may grow past `max_bytes`."""
    def cap() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return cap
