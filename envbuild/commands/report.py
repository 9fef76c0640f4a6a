"""`envbuild report`: work on reports already written (merge many node reports, render HTML).

The same lazy group as the top-level CLI (envbuild.cmdoptions.LazyGroup, with its usage rules): `merge` lives in
commands/report_merge.py, `html` in commands/report_html.py.
"""
from __future__ import annotations

from typing import Dict, Tuple

import click

from envbuild.cmdoptions import LazyGroup

# name -> (module, attribute, one-line help)
SUBCOMMANDS: Dict[str, Tuple[str, str, str]] = {
    "merge": ("envbuild.commands.report_merge", "merge", "Join node reports into one fleet report (node x check)."),
    "html": ("envbuild.commands.report_html", "html", "Render a report as one self-contained HTML page."),
}


@click.group("report", cls=LazyGroup, lazy=SUBCOMMANDS)
def report() -> None:
    """Work on written reports: merge node reports into a fleet report, render HTML."""
