"""The `envbuild` command line: a Click group that loads each command's module only when it runs.

`envbuild --help` must stay fast on a login node, so this file imports nothing but click; each command
lives in envbuild/commands/<name>.py and is imported on first use.
"""
from __future__ import annotations

import importlib
import sys
from typing import Dict, List, Optional, Tuple

import click

from envbuild import __version__

# name -> (module, attribute, one-line help shown by `envbuild --help` without importing the module)
COMMANDS: Dict[str, Tuple[str, str, str]] = {
    "create": ("envbuild.commands.create", "create", "Build the profile's pinned environment, atomically."),
    "doctor": ("envbuild.commands.doctor", "doctor", "Prove the node and the environment sound; name what breaks."),
    "lock": ("envbuild.commands.lock", "lock", "Solve and write the profile's hashed lockfiles (or --check them)."),
    "pack": ("envbuild.commands.pack", "pack", "Write an offline bundle: local channel, wheelhouse, git mirrors, locks."),
    "profiles": ("envbuild.commands.profiles", "profiles", "List the reference-image profiles, or show one."),
    "capture": ("envbuild.commands.capture", "capture", "Save the node's facts (--node) or an image's stack (--env)."),
    "report": ("envbuild.commands.report", "report", "Render doctor reports as one HTML page, or merge a fleet's."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported when invoked, not when the group is built."""

    def list_commands(self, ctx: click.Context) -> List[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> Optional[click.Command]:
        if name not in COMMANDS:
            return None
        module_name, attr, _ = COMMANDS[name]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # the command is declared but not built yet
                return None
            raise
        return getattr(module, attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="envbuild")
def cli() -> None:
    """Rebuild an RL framework's Docker image as a pinned conda env, then prove it and the node sound.

    \b
    envbuild create --profile slime-v0.3.1-cu129 --prefix ~/envs/slime
    envbuild doctor --profile slime-v0.3.1-cu129 --prefix ~/envs/slime
    """


def main(argv: Optional[List[str]] = None) -> None:
    """Console entry point. Bad usage or bad input exits 2 with one clear line, never a traceback."""
    from envbuild.errors import EnvbuildError

    try:
        rv = cli.main(args=argv, prog_name="envbuild", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except EnvbuildError as exc:
        click.echo(f"envbuild: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)
