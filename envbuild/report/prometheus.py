"""Prometheus textfile for node_exporter's textfile collector (--collector.textfile.directory).

Series (all gauges; labels check, category, subject; subject is "" for node-wide results):
- envbuild_check_status{check,category,subject,status} 1 for the result's status, 0 for the four others
  (one-hot, so `envbuild_check_status{status="fail"} == 1` alerts on any failing check)
- envbuild_check_result{check,category,subject} the status as a code: 0 pass, 1 skip, 2 warn, 3 error, 4 fail
- envbuild_check_duration_seconds{check,category,subject}
- envbuild_metric{check,subject,name,unit} every measured number a check reported
- envbuild_checks{status} how many results have each status
- envbuild_exit_code, envbuild_run_duration_seconds, envbuild_last_run_timestamp_seconds
- envbuild_info{version,profile,host} 1

The file is written atomically (temp file + rename in the same directory), as the collector requires.
"""
from __future__ import annotations

import datetime as _dt
import math
import time
from pathlib import Path
from typing import Dict, Iterable, List, Tuple, Union

from envbuild.outputs import write_output
from envbuild.report.model import Report, Status

def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[Tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _num(value: float) -> str:
    if value is None:
        return "NaN"
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, float) and math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def _run_timestamp(report: Report) -> float:
    try:
        return _dt.datetime.fromisoformat(report.started_at).timestamp()
    except (TypeError, ValueError):
        return time.time()


def report_to_text(report: Report) -> str:
    families: Dict[str, Tuple[str, List[str]]] = {}

    def add(name: str, help_text: str, labels: Iterable[Tuple[str, str]], value: float) -> None:
        families.setdefault(name, (help_text, []))[1].append(f"{name}{_labels(labels)} {_num(value)}")

    seen: Dict[Tuple[str, str], int] = {}
    for r in report.results:
        subject = r.subject or ""
        key = (r.check_id, subject)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:  # one series per (check, subject): Prometheus rejects duplicate samples
            subject = f"{subject}#{seen[key]}"
        base = (("check", r.check_id), ("category", r.category), ("subject", subject))
        for status in Status:
            add("envbuild_check_status", "Status of each envbuild doctor check: 1 for its status, 0 for the others.",
                base + (("status", status.value),), 1 if r.status == status else 0)
        add("envbuild_check_result", "Status of each check as a code: 0 pass, 1 skip, 2 warn, 3 error, 4 fail.",
            base, r.status.rank)
        add("envbuild_check_duration_seconds", "Time each check took.", base, r.duration_s)
        for m in r.metrics:
            add("envbuild_metric", "Numbers measured by the checks (see the unit label).",
                (("check", r.check_id), ("subject", subject), ("name", m.name), ("unit", m.unit)), m.value)
    counts = report.counts()
    for status in Status:
        add("envbuild_checks", "Number of check results with each status.", (("status", status.value),),
            counts[status.value])
    add("envbuild_exit_code", "Exit code of the doctor run: 0 no fail, 1 a fail.", (),
        report.exit_code(strict=bool(report.options.get("strict"))))
    add("envbuild_run_duration_seconds", "Duration of the whole doctor run.", (), report.duration_s)
    add("envbuild_last_run_timestamp_seconds", "Unix time the doctor run started.", (), _run_timestamp(report))
    add("envbuild_info", "envbuild version, profile and host of the last run.",
        (("version", report.envbuild_version), ("profile", report.profile or ""),
         ("host", str(report.host.get("hostname") or ""))), 1)
    lines: List[str] = []
    for name, (help_text, samples) in families.items():
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} gauge")
        lines.extend(samples)
    return "\n".join(lines) + "\n"


def write_prometheus(report: Report, path: Union[str, Path]) -> None:
    write_output(str(path), report_to_text(report), "--prometheus")
