"""`envbuild explain`: a failed run's logs in, the likely causes out, ranked, with the lines behind them."""
from __future__ import annotations

import json
import sys
from typing import Optional, Tuple

import click


@click.command("explain")
@click.argument("paths", nargs=-1, metavar="PATH...|-")
@click.option("--json", "json_out", metavar="PATH", help="Write the result as JSON (schema envbuild.explain v1) here; - for stdout.")
@click.option("--report", metavar="PATH", help="A doctor JSON report of the node: failed checks raise their causes, passed ones lower them.")
@click.option("--root", metavar="DIR", help="A capture bundle (envbuild capture --node DIR): its report and kernel log count too.")
@click.option("--profile", "profile_name", metavar="NAME", help="Compare the versions in the log with this image profile's.")
def explain(paths: Tuple[str, ...], json_out: Optional[str], report: Optional[str], root: Optional[str],
            profile_name: Optional[str]) -> int:
    """Read failed-run logs (files, .gz, directories such as a Ray session's logs, or - for stdin) and rank
    the likely causes, with the log lines behind each and the check or rerun that tells them apart.

    Exit code: 0 no failure recognised, 1 a failure found (a cause named, or unknown), 2 bad usage or input.
    """
    from envbuild.explain.explain import ExplainOptions, exit_code, run
    from envbuild.explain.render import render

    result = run(ExplainOptions(paths=paths, report=report, root=root, profile=profile_name))
    if json_out == "-":
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        if json_out:
            from envbuild.fsutil import atomic_write_text

            atomic_write_text(json_out, json.dumps(result, indent=2) + "\n")
        sys.stdout.write(render(result))
    return exit_code(result)
