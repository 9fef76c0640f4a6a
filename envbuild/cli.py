"""The `envbuild` command line: a Click group that loads each command's module only when it runs.

`envbuild --help` must stay fast on a login node, so this file imports nothing but click (and the shared option
pieces, envbuild/cmdoptions.py, which import only click); each command lives in envbuild/commands/<name>.py and is
imported on first use.
"""
from __future__ import annotations

import sys
from typing import Dict, List, Optional, Tuple

import click

from envbuild import __version__
from envbuild.cmdoptions import LazyGroup

# name -> (module, attribute, one-line help shown by `envbuild --help` without importing the module)
COMMANDS: Dict[str, Tuple[str, str, str]] = {
    "create": ("envbuild.commands.create", "create", "Build the profile's pinned environment, atomically."),
    "doctor": ("envbuild.commands.doctor", "doctor", "Prove the node and the environment sound; name what breaks."),
    "lock": ("envbuild.commands.lock", "lock", "Solve and write the profile's hashed lockfiles (or --check them)."),
    "pack": ("envbuild.commands.pack", "pack", "Write an offline bundle: local channel, wheelhouse, git mirrors, locks."),
    "profiles": ("envbuild.commands.profiles", "profiles", "List the reference-image profiles, or show one."),
    "capture": ("envbuild.commands.capture", "capture", "Save the node's facts (--node) or an image's stack (--env)."),
    "explain": ("envbuild.commands.explain", "explain", "Rank the likely causes of a failed run from its logs."),
    "report": ("envbuild.commands.report", "report", "Work on written reports: merge node reports, render HTML."),
    "record": ("envbuild.commands.record", "record", "Record every process of a Ray job into a run dir; collect it."),
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="envbuild")
def cli() -> None:
    """Rebuild an RL framework's Docker image as a pinned conda env, then prove it and the node sound.

    \b
    envbuild profiles        # which locks each profile has, what builds on this machine
    envbuild create --profile slime-v0.3.1-cu130 --backend venv --python 3.12 --prefix ~/envs/slime
    envbuild doctor --profile slime-v0.3.1-cu130 --prefix ~/envs/slime
    """
    from envbuild.outputs import release_stdout

    release_stdout()  # each invocation claims stdout for at most one report afresh


def main(argv: Optional[List[str]] = None) -> None:
    """Console entry point. Bad usage or bad input exits 2 with one clear line, never a traceback; Ctrl-C at any
    moment (also while modules load) exits 130 with one line."""
    import signal

    try:
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)  # envbuild/__init__.py's early handler is done
            sys.unraisablehook = _interrupt_again_where_it_can_be_raised
        code = _run(argv)
    except KeyboardInterrupt:
        code = 130
        _say("interrupted")
    except RuntimeError as exc:  # Python < 3.12 wraps a Ctrl-C landing in a class body's __set_name__ (a dataclass
        if not isinstance(exc.__cause__, KeyboardInterrupt):  # being defined while its module loads) in this
            raise
        code = 130
        _say("interrupted")
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the exit itself is not interrupted into a traceback
    except ValueError:  # not the main thread (an embedding program)
        pass
    sys.exit(code)


def _interrupt_again_where_it_can_be_raised(unraisable) -> None:
    """A stop signal that lands in a callback Python cannot raise from (a weakref callback of importlib's module
    locks, a __del__) would print "Exception ignored in ... Traceback". A Ctrl-C is delivered again to the main
    thread, where main() turns it into exit 130 with one line. The doctor's Stopped (envbuild.doctor.interrupt)
    is dropped quietly: its handler recorded the signal before raising, and the run ends with 128 + that signal
    once its checks finish. Anything else goes to Python's own hook."""
    exc = unraisable.exc_value
    if isinstance(exc, KeyboardInterrupt):  # re-sent from a timer thread: sent from here, it lands in this hook
        import _thread
        import threading

        timer = threading.Timer(0.05, _thread.interrupt_main)
        timer.daemon = True
        timer.start()
        return
    if not isinstance(exc, Exception) and getattr(exc, "signum", None) is not None:
        return
    sys.__unraisablehook__(unraisable)


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _run(argv: Optional[List[str]]) -> int:
    from envbuild.errors import EnvbuildError

    try:
        rv = cli.main(args=argv, prog_name="envbuild", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return 2
    except click.exceptions.Abort:
        _say("aborted")
        return 130
    except EnvbuildError as exc:
        click.echo(f"envbuild: error: {exc}", err=True)
        return exc.exit_code
    except ModuleNotFoundError as exc:  # an installation without one of envbuild's dependencies (py-rattler, ...)
        click.echo(f"envbuild: error: module {exc.name!r} not found: this envbuild installation lacks a package it "
                   f"depends on; reinstall it with its dependencies (pip install envbuild)", err=True)
        return 2
    except OSError as exc:  # the machine refused a read or write: a full disk, a quota, a read-only folder
        click.echo(f"envbuild: error: {_os_error_line(exc)}", err=True)
        return 2  # as for an output path that cannot be written (`--json PATH: cannot write: ...`)
    return rv if isinstance(rv, int) else 0


def _os_error_line(exc: OSError) -> str:
    """One line for an operating-system failure that no command turned into its own message: what the system
    said, the file it said it of, and for a full disk or quota where to look. The command's own cleanup (a pack's
    half-written bundle, a create's staging prefix) has already run on the way out."""
    import errno

    what = exc.strerror or str(exc)
    files = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    if not files:
        return what
    if full or exc.errno == errno.EROFS:
        line = f"cannot write {files}: {what}"
        return line + " (free space on that filesystem, or give a path on another one)" if full else line
    return f"{files}: {what}"
