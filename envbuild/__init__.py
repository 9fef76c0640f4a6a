"""envbuild: rebuild an RL framework's Docker image as a pinned conda env, and prove the node sound."""


def _quiet_early_interrupt() -> None:
    """A Ctrl-C while the CLI is still importing (its first ~40 ms) exits 130 without a traceback.

    Only when this process is the `envbuild` command (the console script, or `python -m envbuild`, during whose
    package import argv[0] is "-m"): a program importing envbuild as a library keeps its own SIGINT handling.
    envbuild.cli.main() hands SIGINT back to Python's default once it is running. Runs first in the package,
    importing only modules the interpreter has already loaded.
    """
    import os
    import signal
    import sys

    argv0 = sys.argv[0] if sys.argv else ""
    if not (os.path.basename(argv0) == "envbuild" or argv0 == "-m"):
        return
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, lambda _sig, _frame: os._exit(130))
    except ValueError:  # not the main thread
        pass


_quiet_early_interrupt()

__version__ = "0.1.0"
