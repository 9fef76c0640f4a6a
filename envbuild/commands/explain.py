"""`envbuild explain`: a failed run's logs in, the likely causes out, ranked, with the lines behind them."""
from __future__ import annotations

import json
import sys
from typing import Any, Dict, Optional, Tuple

import click

from envbuild import cmdoptions
from envbuild.outputs import ReportWriter


def _json_text(result: Dict[str, Any], targets: Any) -> str:
    return json.dumps(result, indent=2) + "\n"


JSON = ReportWriter("--json", "json_out", "Write the result as JSON (schema envbuild.explain v1) here; - for stdout.",
                    _json_text)


@click.command("explain")
@click.argument("paths", nargs=-1, metavar="PATH...|-")
@cmdoptions.report_outputs([JSON])
@click.option("--report", metavar="PATH", help="A doctor JSON report of the node: failed checks raise their causes, passed ones lower them.")
@click.option("--root", metavar="DIR", help="A capture bundle (envbuild capture --node DIR): its report and kernel log count too.")
@cmdoptions.profile("Compare the versions in the log with this image profile's.")
def explain(paths: Tuple[str, ...], json_out: Optional[str], report: Optional[str], root: Optional[str],
            profile_name: Optional[str]) -> int:
    """Read failed-run logs (files, .gz, directories such as a Ray session's logs, or - for stdin) and rank
    the likely causes, with the log lines behind each and the check or rerun that tells them apart. An
    `envbuild record` run directory is judged from its recorded facts too: which process mapped which libnccl,
    ran with which NCCL settings, failed or went silent first, what the flight recorder says.

    Exit code: 0 no failure recognised, 1 a failure found (a cause named, or unknown; a recorded finding counts),
    2 bad usage or input.
    """
    from envbuild.explain.explain import ExplainOptions, exit_code, run
    from envbuild.explain.render import render
    from envbuild.outputs import check_outputs, stdout_claimed, write_outputs

    targets = {"json_out": json_out}
    check_outputs([JSON], targets)
    result = run(ExplainOptions(paths=paths, report=report, root=root, profile=profile_name))
    write_outputs([JSON], targets, result)
    if not stdout_claimed():
        sys.stdout.write(render(result))
    return exit_code(result)
