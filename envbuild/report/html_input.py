"""Read what `envbuild report html` is given: doctor reports (files or folders of them) or a merged fleet report,
as a list of named nodes, each one schema-v1 Report.

Why a reader of its own: the page is made for nodes that are sick or were cut off, so every way an input can
be wrong (not JSON, cut short, another schema version, a merged file of another shape) must end in one line
naming the file (InputFileError, exit 2), never a traceback and never a page built from half a file.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Dict, Iterable, List, Sequence, Tuple

from envbuild.errors import InputFileError, read_input_text
from envbuild.report.json_report import SCHEMA_ID, SCHEMA_VERSION, report_from_dict
from envbuild.report.model import Metric, Report, Result


@dataclass
class NodeReport:
    """One node's doctor report and where it was read from."""

    name: str
    source: str  # the file (and, for a merged report, the entry in it)
    report: Report


def read_inputs(paths: Sequence[str]) -> Tuple[List[NodeReport], List[str]]:
    """The nodes of every input, in the order given (a folder's files sorted by name), and notes about files of
    a folder that were passed over (JSON that is not an envbuild report at all, e.g. a benchmark's output).

    Node names are the report's node name (a merged report's), else its hostname; when two reports carry the
    same name (two runs of one host), the file's stem is added so each row of the page stays apart."""
    if not paths:
        raise InputFileError(".", "no report given: pass REPORT.json files or folders of them")
    nodes: List[NodeReport] = []
    notes: List[str] = []
    for given in paths:
        p = Path(given)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.suffix == ".json" and f.is_file())
            found = 0
            for f in files:
                data = _load_json(f)
                if not _is_envbuild(data):
                    notes.append(f"{f}: not an envbuild report, passed over")
                    continue
                nodes.extend(_nodes_of(f, data))
                found += 1
            if not found:
                raise InputFileError(p, "no envbuild report (*.json written by `envbuild doctor --json`) in this folder")
        elif p.exists():
            nodes.extend(_nodes_of(p, _load_json(p)))
        else:
            raise InputFileError(p, "no such file or folder")
    return _unique_names(nodes), notes


def _load_json(path: Path) -> Any:
    text = read_input_text(path, "the report")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(text.rstrip())
        why = "the file ends early (truncated?)" if cut else exc.msg
        raise InputFileError(path, f"not valid JSON: {why} at column {exc.colno}", exc.lineno) from exc


def _is_envbuild(data: Any) -> bool:
    return isinstance(data, dict) and str(data.get("schema", "")).startswith("envbuild.")


def _nodes_of(path: Path, data: Any) -> List[NodeReport]:
    """A doctor report is one node; a merged fleet report (`envbuild report merge`) is one node per entry."""
    if not isinstance(data, dict):
        raise InputFileError(path, f"not an envbuild report: the top level is a JSON {type(data).__name__}, "
                                   "not an object")
    if isinstance(data.get("nodes"), (list, dict)) and data.get("schema") != SCHEMA_ID:
        return _fleet_nodes(path, data)
    return [_one_node(path, str(path), data)]


def _fleet_nodes(path: Path, data: Dict[str, Any]) -> List[NodeReport]:
    """Entries of a merged report: a list of node reports (each naming its node) or a mapping node -> report;
    an entry may wrap the report as {"node": NAME, "report": {...}}."""
    raw = data["nodes"]
    items: Iterable[Tuple[Any, Any]] = raw.items() if isinstance(raw, dict) else ((None, e) for e in raw)
    out: List[NodeReport] = []
    for i, (key, entry) in enumerate(items):
        if not isinstance(entry, dict):
            raise InputFileError(path, f"nodes[{key if key is not None else i}] is not an object")
        name = key if key is not None else entry.get("node")
        body = entry.get("report") if isinstance(entry.get("report"), dict) else entry
        where = f"{path} (node {name if name is not None else i})"
        node = _one_node(path, where, body, name=str(name) if name is not None else None)
        out.append(node)
    if not out:
        raise InputFileError(path, "a merged report with no nodes in it")
    return out


def _one_node(path: Path, where: str, data: Dict[str, Any], name: Any = None) -> NodeReport:
    schema, version = data.get("schema"), data.get("schema_version")
    if schema != SCHEMA_ID:
        raise InputFileError(path, f"not an envbuild doctor report (schema {schema!r}, expected {SCHEMA_ID!r}); "
                                   "write one with `envbuild doctor --json FILE`")
    if version != SCHEMA_VERSION:
        age = "an older" if isinstance(version, int) and version < SCHEMA_VERSION else "another"
        raise InputFileError(path, f"{age} report format: {SCHEMA_ID} schema_version {version!r}; this envbuild reads "
                                   f"version {SCHEMA_VERSION} only: re-run `envbuild doctor --json` with it")
    try:
        report = report_from_dict(_known_keys(data))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputFileError(path, f"not a complete {SCHEMA_ID} v{SCHEMA_VERSION} report: {_why(exc)}") from exc
    if not isinstance(report.host, dict):
        raise InputFileError(path, "not a complete report: 'host' is not an object")
    node = name or data.get("node") or report.host.get("hostname") or path.stem
    return NodeReport(name=str(node), source=where, report=report)


def _known_keys(data: Dict[str, Any]) -> Dict[str, Any]:
    """The report with keys this envbuild does not know dropped from results and metrics: fields may be added
    within a schema version (docs/report-schema.md), and a reader must ignore them, not refuse the file."""
    results = data.get("results")
    if not isinstance(results, list):
        return data
    known_r = {f.name for f in fields(Result)}
    known_m = {f.name for f in fields(Metric)}
    out = []
    for r in results:
        if isinstance(r, dict):
            r = {k: v for k, v in r.items() if k in known_r}
            if isinstance(r.get("metrics"), list):
                r["metrics"] = [{k: v for k, v in m.items() if k in known_m} if isinstance(m, dict) else m
                                for m in r["metrics"]]
        out.append(r)
    return dict(data, results=out)


def _why(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"the key {exc.args[0]!r} is missing"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _unique_names(nodes: List[NodeReport]) -> List[NodeReport]:
    seen: Dict[str, int] = {}
    for n in nodes:
        seen[n.name] = seen.get(n.name, 0) + 1
    for n in nodes:
        if seen[n.name] > 1:
            stem = os.path.splitext(os.path.basename(n.source.split(" (")[0]))[0]
            n.name = f"{n.name} · {stem}"
    return nodes
