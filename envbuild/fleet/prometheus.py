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


class _Escaped(dict):
    """Label values escaped once: 1000 nodes repeat the same check ids, categories, subjects and units."""

    def __missing__(self, value: object) -> str:
        text = self[value] = _esc(value)
        return text


def _fast_num(value: object) -> str:
    """_num for the usual values (a float or a small int), formatted the same, else _num itself."""
    t = type(value)
    if t is float and value == value and abs(value) < 2**53:  # type: ignore[operator]
        return str(int(value)) if value.is_integer() else repr(value)  # type: ignore[union-attr]
    if t is int and abs(value) < 2**53:  # type: ignore[arg-type]
        return str(value)
    return _num(value)


# one-hot lines per status: 'PREFIX' + each suffix, one C-level join per result
_ONE_HOT = {s: [""] + [f',status="{o.value}"}} {1 if o == s else 0}\n' for o in Status] for s in Status}
_RANK = {s: f"}} {s.rank}\n" for s in Status}


def fleet_to_text(fleet: FleetReport) -> List[str]:
    """The whole textfile, in pieces to be written one after the other. Formatted as strings (no client library
    objects): 1000 nodes are 54 000 results and 380 000 samples, and the merge of 1000 nodes has 2 s for all of
    its outputs."""
    out: Dict[str, List[str]] = {name: [] for name in HELP}
    esc = _Escaped()
    status_lines, result_lines, metric_lines = (out["envbuild_check_status"], out["envbuild_check_result"],
                                                out["envbuild_metric"])
    for n in fleet.nodes:
        node = esc[n.node]
        seen: Dict[Tuple[str, str], int] = {}
        for r in n.results():
            subject = r.subject or ""
            key = (r.check_id, subject)
            if key in seen:  # one series per (node, check, subject): Prometheus rejects duplicates
                seen[key] += 1
                subject = f"{subject}#{seen[key]}"
            else:
                seen[key] = 1
            check, subj = esc[r.check_id], esc[subject]
            base = f'node="{node}",check="{check}",category="{esc[r.category]}",subject="{subj}"'
            status_lines.append(f"envbuild_check_status{{{base}".join(_ONE_HOT[r.status]))
            result_lines.append(f"envbuild_check_result{{{base}{_RANK[r.status]}")
            if r.metrics:
                head = f'envbuild_metric{{node="{node}",check="{check}",subject="{subj}",name="'
                metric_lines.append("".join([f'{head}{esc[m.name]}",unit="{esc[m.unit]}"}} {_fast_num(m.value)}\n'
                                             for m in r.metrics]))
        out["envbuild_node_status"].append(f'envbuild_node_status{{node="{node}"}} {n.status(fleet.strict).rank}\n')
        out["envbuild_node_report_ok"].append(f'envbuild_node_report_ok{{node="{node}"}} {0 if n.error else 1}\n')
    for r in fleet.fleet_results:
        out["envbuild_fleet_result"].append(
            f'envbuild_fleet_result{{check="{_esc(r.check_id)}",subject="{_esc(r.subject or "")}"}} {r.status.rank}\n')
    for s, c in fleet.node_counts().items():
        out["envbuild_fleet_nodes"].append(f'envbuild_fleet_nodes{{status="{s}"}} {c}\n')
    out["envbuild_fleet_exit_code"].append(f"envbuild_fleet_exit_code {fleet.exit_code()}\n")
    parts: List[str] = []
    for name, samples in out.items():
        if samples:
            parts.append(f"# HELP {name} {HELP[name]}\n# TYPE {name} gauge\n")
            parts.extend(samples)
    return parts
