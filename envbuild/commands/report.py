"""`envbuild report`: commands that read doctor reports (`html` renders a page; `merge` joins node reports).

A click group whose subcommands are imported on first use, like the top-level CLI (cli.py), so
`envbuild report --help` does not import matplotlib.
"""
from __future__ import annotations

import importlib
from typing import Dict, List, Optional, Tuple

import click

# name -> (module, attribute, one-line help)
SUBCOMMANDS: Dict[str, Tuple[str, str, str]] = {
    "html": ("envbuild.commands.report_html", "html",
             "One self-contained HTML page from doctor reports (one node or a fleet)."),
    "merge": ("envbuild.commands.report_merge", "merge", "Join per-node doctor reports into one fleet report."),
}


class _LazyReportGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> List[str]:
        return sorted(self._built(ctx))

    def _built(self, ctx: click.Context) -> List[str]:
        return [name for name in SUBCOMMANDS if self.get_command(ctx, name) is not None]

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
        rows = [(name, SUBCOMMANDS[name][2]) for name in sorted(SUBCOMMANDS) if self.get_command(ctx, name)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group("report", cls=_LazyReportGroup)
def report() -> None:
    """Read doctor reports: render them as a page, or merge a fleet's."""
