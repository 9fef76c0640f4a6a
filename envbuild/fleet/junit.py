"""The fleet report as JUnit XML: one <testcase> per node x check.

Each node's single-node report is rendered by the node renderer (envbuild/report/junit.py), so the mapping of
statuses to <failure>/<error>/<skipped> is the same; its suites are renamed `<node>/envbuild.<category>`, the
testcases' classname becomes `envbuild.<node>.<category>` (unique across nodes, so CI pages group by node),
and the fleet-wide results get a suite `fleet/envbuild.fleet` of their own.
"""
from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET

from envbuild.fleet.merge import FleetReport
from envbuild.report.model import Report

_TOTALS = ("tests", "failures", "errors", "skipped")


def fleet_to_junit(fleet: FleetReport) -> ET.Element:
    from envbuild.report.junit import report_to_junit

    root = ET.Element("testsuites", name="envbuild fleet")
    totals = {k: 0 for k in _TOTALS}
    total_time = 0.0
    parts = [(n.node, dataclasses.replace(n.report, results=n.results())) for n in fleet.nodes]
    if fleet.fleet_results:
        parts.append(("fleet", Report(host={"hostname": "fleet"}, gpus=[], results=list(fleet.fleet_results),
                                      envbuild_version=fleet.envbuild_version)))
    for node, report in parts:
        if fleet.strict:
            report.options = {**report.options, "strict": True}
        for suite in report_to_junit(report):
            cat = suite.get("name", "").split(".", 1)[-1]
            suite.set("name", f"{node}/envbuild.{cat}")
            suite.set("hostname", node)
            for case in suite.iter("testcase"):
                case.set("classname", f"envbuild.{node}.{cat}")
            for k in _TOTALS:
                totals[k] += int(suite.get(k, "0"))
            total_time += float(suite.get("time", "0"))
            root.append(suite)
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", f"{total_time:.3f}")
    return root


def write_fleet_junit(fleet: FleetReport, path: str) -> None:
    from envbuild.fsutil import atomic_write_text

    root = fleet_to_junit(fleet)
    ET.indent(root)
    atomic_write_text(path, '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n")
