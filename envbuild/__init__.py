"""envbuild: rebuild an RL framework's Docker image as a pinned conda env, and prove the node sound."""

__version__ = "0.1.0"


def _quiet_early_interrupt() -> None:
    """A Ctrl-C while the CLI is still importing (its first ~40 ms) exits 130 without a traceback.

    Only when this process is the `envbuild` command (the console script, or `python -m envbuild`, during whose
    package import argv[0] is "-m"): a program importing envbuild as a library keeps its own SIGINT handling.
    envbuild.cli.main() hands SIGINT back to Python's default once it is running.
    """
    import os
    import signal
    import sys
    import threading

    argv0 = sys.argv[0] if sys.argv else ""
    if not (os.path.basename(argv0) == "envbuild" or argv0 == "-m"):
        return
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return
    signal.signal(signal.SIGINT, lambda _sig, _frame: os._exit(130))


_quiet_early_interrupt()
