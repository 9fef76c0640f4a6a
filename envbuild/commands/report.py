"""`envbuild report`: work on reports already written (merge many node reports, render HTML).

A click group whose subcommands are imported only when they run, like the top-level CLI: `merge` lives in
commands/report_merge.py, `html` in commands/report_html.py.
"""
from __future__ import annotations

import importlib
from typing import Dict, List, Optional, Tuple

import click

# name -> (module, attribute, one-line help)
SUBCOMMANDS: Dict[str, Tuple[str, str, str]] = {
    "merge": ("envbuild.commands.report_merge", "merge", "Join node reports into one fleet report (node x check)."),
    "html": ("envbuild.commands.report_html", "html", "Render a report as one self-contained HTML page."),
}


class _LazyReportGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> List[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> Optional[click.Command]:
        if name not in SUBCOMMANDS:
            return None
        module_name, attr, _ = SUBCOMMANDS[name]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # declared, not built on this branch yet
                return None
            raise
        return getattr(module, attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(n, SUBCOMMANDS[n][2]) for n in sorted(SUBCOMMANDS)])


@click.group("report", cls=_LazyReportGroup)
def report() -> None:
    """Work on written reports: merge node reports into a fleet report, render HTML."""
