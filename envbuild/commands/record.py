"""`envbuild record`: turn per-process recording on for a Ray job (env, submit) and gather it (collect).

docs/record.md holds the run directory's layout and the two lines a slime user adds.
"""
from __future__ import annotations

import json
import os
import sys
from typing import List, Optional, Tuple

import click

from envbuild.errors import EnvbuildError


@click.group("record")
def record() -> None:
    """Record every process of a Ray job (libraries, NCCL, flight recorder, stacks, first failure)."""


def _run_dir(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))


def _ours(run_dir: str, hang_s: Optional[float], heartbeat_s: Optional[float]):
    from envbuild.record.runenv import record_env, write_run_json

    env = record_env(run_dir, hang_s, heartbeat_s)
    write_run_json(run_dir, env)
    return env


_dir_opt = click.option("--dir", "run_dir", required=True, metavar="RUN_DIR",
                        help="Where each process records (a shared filesystem, or the same local path on every node).")
_hang_opt = click.option("--hang-s", type=float, default=None, metavar="S",
                         help="Dump all stacks when a process's main thread has not moved for S s (default 300, 0 off).")
_beat_opt = click.option("--heartbeat-s", type=float, default=None, metavar="S",
                         help="Rewrite each process's alive.json every S s (default 10).")


@record.command("env")
@_dir_opt
@_hang_opt
@_beat_opt
@click.option("--merge", "merge_into", default=None, metavar="JSON",
              help="A runtime env JSON (as given to --runtime-env-json) to merge the recording into.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON only (the default prints it too).")
def env(run_dir: str, hang_s: Optional[float], heartbeat_s: Optional[float], merge_into: Optional[str],
        as_json: bool) -> None:
    """Print the runtime env JSON for `ray job submit --runtime-env-json`."""
    from envbuild.record.runenv import merge, parse_json

    base = parse_json(merge_into, "--merge") if merge_into is not None else None
    ours = _ours(_run_dir(run_dir), hang_s, heartbeat_s)
    click.echo(json.dumps(merge(base, ours) if base is not None else ours, sort_keys=True))


@record.command("submit", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@_dir_opt
@_hang_opt
@_beat_opt
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def submit(run_dir: str, hang_s: Optional[float], heartbeat_s: Optional[float], command: Tuple[str, ...]) -> None:
    """Run `ray job submit ...` with the recording merged into its --runtime-env-json."""
    argv = submit_argv(list(command), _ours(_run_dir(run_dir), hang_s, heartbeat_s))
    sys.stdout.flush()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        raise EnvbuildError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None


def submit_argv(command: List[str], ours: dict) -> List[str]:
    """The submit command with our runtime env merged into its --runtime-env-json (or added after `submit`).
    Only arguments before the entrypoint's `--` are looked at."""
    from envbuild.record.runenv import RecordInputError, merge, parse_json

    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise RecordInputError("give the submit command after --, e.g. -- ray job submit ... -- python train.py")
    end = command.index("--") if "--" in command else len(command)
    out = list(command)
    for i, arg in enumerate(command[:end]):
        if arg == "--runtime-env":
            raise RecordInputError("--runtime-env FILE is not merged: pass the same as --runtime-env-json")
        if arg == "--runtime-env-json" and i + 1 < end:
            out[i + 1] = json.dumps(merge(parse_json(command[i + 1], "--runtime-env-json"), ours))
            return out
        if arg.startswith("--runtime-env-json="):
            out[i] = "--runtime-env-json=" + json.dumps(merge(parse_json(arg.split("=", 1)[1], "--runtime-env-json"), ours))
            return out
    at = command.index("submit") + 1 if "submit" in command[:end] else end
    return out[:at] + ["--runtime-env-json", json.dumps(ours)] + out[at:]


@record.command("collect")
@click.argument("run_dir", metavar="RUN_DIR")
@click.option("--ray", "address", default=None, metavar="ADDRESS",
              help="Gather each node's files through Ray (node-local run dirs); without it RUN_DIR is read as is.")
@click.option("-o", "--out", "out", required=True, metavar="OUT", help="Folder to gather into (created).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def collect(run_dir: str, address: Optional[str], out: str, as_json: bool) -> None:
    """Gather a run's directories from every node; say which nodes or processes are missing and why."""
    from envbuild.record.collect import collect as do_collect, render

    summary = do_collect(_run_dir(run_dir), os.path.abspath(out), address)
    click.echo(json.dumps(summary, indent=1, sort_keys=True) if as_json else render(summary))
