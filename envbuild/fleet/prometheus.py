"""The fleet report as one Prometheus textfile: the node series of envbuild/report/prometheus.py with a
`node` label, plus per-node and fleet-wide series.

Series (all gauges):
- envbuild_check_status{node,check,category,subject,status} one-hot, as on a single node
- envbuild_check_result{node,check,category,subject} 0 pass, 1 skip, 2 warn, 3 error, 4 fail
- envbuild_metric{node,check,subject,name,unit} every number a check measured
- envbuild_node_status{node} the node's worst result as the same code; envbuild_node_report_ok{node} 0 when the
  node's report could not be used (an `error` row)
- envbuild_fleet_result{check,subject} fleet-wide results (version agreement, cross-node collectives)
- envbuild_fleet_nodes{status} nodes per worst status; envbuild_fleet_exit_code
No timestamp of the merge is written: the same inputs give the same file.
"""
from __future__ import annotations

import math
from typing import Dict, List, Tuple

from envbuild.fleet.merge import FleetReport
from envbuild.report.model import Status


def _esc(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(value: object) -> str:
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "NaN"
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)


HELP = {
    "envbuild_check_status": "Status of each check on each node: 1 for its status, 0 for the others.",
    "envbuild_check_result": "Status of each check on each node as a code: 0 pass, 1 skip, 2 warn, 3 error, 4 fail.",
    "envbuild_metric": "Numbers measured by the checks on each node (see the unit label).",
    "envbuild_node_status": "Worst result of each node as a code: 0 pass, 1 skip, 2 warn, 3 error, 4 fail.",
    "envbuild_node_report_ok": "1 when the node's report was read, 0 when it was missing or unusable.",
    "envbuild_fleet_result": "Fleet-wide results as a code: 0 pass, 1 skip, 2 warn, 3 error, 4 fail.",
    "envbuild_fleet_nodes": "Number of nodes with each worst status.",
    "envbuild_fleet_exit_code": "Exit code of the merge: 0 no node failed, 1 a node or a fleet result failed.",
}


def fleet_to_text(fleet: FleetReport) -> str:
    out: Dict[str, List[str]] = {name: [] for name in HELP}
    statuses = list(Status)
    for n in fleet.nodes:
        node = _esc(n.node)
        seen: Dict[Tuple[str, str], int] = {}
        for r in n.results():
            subject = r.subject or ""
            key = (r.check_id, subject)
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1:  # one series per (node, check, subject): Prometheus rejects duplicates
                subject = f"{subject}#{seen[key]}"
            base = f'node="{node}",check="{_esc(r.check_id)}",category="{_esc(r.category)}",subject="{_esc(subject)}"'
            for s in statuses:
                out["envbuild_check_status"].append(
                    f'envbuild_check_status{{{base},status="{s.value}"}} {1 if r.status == s else 0}')
            out["envbuild_check_result"].append(f"envbuild_check_result{{{base}}} {r.status.rank}")
            for m in r.metrics:
                out["envbuild_metric"].append(
                    f'envbuild_metric{{node="{node}",check="{_esc(r.check_id)}",subject="{_esc(subject)}",'
                    f'name="{_esc(m.name)}",unit="{_esc(m.unit)}"}} {_num(m.value)}')
        out["envbuild_node_status"].append(f'envbuild_node_status{{node="{node}"}} {n.status(fleet.strict).rank}')
        out["envbuild_node_report_ok"].append(f'envbuild_node_report_ok{{node="{node}"}} {0 if n.error else 1}')
    for r in fleet.fleet_results:
        out["envbuild_fleet_result"].append(
            f'envbuild_fleet_result{{check="{_esc(r.check_id)}",subject="{_esc(r.subject or "")}"}} {r.status.rank}')
    for s, c in fleet.node_counts().items():
        out["envbuild_fleet_nodes"].append(f'envbuild_fleet_nodes{{status="{s}"}} {c}')
    out["envbuild_fleet_exit_code"].append(f"envbuild_fleet_exit_code {fleet.exit_code()}")
    lines: List[str] = []
    for name, samples in out.items():
        if samples:
            lines += [f"# HELP {name} {HELP[name]}", f"# TYPE {name} gauge"] + samples
    return "\n".join(lines) + "\n"


def write_fleet_prometheus(fleet: FleetReport, path: str) -> None:
    from envbuild.fsutil import atomic_write_text

    atomic_write_text(path, fleet_to_text(fleet))
