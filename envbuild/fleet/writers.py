"""The report formats of a fleet (`envbuild report merge`, `envbuild doctor --ray`), behind the one contract of
envbuild/outputs.py (ReportWriter): the envbuild.fleet JSON, JUnit (one case per node x check), the Prometheus
textfile (a `node` label) and the HTML page. Both commands check every path before any work and write them all
after, through the same rules as a node's reports (`-` is stdout, no folder is created)."""
from __future__ import annotations

from typing import Any, Tuple

from envbuild.outputs import ReportWriter, target
from envbuild.report import writers as node_writers


def _json(fleet: Any, targets: Any = None) -> Any:
    from envbuild.fleet.merge import fleet_to_json

    return fleet_to_json(fleet)


def _junit(fleet: Any, targets: Any = None) -> Any:
    from envbuild.fleet.junit import fleet_to_junit

    return fleet_to_junit(fleet)


def _prometheus(fleet: Any, targets: Any = None) -> Any:
    from envbuild.fleet.prometheus import fleet_to_text

    return fleet_to_text(fleet)


def _html(fleet: Any, targets: Any) -> str:
    """Read back from the --json file when there is one (JSON comes first in the list, so it is written)."""
    from envbuild.report.html import page_of_json

    return page_of_json(_json(fleet), target(targets, JSON.dest) if targets is not None else None)


JSON = ReportWriter(node_writers.JSON.flag, node_writers.JSON.dest, "Write the fleet JSON (envbuild.fleet v1) here.",
                    _json)
JUNIT = ReportWriter("--junit", "junit_path", "Write JUnit XML, one testcase per node x check.", _junit)
PROMETHEUS = ReportWriter("--prometheus", "prom_path", "Write a node_exporter textfile with a node label.", _prometheus)
HTML = ReportWriter("--html", "html_path", "Write the fleet report as one self-contained HTML page here.", _html)
# `doctor --ray`: the doctor's flags, fleet content
FLEET_WRITERS: Tuple[ReportWriter, ...] = (JSON, JUNIT, PROMETHEUS, HTML)
# `report merge`: the JSON is -o/--output
MERGE_WRITERS: Tuple[ReportWriter, ...] = (JSON.named("--output", "json_path", "-o"), JUNIT, PROMETHEUS)
