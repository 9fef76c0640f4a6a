"""`envbuild report merge FILE|DIR...`: one fleet report from many node reports.

Exit code: 0 no node failed, 1 a node (or a fleet-wide result) failed or gave no usable report, 2 bad usage
(a path that does not exist, a directory with no reports, an output path that cannot be written: checked before
any report is read).
"""
from __future__ import annotations

from typing import Optional, Tuple

import click

from envbuild import cmdoptions
from envbuild.fleet.writers import MERGE_WRITERS


@click.command("merge")
@click.argument("paths", nargs=-1, required=True, metavar="FILE|DIR...")
@cmdoptions.report_outputs(MERGE_WRITERS)
@click.option("--strict", is_flag=True, help="Treat warnings as failures.")
@cmdoptions.quiet("Print only the verdict line.")
def merge(paths: Tuple[str, ...], json_path: Optional[str], junit_path: Optional[str], prom_path: Optional[str],
          strict: bool, quiet: bool) -> int:
    """Join node reports (`envbuild doctor --json` files, or directories of them) into one fleet report.

    A node report that is malformed, truncated or from another envbuild version becomes an `error` row of
    that node; the merge itself never stops on one bad file.
    """
    from envbuild.fleet import table
    from envbuild.fleet.merge import merge_files
    from envbuild.outputs import check_outputs, stdout_claimed, write_outputs

    targets = {"json_path": json_path, "junit_path": junit_path, "prom_path": prom_path}
    check_outputs(MERGE_WRITERS, targets)
    fleet = merge_files(paths, exclude=(json_path or "", junit_path or "", prom_path or ""), strict=strict)
    write_outputs(MERGE_WRITERS, targets, fleet)
    click.echo(table.render(fleet, quiet=quiet), nl=False, err=stdout_claimed())
    return fleet.exit_code()
