"""`envbuild report html`: doctor reports (files, folders, a merged fleet report) -> one HTML page.

Exit codes: 0 written; 2 bad input (a file that is not JSON, truncated, of another schema version), with one
line naming the file, or an output path that cannot be written (checked before the reports are read). The page
is written atomically, so a failed run leaves the previous page intact.
"""
from __future__ import annotations

from typing import Optional, Tuple

import click

from envbuild.cmdoptions import report_outputs
from envbuild.report.writers import PAGE


@click.command("html")
@click.argument("reports", nargs=-1, required=True, metavar="REPORT.json|DIR...|RUN_DIR")
@report_outputs([PAGE])
@click.option("--nccl-tests", "nccl_tests", multiple=True, metavar="FILE",
              help="nccl-tests output (all_reduce_perf stdout, or a bench_allreduce.py JSON) to draw as the busbw reference.")
@click.option("--title", metavar="TEXT", help="Page title (default: the node, or the fleet's size).")
def html(reports: Tuple[str, ...], output: Optional[str], nccl_tests: Tuple[str, ...], title: Optional[str]) -> int:
    """Render doctor reports as one self-contained HTML page: verdict and causes first, then the P2P heat map,
    busbw against the line rate, the train step per cycle, the env-vs-image table and every fix. Several
    reports (or a merged one) make a fleet page with a node x check grid. An `envbuild record` run directory
    makes the run's page instead: the causes explain names, the first failures and a timeline per process."""
    from envbuild.outputs import check_outputs, stdout_claimed, write_outputs
    from envbuild.report.html import render_files

    if output is None:
        raise click.UsageError("Missing option '-o' / '--output'.")
    targets = {"output": output}
    check_outputs([PAGE], targets)
    if len(reports) == 1 and _is_run_dir(reports[0]):
        from envbuild.explain.run_page import render_run

        page, notes = render_run(reports[0])
    else:
        page, notes = render_files(reports, nccl_tests=nccl_tests, title=title)
    for note in notes:
        click.echo(f"report html: {note}", err=True)
    write_outputs([PAGE], targets, page)
    click.echo(f"wrote {output} ({len(page.encode()) / 1024:.0f} KiB)", err=stdout_claimed())
    return 0


def _is_run_dir(path: str) -> bool:
    from pathlib import Path

    from envbuild.explain.rundir import is_run_dir

    return Path(path).is_dir() and is_run_dir(Path(path))
