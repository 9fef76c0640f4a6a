"""The versioned JSON report. SCHEMA_VERSION changes only when a field changes meaning or goes away;
new fields may be added within a version. docs/report-schema.md documents it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Union

from envbuild.outputs import write_output
from envbuild.report.model import Report, Result

SCHEMA_ID = "envbuild.report"
SCHEMA_VERSION = 1


def report_to_dict(report: Report) -> Dict[str, Any]:
    return {
        "schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "envbuild_version": report.envbuild_version,
        "started_at": report.started_at,
        "duration_s": report.duration_s,
        "host": report.host,
        "gpus": report.gpus,
        "profile": report.profile,
        "options": report.options,
        "summary": report.counts(),
        "exit_code": report.exit_code(strict=bool(report.options.get("strict"))),
        "results": [r.to_dict() for r in report.results],
        **({"interrupted": report.interrupted} if report.interrupted else {}),
    }


def report_from_dict(data: Dict[str, Any]) -> Report:
    if data.get("schema") != SCHEMA_ID or data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"not an {SCHEMA_ID} v{SCHEMA_VERSION} report")
    return Report(
        host=data["host"], gpus=data["gpus"], results=[Result.from_dict(r) for r in data["results"]],
        profile=data.get("profile"), options=data.get("options", {}), started_at=data.get("started_at", ""),
        duration_s=data.get("duration_s", 0.0), envbuild_version=data.get("envbuild_version", ""),
        interrupted=data.get("interrupted"),
    )


def report_to_json(report: Report) -> str:
    return json.dumps(report_to_dict(report), indent=2, sort_keys=False, default=str) + "\n"


def write_json(report: Report, path: Union[str, Path], flag: str = "--json") -> None:
    write_output(str(path), report_to_json(report), flag)
