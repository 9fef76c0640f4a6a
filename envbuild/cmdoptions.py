"""The option pieces envbuild's commands share, each defined once (as pip's cli/cmdoptions.py does), and the one
lazy command group.

Why one definition: the same flag written in five commands drifts (one gains `-p`, another loses the
environment variable from its help, a third forgets a bound). A command takes a piece by decorating itself with
it; the value types here refuse an out-of-range value while the arguments are read, naming the bound, so no
command starts work with a deadline of 0 or a GPU index of -1.

This module imports click only: `envbuild --help` loads it.
"""
from __future__ import annotations

import importlib
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import click

F = Callable[..., Any]

LOCKFILES_HELP = "Folder of profiles (default: $ENVBUILD_LOCKFILES, else the repository's lockfiles/)."
MAX_GPU_INDEX = 1023  # NVML indexes the GPUs of one node; no node has a thousand
MAX_SECONDS = 7 * 86400.0  # a deadline longer than a week is a typo (ms for s), not a plan


class LazyGroup(click.Group):
    """A group whose subcommands are imported when invoked, not when the group is built (`envbuild --help` and
    `envbuild report --help` must stay fast). `lazy` maps name -> (module, attribute, one-line help). Every
    subcommand gets the shared usage rules (envbuild.cliargs.guard) as it loads."""

    def __init__(self, *args: Any, lazy: Dict[str, Tuple[str, str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> List[str]:
        return sorted(self.lazy)

    def get_command(self, ctx: click.Context, name: str) -> Optional[click.Command]:
        if name not in self.lazy:
            return None
        module_name, attr, _ = self.lazy[name]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # the command is declared but not built yet
                return None
            raise
        from envbuild.cliargs import guard

        return guard(getattr(module, attr))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, self.lazy[name][2]) for name in sorted(self.lazy)])


# ---------------------------------------------------------------- bounded value types


class Seconds(click.ParamType):
    """A duration in seconds: a finite number above 0 and at most `high`. Why: `--deadline 0` must not silently
    mean the default, nor `--deadline -5` a sweep that blames every healthy node for missing it."""

    name = "seconds"

    def __init__(self, high: float = MAX_SECONDS) -> None:
        self.high = high

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> float:
        if isinstance(value, float):
            seconds = value
        else:
            try:
                seconds = float(str(value).strip())
            except ValueError:
                self.fail(f"{value!r}: expected a number of seconds", param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value}: must be a finite number of seconds", param, ctx)
        if seconds <= 0:
            self.fail(f"{value}: must be greater than 0 seconds", param, ctx)
        if seconds > self.high:
            self.fail(f"{value}: must be at most {self.high:g} seconds", param, ctx)
        return seconds


class Positive(click.ParamType):
    """A finite number above 0 and at most `high` (a message size in MB)."""

    name = "number"

    def __init__(self, high: float) -> None:
        self.high = high

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> float:
        try:
            number = float(str(value).strip())
        except ValueError:
            self.fail(f"{value!r}: expected a number", param, ctx)
        if not math.isfinite(number) or number <= 0 or number > self.high:
            self.fail(f"{value}: must be greater than 0 and at most {self.high:g}", param, ctx)
        return number


class GpuIndices(click.ParamType):
    """GPU indices like 0,1: each a whole number from 0 to MAX_GPU_INDEX, at least one, none twice."""

    name = "gpus"

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> List[int]:
        if isinstance(value, list):
            return value
        items = [x.strip() for x in str(value).split(",")]
        if not any(items):
            self.fail(f"{value!r}: expected GPU indices like 0,1", param, ctx)
        out: List[int] = []
        for item in items:
            if item == "":
                continue
            if not (item.isascii() and item.lstrip("-").isdigit()):
                self.fail(f"{value!r}: {item[:20]!r} is not a GPU index (0 to {MAX_GPU_INDEX})", param, ctx)
            if len(item) > 6 or not 0 <= int(item) <= MAX_GPU_INDEX:
                shown = item if len(item) <= 12 else item[:10] + "..."
                self.fail(f"GPU index {shown} is out of range 0 to {MAX_GPU_INDEX}", param, ctx)
            index = int(item)
            if index in out:
                self.fail(f"{value!r}: GPU {index} is named twice", param, ctx)
            out.append(index)
        return out


# ---------------------------------------------------------------- shared options


def profile(help: str, *, multiple: bool = False) -> Callable[[F], F]:
    """--profile/-p NAME (repeatable with `multiple`: the parameter is `profiles`, else `profile_name`)."""
    return click.option("--profile", "-p", "profiles" if multiple else "profile_name", multiple=multiple,
                        default=None, metavar="NAME", help=help)


def lockfiles(fn: F) -> F:
    """--lockfiles DIR: where the profiles are (envbuild.profile.store resolves the default)."""
    return click.option("--lockfiles", "lockfiles", default=None, metavar="DIR", help=LOCKFILES_HELP)(fn)


def git_mirror(fn: F) -> F:
    """--git-mirror DIR|URL: the site's git mirror (envbuild.install.git_mirror resolves it and the environment
    variable), for every command that fetches the recipe's git sources."""
    return click.option("--git-mirror", "git_mirror", default=None, metavar="DIR|URL",
                        help="The site's git mirror: a folder of bare repositories or a URL prefix; a source's path "
                             "(NVIDIA/apex) is looked up under it (default: $ENVBUILD_GIT_MIRROR, else each "
                             "source's URL).")(fn)


def quiet(help: str) -> Callable[[F], F]:
    """-q/--quiet, with what this command still prints."""
    return click.option("-q", "--quiet", "quiet", is_flag=True, help=help)


def deadline(help: str, high: float = MAX_SECONDS) -> Callable[[F], F]:
    """--deadline SECONDS, bounded (Seconds)."""
    return click.option("--deadline", "deadline", type=Seconds(high), default=None, metavar="SECONDS", help=help)


def gpus(help: str) -> Callable[[F], F]:
    """--gpus LIST of GPU indices, bounded (GpuIndices)."""
    return click.option("--gpus", "gpus", type=GpuIndices(), default=None, metavar="LIST", help=help)


def report_outputs(writers: Sequence[Any]) -> Callable[[F], F]:
    """One PATH option per report writer (envbuild.outputs.ReportWriter: its flag, aliases, dest and help). The
    command checks them all before work (envbuild.outputs.check_outputs) and writes them after."""

    def add(fn: F) -> F:
        for writer in reversed(list(writers)):
            fn = click.option(*writer.aliases, writer.flag, writer.dest, metavar="PATH", default=None,
                              help=writer.help)(fn)
        return fn

    return add
