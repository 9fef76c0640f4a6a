"""The fleet report in a terminal: a node x check matrix of one-letter cells, then every finding that is not a
pass (node, check, status, summary, fix), then the verdict naming the bad nodes.

Plain text, not rich: 1000 nodes must render in well under a second and the same inputs must print the
same bytes (a CI log diff shows only what changed).
"""
from __future__ import annotations

from typing import Dict, List, Tuple

from envbuild.fleet.merge import FleetReport
from envbuild.report.model import Result, Status

CELL = {Status.PASS: ".", Status.SKIP: "-", Status.WARN: "W", Status.ERROR: "E", Status.FAIL: "F"}


def _check_key(r: Result) -> str:
    return r.check_id + (f"[{r.subject}]" if r.subject else "")


def _columns(fleet: FleetReport) -> List[str]:
    """Every check id seen on any node, in the order the nodes wrote them (first sighting wins)."""
    seen: Dict[str, None] = {}
    for n in fleet.nodes:
        for r in n.results():
            seen.setdefault(r.check_id, None)
    return list(seen)


def _cell(results: List[Result], strict: bool) -> str:
    if not results:
        return " "
    worst = max((Status.FAIL if strict and r.status == Status.WARN else r.status for r in results),
                key=lambda s: s.rank)
    return CELL[worst]


def render(fleet: FleetReport, quiet: bool = False) -> str:
    """The whole terminal text (the verdict line alone with quiet)."""
    lines: List[str] = []
    if not quiet:
        cols = _columns(fleet)
        width = max([len(n.node) for n in fleet.nodes] + [4])
        lines.append(f"envbuild fleet · {len(fleet.nodes)} node(s) · {len(cols)} check(s)   "
                     "cells: . pass  - skip  W warn  E error  F fail")
        lines.append(f"{'node':<{width}}  status  " + "".join(f"{i % 100:>3}" for i in range(1, len(cols) + 1)))
        index = {c: i for i, c in enumerate(cols)}
        for n in fleet.nodes:
            by_col: List[List[Result]] = [[] for _ in cols]
            for r in n.results():
                by_col[index[r.check_id]].append(r)
            cells = "".join(f"{_cell(rs, fleet.strict):>3}" for rs in by_col)
            lines.append(f"{n.node:<{width}}  {n.status(fleet.strict).value:<6}  {cells}")
        lines.append("")
        lines.append("checks: " + "  ".join(f"{i}={c}" for i, c in enumerate(cols, 1)))
        findings = _findings(fleet)
        if findings:
            lines.append("")
            w_status = max(len(f[0]) for f in findings)
            w_check = max(len(f[1]) for f in findings)
            for status, check, text, nodes in findings:
                lines.append(f"{status:<{w_status}}  {check:<{w_check}}  {_nodes_text(nodes)}: {text}")
    lines.append(verdict_line(fleet))
    return "\n".join(lines) + "\n"


def _findings(fleet: FleetReport) -> List[Tuple[str, str, str, List[str]]]:
    """Every non-pass finding once, with the nodes that share it (64 nodes with the same warning: one line)."""
    groups: Dict[Tuple[int, str, str, str], List[str]] = {}
    rows = [(n.node, r) for n in fleet.nodes for r in n.results()
            if r.status in (Status.FAIL, Status.ERROR, Status.WARN)]
    rows += [("fleet", r) for r in fleet.fleet_results if r.status != Status.PASS]
    for node, r in rows:
        text = r.summary + (f"  fix: {r.remediation}" if r.remediation else "")
        groups.setdefault((-r.status.rank, _check_key(r), r.status.value.upper(), text), []).append(node)
    return [(status, check, text, nodes) for (_, check, status, text), nodes in sorted(groups.items())]


def _nodes_text(nodes: List[str]) -> str:
    if len(nodes) <= 4:
        return ", ".join(nodes)
    return ", ".join(nodes[:3]) + f" +{len(nodes) - 3} more ({len(nodes)} nodes)"


def verdict_line(fleet: FleetReport) -> str:
    counts = fleet.node_counts()
    bad = fleet.bad_nodes()
    verdict = "FAIL" if fleet.exit_code() else "OK"
    parts = [f"{counts[s.value]} {s.value}" for s in (Status.FAIL, Status.ERROR, Status.WARN, Status.PASS, Status.SKIP)
             if counts[s.value]]
    text = f"{verdict}: {len(fleet.nodes)} node(s): " + " · ".join(parts)
    if bad:
        shown = ", ".join(bad[:10]) + (f" (+{len(bad) - 10} more)" if len(bad) > 10 else "")
        text += f" · bad nodes: {shown}"
    fleet_bad = [r.check_id for r in fleet.fleet_results if r.status in (Status.FAIL, Status.ERROR)]
    if fleet_bad:
        text += " · fleet: " + ", ".join(fleet_bad)
    return text
