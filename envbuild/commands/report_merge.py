"""`envbuild report merge FILE|DIR...`: one fleet report from many node reports.

Exit code: 0 no node failed, 1 a node (or a fleet-wide result) failed or gave no usable report, 2 bad usage
(a path that does not exist, a directory with no reports).
"""
from __future__ import annotations

from typing import Optional, Tuple

import click


@click.command("merge")
@click.argument("paths", nargs=-1, required=True, metavar="FILE|DIR...")
@click.option("-o", "--output", "json_path", metavar="PATH", help="Write the fleet JSON (envbuild.fleet v1) here.")
@click.option("--junit", "junit_path", metavar="PATH", help="Write JUnit XML, one testcase per node x check.")
@click.option("--prometheus", "prom_path", metavar="PATH", help="Write a node_exporter textfile with a node label.")
@click.option("--strict", is_flag=True, help="Treat warnings as failures.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the verdict line.")
def merge(paths: Tuple[str, ...], json_path: Optional[str], junit_path: Optional[str], prom_path: Optional[str],
          strict: bool, quiet: bool) -> int:
    """Join node reports (`envbuild doctor --json` files, or directories of them) into one fleet report.

    A node report that is malformed, truncated or from another envbuild version becomes an `error` row of
    that node; the merge itself never stops on one bad file.
    """
    from envbuild.fleet import table
    from envbuild.fleet.merge import merge_files
    from envbuild.fleet.write import write_outputs

    fleet = merge_files(paths, exclude=(json_path or "", junit_path or "", prom_path or ""), strict=strict)
    write_outputs(fleet, json_path, junit_path, prom_path)
    click.echo(table.render(fleet, quiet=quiet), nl=False)
    return fleet.exit_code()


