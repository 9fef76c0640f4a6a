"""Usage rules every envbuild command shares, applied to each command when the CLI loads it.

- An option given an empty string (`--prefix ""`, `--json ""`, `--root ""`) is bad usage: a shell variable
  that expanded to nothing must not silently mean the default or the current folder.
- Flags that set one value to different constants (`--quick`/`--full` set the doctor's mode) cannot be
  given together: click would quietly keep the last one.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import click


def _reject_empty(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    values = value if isinstance(value, (tuple, list)) else (value,)
    if any(isinstance(v, str) and v == "" for v in values):
        raise click.BadParameter("empty value; give a value or leave the option out", ctx=ctx, param=param)
    return value


def _chain(first, second):
    def both(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        return second(ctx, param, first(ctx, param, value))
    return both


def guard(command: click.Command) -> click.Command:
    """Attach the shared rules to `command` (idempotent); returns it."""
    if getattr(command, "_envbuild_guarded", False):
        return command
    exclusive: Dict[str, List[click.Option]] = {}
    for param in command.params:
        if not isinstance(param, click.Option) or param.is_flag or param.count:
            if isinstance(param, click.Option) and param.is_flag and not param.is_bool_flag:
                exclusive.setdefault(param.name or "", []).append(param)
            continue
        if isinstance(param.type, (click.types.StringParamType, click.Path, click.File)) or param.type is click.STRING:
            param.callback = _chain(_reject_empty, param.callback) if param.callback else _reject_empty
    groups = [opts for opts in exclusive.values() if len(opts) > 1]
    if groups:
        original = command.parse_args

        def parse_args(ctx: click.Context, args: List[str]) -> List[str]:
            _refuse_together(ctx, groups, args)
            return original(ctx, args)

        command.parse_args = parse_args  # type: ignore[method-assign]
    command._envbuild_guarded = True  # type: ignore[attr-defined]
    return command


def _refuse_together(ctx: click.Context, groups: List[List[click.Option]], args: List[str]) -> None:
    given = []
    for arg in args:
        if arg == "--":
            break
        given.append(arg.split("=", 1)[0])
    for opts in groups:
        seen: List[str] = []
        for opt in opts:
            hit: Optional[str] = next((o for o in opt.opts + opt.secondary_opts if o in given), None)
            if hit:
                seen.append(hit)
        if len(seen) > 1:
            raise click.UsageError(f"{' and '.join(seen)} cannot be given together", ctx=ctx)
