"""Read what `envbuild report html` is given: doctor reports (files or folders of them) or a merged fleet report,
as a list of named nodes, each one schema-v1 Report.

Why a reader of its own: the page is made for nodes that are sick or were cut off, so every way an input can
be wrong (not JSON, cut short, another schema version, a merged file of another shape) must end in one line
naming the file (InputFileError, exit 2), never a traceback and never a page built from half a file.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, List, Sequence

from envbuild.errors import InputFileError, parse_input_json, read_input_text
from envbuild.report.json_report import SCHEMA_ID, SCHEMA_VERSION, report_from_dict
from envbuild.report.model import Metric, Report, Result, Status


@dataclass
class NodeReport:
    """One node's doctor report and where it was read from."""

    name: str
    source: str  # the file (and, for a merged report, the entry in it)
    report: Report


FLEET_SCHEMA_ID = "envbuild.fleet"  # `envbuild report merge` (envbuild/fleet/merge.py, docs/fleet.md)
FLEET_SCHEMA_VERSION = 1


@dataclass
class Inputs:
    """Everything the page is made of: the nodes, the fleet-wide results of a merged report (cross-node
    collectives, version agreement) and notes about files of a folder that were passed over."""

    nodes: List[NodeReport]
    fleet_results: List[Result] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)


def read_inputs(paths: Sequence[str]) -> Inputs:
    """The nodes of every input, in the order given (a folder's files sorted by name). A folder's JSON files that
    are not envbuild reports at all (a benchmark's output) are passed over with a note.

    Node names are the merged report's node name, else the report's hostname; when two reports carry the same
    name (two runs of one host), the file's stem is added so each row of the page stays apart."""
    if not paths:
        raise InputFileError(".", "no report given: pass REPORT.json files or folders of them")
    out = Inputs(nodes=[])
    for given in paths:
        p = Path(given)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.suffix == ".json" and f.is_file())
            found = 0
            for f in files:
                data = _load_json(f)
                if not _is_envbuild(data):
                    out.notes.append(f"{f}: not an envbuild report, passed over")
                    continue
                _add(out, f, data)
                found += 1
            if not found:
                raise InputFileError(p, "no envbuild report (*.json written by `envbuild doctor --json`) in this folder")
        elif p.exists():
            _add(out, p, _load_json(p))
        else:
            raise InputFileError(p, "no such file or folder")
    _unique_names(out.nodes)
    return out


def _add(out: Inputs, path: Path, data: Any) -> None:
    """A doctor report is one node; a merged fleet report is one node per entry plus its fleet-wide results."""
    if not isinstance(data, dict):
        raise InputFileError(path, f"not an envbuild report: the top level is a JSON {type(data).__name__}, "
                                   "not an object")
    if data.get("schema") == FLEET_SCHEMA_ID:
        out.nodes.extend(_fleet_nodes(path, data))
        out.fleet_results.extend(_results(path, data.get("fleet_results"), "fleet_results"))
    else:
        out.nodes.append(_one_node(path, str(path), data))


def _load_json(path: Path) -> Any:
    return parse_input_json(path, read_input_text(path, "the report"), "the report")


def _is_envbuild(data: Any) -> bool:
    return isinstance(data, dict) and str(data.get("schema", "")).startswith("envbuild.")


def _fleet_nodes(path: Path, data: Dict[str, Any]) -> List[NodeReport]:
    """The entries of `envbuild report merge`'s JSON: each the node's own report plus `node`, `source`,
    `error` (the node gave no usable report: it stays a row, with that error) and `fleet_findings` (what the
    merge found about the node, e.g. another envbuild version)."""
    version, entries = data.get("schema_version"), data.get("nodes")
    if version != FLEET_SCHEMA_VERSION:
        raise InputFileError(path, f"{FLEET_SCHEMA_ID} schema_version {version!r}; this envbuild reads version "
                                   f"{FLEET_SCHEMA_VERSION} only: merge again with it")
    if not isinstance(entries, list) or not entries:
        raise InputFileError(path, f"a {FLEET_SCHEMA_ID} report without nodes (its 'nodes' list is missing or empty)")
    out: List[NodeReport] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise InputFileError(path, f"nodes[{i}] is not an object")
        name = str(entry.get("node") or (entry.get("host") or {}).get("hostname") or f"{path.stem}[{i}]")
        where = f"{path} (node {name})"
        if entry.get("error"):
            node = _error_node(name, str(entry.get("source") or where), str(entry["error"]))
        else:
            node = _one_node(path, where, entry, name=name)
        node.report.results.extend(_results(path, entry.get("fleet_findings"), f"nodes[{i}].fleet_findings"))
        out.append(node)
    return out


def _error_node(name: str, source: str, message: str) -> NodeReport:
    """A node of a merged report that gave no usable report: one `error` result saying why (as merge wrote it)."""
    result = Result("fleet.node_report", "fleet", Status.ERROR, message, evidence={"source": source},
                    remediation="rerun `envbuild doctor --json` on this node and merge again")
    return NodeReport(name=name, source=source, report=Report(host={"hostname": name, "source": source}, gpus=[],
                                                              results=[result]))


def _results(path: Path, raw: Any, where: str) -> List[Result]:
    if not raw:
        return []
    if not isinstance(raw, list):
        raise InputFileError(path, f"{where} is not a list")
    try:
        return [Result.from_dict(r) for r in _known_keys({"results": raw})["results"]]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputFileError(path, f"{where}: not a list of results: {_why(exc)}") from exc


def _one_node(path: Path, where: str, data: Dict[str, Any], name: Any = None) -> NodeReport:
    """One doctor report; in a merged report (`name` given) the messages name the node entry too."""
    entry = f"node {name}: " if name is not None else ""
    schema, version = data.get("schema"), data.get("schema_version")
    if schema != SCHEMA_ID:
        raise InputFileError(path, f"{entry}not an envbuild doctor report (schema {schema!r}, expected {SCHEMA_ID!r}); "
                                   "write one with `envbuild doctor --json FILE`")
    if version != SCHEMA_VERSION:
        age = "an older" if isinstance(version, int) and version < SCHEMA_VERSION else "another"
        raise InputFileError(path, f"{entry}{age} report format: {SCHEMA_ID} schema_version {version!r}; this envbuild reads "
                                   f"version {SCHEMA_VERSION} only: re-run `envbuild doctor --json` with it")
    problem = _type_problem(data)
    if problem:
        raise InputFileError(path, f"{entry}not a valid {SCHEMA_ID} v{SCHEMA_VERSION} report: {problem}")
    try:
        report = report_from_dict(_known_keys(data))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputFileError(path, f"{entry}not a complete {SCHEMA_ID} v{SCHEMA_VERSION} report: {_why(exc)}") from exc
    for key, kind in (("host", dict), ("gpus", list), ("options", dict)):
        if not isinstance(getattr(report, key), kind):
            raise InputFileError(path, f"{entry}not a complete report: {key!r} is not a JSON {kind.__name__}")
    node = name or report.host.get("hostname") or path.stem
    return NodeReport(name=str(node), source=where, report=report)


_NUM = (int, float)
_TOP_TYPES = {"host": (dict,), "gpus": (list,), "options": (dict,), "results": (list,), "duration_s": _NUM,
              "started_at": (str,), "envbuild_version": (str,), "profile": (str, type(None))}
_RESULT_TYPES = {"check_id": (str,), "category": (str,), "status": (str,), "summary": (str,), "evidence": (dict,),
                 "remediation": (str, type(None)), "metrics": (list,), "causes": (list,), "duration_s": _NUM,
                 "subject": (str, type(None))}
_METRIC_TYPES = {"name": (str,), "value": _NUM, "unit": (str,), "expect": (str, type(None)),
                 "source": (str, type(None))}


def _type_problem(data: Dict[str, Any]) -> str:
    """The first field of the report whose JSON type is not the one docs/report-schema.md gives, or ''.
    Checked here so that a hand-edited or corrupted report is one clear line, not a crash while drawing."""
    def bad(obj: Dict[str, Any], types: Dict[str, tuple], where: str) -> str:
        for key, kinds in types.items():
            if key in obj and (not isinstance(obj[key], kinds) or (kinds is _NUM and isinstance(obj[key], bool))):
                want = " or ".join("null" if k is type(None) else _JSON_NAME.get(k, k.__name__) for k in kinds)
                return f"{where}{key!r} is {_json_kind(obj[key])}, expected {want}"
        return ""

    found = bad(data, _TOP_TYPES, "")
    if found or not isinstance(data.get("results"), list):
        return found
    for i, r in enumerate(data["results"]):
        if not isinstance(r, dict):
            return f"results[{i}] is {_json_kind(r)}, expected an object"
        where = f"results[{i}] ({r.get('check_id')}): "
        found = bad(r, _RESULT_TYPES, where)
        if found:
            return found
        if any(not isinstance(c, str) for c in r.get("causes", [])):
            return f"{where}'causes' holds something other than cause ids (strings)"
        for j, m in enumerate(r.get("metrics", [])):
            if found:
                break
            found = bad(m, _METRIC_TYPES, f"{where}metrics[{j}] ") if isinstance(m, dict) else \
                f"{where}metrics[{j}] is {_json_kind(m)}, expected an object"
        if found:
            return found
    return ""


_JSON_NAME = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number"}


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return _JSON_NAME.get(type(value), type(value).__name__)


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


def _unique_names(nodes: List[NodeReport]) -> None:
    seen: Dict[str, int] = {}
    for n in nodes:
        seen[n.name] = seen.get(n.name, 0) + 1
    for n in nodes:
        if seen[n.name] > 1:
            stem = os.path.splitext(os.path.basename(n.source.split(" (")[0]))[0]
            n.name = f"{n.name} · {stem}"
