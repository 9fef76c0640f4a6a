"""The terminal report: a table grouped by category, one actionable line per check, then the verdict."""
from __future__ import annotations

from typing import List

from envbuild.report.model import Report, Result, Status, category_rank

_STYLE = {
    Status.PASS: "green",
    Status.WARN: "yellow",
    Status.FAIL: "bold red",
    Status.SKIP: "dim",
    Status.ERROR: "magenta",
}


def _console(stderr: bool = False):
    """A console; when writing to a file or CI log (not a terminal) use $COLUMNS or 140 columns, not rich's
    80, so findings and the profile table are not wrapped into a narrow column."""
    import os
    import sys

    from rich.console import Console

    from envbuild.outputs import stdout_claimed

    stderr = stderr or stdout_claimed()  # a report on stdout (--json -): the table goes to stderr
    stream = sys.stderr if stderr else sys.stdout
    width = None
    if not (hasattr(stream, "isatty") and stream.isatty()):
        try:
            width = int(os.environ.get("COLUMNS", "140"))
        except ValueError:
            width = 140
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=width)


def print_check_list(checks) -> None:
    """One line per check (id first, never wrapped) so the list greps and pastes into --check."""
    import click

    width = max([len(c.id) for c in checks] + [2])
    click.echo(f"{'id':<{width}}  {'category':<8}  {'modes':<17}  {'needs':<15}  {'causes':<14}  what it checks")
    for c in checks:
        modes = ",".join(m for m in ("static", "quick", "full") if m in c.modes)
        click.echo(f"{c.id:<{width}}  {c.category:<8}  {modes:<17}  {','.join(sorted(c.needs)) or '-':<15}  "
                   f"{','.join(c.causes) or '-':<14}  {c.title}")


def print_option_list(options) -> None:
    """One line per `--set` key (key first, never wrapped): its type (with a number's bounds), default, the checks
    that take it, help."""
    import click

    width = max([len(k) for k in options] + [3])
    click.echo(f"{'key':<{width}}  {'type':<22}  {'default':<14}  {'checks':<22}  what it sets")
    for key, (opt, ids) in options.items():
        default = "(derived)" if opt.default is None else repr(opt.default) if opt.default == "" else str(opt.default)
        kind = f"{opt.type_label()} {opt.bounds_label()}".strip()
        click.echo(f"{key:<{width}}  {kind:<22}  {default:<14}  {','.join(ids):<22}  {opt.help}")


def verdict_line(report: Report, strict: bool = False) -> str:
    counts = report.counts()
    parts = [f"{counts[s.value]} {s.value}" for s in (Status.FAIL, Status.ERROR, Status.WARN, Status.PASS, Status.SKIP)
             if counts[s.value] or s in (Status.FAIL, Status.PASS)]
    if report.interrupted:
        verdict = f"STOPPED by {report.interrupted.get('signal')}"
    else:
        verdict = "FAIL" if report.exit_code(strict=strict) else "OK"
    return f"{verdict}: " + " · ".join(parts)


def print_report(report: Report, quiet: bool = False, strict: bool = False) -> None:
    console = _console()
    if not quiet:
        from rich.table import Table  # not for the verdict line alone (a Ray worker's doctor, a cron job)

        table = Table(show_header=True, header_style="bold", expand=False)
        table.add_column("status", no_wrap=True)
        table.add_column("check", no_wrap=True)
        table.add_column("finding")
        results: List[Result] = sorted(report.results, key=lambda r: category_rank(r.category))
        last = None
        for r in results:
            if r.category != last:
                table.add_row("", f"[bold]{r.category}[/bold]", "")
                last = r.category
            text = r.summary
            if r.status in (Status.FAIL, Status.WARN, Status.ERROR):
                if r.remediation:
                    text += f"\n[cyan]fix:[/cyan] {r.remediation}"
                if r.causes:
                    text += f"\n[dim]causes: {', '.join(r.causes)}[/dim]"
            table.add_row(f"[{_STYLE[r.status]}]{r.status.value.upper()}[/]", r.label, text)
        console.print(f"[bold]envbuild doctor[/bold] · {report.host.get('hostname')} · {report.host.get('source')}"
                      + (f" · profile {report.profile}" if report.profile else ""))
        console.print(table)
        for r in results:
            if r.check_id == PROFILE_TABLE_CHECK and r.evidence.get("rows"):
                console.print(profile_table(r))
    console.print(verdict_line(report, strict=strict))
    if not quiet:
        for line in root_cause_lines(report.results):
            console.print(line, markup=False, highlight=False)


def root_cause_lines(results: List[Result]) -> List[str]:
    """One line per root cause the run folded others under (envbuild/doctor/fold.py): what to fix first, and how
    many failed or errored results follow from it, so a wedged driver reads as one fault and not ten."""
    out = []
    for root in results:
        consequences = root.consequences
        if not consequences:
            continue
        shown = ", ".join(consequences[:4]) + (f" and {len(consequences) - 4} more" if len(consequences) > 4 else "")
        out.append(f"root cause: {root.label} ({', '.join(root.causes)}); {len(consequences)} other result(s) "
                   f"follow from it ({shown})" + (f"; fix it first: {root.remediation}" if root.remediation else ""))
    return out


PROFILE_TABLE_CHECK = "stack.profile_match"
_VERDICT_STYLE = {"match": "green", "differs": "bold red", "missing": "yellow", "unknown commit": "yellow",
                  "not checked": "dim", "match (commit unknown)": "green"}


def profile_table(result: Result):
    """component | image | this env | verdict, with why each mismatch matters (from stack.profile_match)."""
    from rich.table import Table

    ev = result.evidence
    table = Table(title=f"{ev.get('profile')}: image {ev.get('image')} vs this env", show_header=True,
                  header_style="bold", expand=False)
    for col in ("component", "image", "this env", "verdict"):
        table.add_column(col, no_wrap=True)
    table.add_column("why it matters", overflow="fold", min_width=30)
    for row in ev["rows"]:
        verdict = row.get("verdict", "")
        style = _VERDICT_STYLE.get(verdict, "")
        if verdict == "differs" and row.get("severity") == "info":
            style = "yellow"
        image = row.get("image", "") + ("" if row.get("verified", True) else " [dim]*[/dim]")
        table.add_row(row.get("component", ""), image, row.get("env", ""),
                      f"[{style}]{verdict}[/]" if style else verdict, row.get("why", ""))
    table.caption = "* image fact not read from the image itself (verified = false in the profile)"
    return table
