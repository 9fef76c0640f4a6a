"""The report formats of one node's doctor run, behind the one contract of envbuild/outputs.py (ReportWriter: the
flag, the check of its path before the run, the write after it). `envbuild doctor` declares its flags from this
list, checks them all before any work and writes them all after; a new format is one entry here."""
from __future__ import annotations

from typing import Any, Tuple

from envbuild.outputs import ReportWriter, target
from envbuild.report.model import Report


def _json(report: Report, targets: Any = None) -> str:
    from envbuild.report.json_report import report_to_json

    return report_to_json(report)


def _junit(report: Report, targets: Any) -> str:
    from envbuild.report.junit import junit_text

    return junit_text(report)


def _prometheus(report: Report, targets: Any) -> str:
    from envbuild.report.prometheus import report_to_text

    return report_to_text(report)


def _html(report: Report, targets: Any) -> str:
    """Read back from the --json file when there is one (JSON comes first in the list, so it is written)."""
    from envbuild.report.html import page_of_json

    return page_of_json(_json(report), target(targets, JSON.dest) if targets is not None else None)


JSON = ReportWriter("--json", "json_path", "Write the versioned JSON report here (- for stdout).", _json)
JUNIT = ReportWriter("--junit", "junit_path", "Write a JUnit XML report here (- for stdout).", _junit)
PROMETHEUS = ReportWriter("--prometheus", "prom_path", "Write a node_exporter textfile here (- for stdout).",
                          _prometheus)
HTML = ReportWriter("--html", "html_path", "Write the report as one self-contained HTML page here (- for stdout).",
                    _html)
DOCTOR_WRITERS: Tuple[ReportWriter, ...] = (JSON, JUNIT, PROMETHEUS, HTML)

# `envbuild report html -o`: the page itself, already rendered
PAGE = ReportWriter("--output", "output", "The page to write (e.g. report.html; - for stdout).", lambda page, targets: page,
                    aliases=("-o",))
