"""The fleet report: many single-node reports joined into one, each tagged with its node name.

One model and one reader for every fleet path: `envbuild report merge` reads node reports from files,
`envbuild doctor --ray` hands in the reports its Ray workers returned, and both end in `merge()`, so the
verdict, the ordering and the renderers are the same whichever way the reports arrived.

A node whose report cannot be used (malformed or truncated JSON, not an envbuild report, a schema this
envbuild cannot read) is not dropped: it becomes an `error` row naming the file and what is wrong, so a
fleet of 64 shows 64 rows. Reports written by different envbuild versions get a `fleet.envbuild_version`
error on every node not on the fleet's majority version: their results do not compare.

Ordering is fixed (nodes by natural name order, results as each node wrote them, fleet results by id), and
nothing in the output depends on the time of the merge: the same inputs give the same bytes.
"""
from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from envbuild.errors import EnvbuildError
from envbuild.report.json_report import SCHEMA_ID, SCHEMA_VERSION, report_from_dict, report_to_dict
from envbuild.report.model import Metric, Report, Result, Status

FLEET_SCHEMA_ID = "envbuild.fleet"
FLEET_SCHEMA_VERSION = 1
NODE_REPORT_CHECK = "fleet.node_report"  # the error row of a node whose report could not be used
VERSION_CHECK = "fleet.envbuild_version"
ENTRY_KEYS = frozenset({"node", "source", "node_status", "error", "fleet_findings"})  # what a fleet entry adds

RANK = {s: s.rank for s in Status}  # Status.rank builds its table on every call; 50 000 results call it often
_RESULT_FIELDS = {f.name for f in dataclasses.fields(Result)}
_METRIC_FIELDS = {f.name for f in dataclasses.fields(Metric)}


@dataclass
class NodeReport:
    """One node's single-node report, the node's name, and where the report came from."""

    node: str
    source: str
    report: Report
    error: Optional[str] = None  # set when the report could not be used; `report` then holds the error row
    findings: List[Result] = field(default_factory=list)  # what the merge found about this node (its version)
    raw: Optional[Dict[str, Any]] = None  # the report as the node wrote it: written back unchanged
    raw_text: Optional[str] = None  # ... and its JSON text after the opening brace, spliced into the fleet JSON
    _status: Dict[bool, Status] = field(default_factory=dict, repr=False, compare=False)

    def results(self) -> List[Result]:
        """The node's own results, then the merge's findings about it."""
        return self.report.results + self.findings if self.findings else self.report.results

    def status(self, strict: bool = False) -> Status:
        """The node's worst status (a warn counts as fail under --strict)."""
        if strict not in self._status:
            worst = Status.PASS
            for r in self.results():
                s = Status.FAIL if strict and r.status == Status.WARN else r.status
                if RANK[s] > RANK[worst]:
                    worst = s
            self._status[strict] = worst
        return self._status[strict]


@dataclass
class FleetReport:
    """All nodes, plus the results that belong to the fleet as a whole (version agreement, cross-node comm)."""

    nodes: List[NodeReport]
    fleet_results: List[Result] = field(default_factory=list)
    envbuild_version: str = ""
    strict: bool = False
    superseded: List[str] = field(default_factory=list)  # sources of older reports of a node seen twice

    def node_counts(self) -> Dict[str, int]:
        out = {s.value: 0 for s in Status}
        for n in self.nodes:
            out[n.status(self.strict).value] += 1
        return out

    def result_counts(self) -> Dict[str, int]:
        out = {s.value: 0 for s in Status}
        for n in self.nodes:
            for r in n.results():
                out[r.status.value] += 1
        for r in self.fleet_results:
            out[r.status.value] += 1
        return out

    def bad_nodes(self) -> List[str]:
        return [n.node for n in self.nodes if n.status(self.strict) in (Status.FAIL, Status.ERROR)]

    def exit_code(self) -> int:
        """0 no node and no fleet result failed, 1 otherwise (errors count: a broken check proves nothing)."""
        bad = {Status.FAIL, Status.ERROR} | ({Status.WARN} if self.strict else set())
        if self.bad_nodes() or any(r.status in bad for r in self.fleet_results):
            return 1
        return 0


def natural_key(name: str) -> Tuple[Any, ...]:
    """node2 before node10: admins number their nodes."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def error_node(node: str, source: str, message: str, envbuild_version: str = "") -> NodeReport:
    """The `error` row of a node that gave no usable report (the file, the worker or the node broke)."""
    result = Result(NODE_REPORT_CHECK, "fleet", Status.ERROR, message, evidence={"source": source},
                    remediation="rerun `envbuild doctor --json` on this node and merge again")
    report = Report(host={"hostname": node, "source": source}, gpus=[], results=[result],
                    envbuild_version=envbuild_version)
    return NodeReport(node=node, source=source, report=report, error=message)


def _lenient(data: Dict[str, Any]) -> Dict[str, Any]:
    """Drop keys a newer v1 writer added (the schema allows added fields; Result(**) would refuse them)."""
    results = []
    for r in data["results"]:
        r = {k: v for k, v in r.items() if k in _RESULT_FIELDS}
        r["metrics"] = [{k: v for k, v in m.items() if k in _METRIC_FIELDS} for m in r.get("metrics") or []]
        results.append(r)
    return {**data, "results": results}


_STATUS = {s.value: s for s in Status}


def _plain_results(items: Any) -> Optional[List[Result]]:
    """Result.from_dict of each item, without its per-result dict copy and Enum call (a 1000-node merge reads
    54 000 results), for results whose keys are all known and that name a status; None for anything else, which
    the caller then reads through report_from_dict (same objects, same errors)."""
    if type(items) is not list:
        return None
    out = []
    fields, status_of = _RESULT_FIELDS, _STATUS
    for d in items:
        if type(d) is not dict or not d.keys() <= fields:
            return None
        try:
            status = status_of[d["status"]]
            metrics = d.get("metrics")
            out.append(Result(d["check_id"], d["category"], status, d["summary"], d.get("evidence", {}),
                              d.get("remediation"), [Metric(**m) for m in metrics] if metrics else [],
                              d.get("causes", []), d.get("duration_s", 0.0), d.get("subject")))
        except (KeyError, TypeError):  # a missing field, a status that is not one, a metric's unknown field
            return None
    return out


def _report_from_dict(data: Dict[str, Any]) -> Report:
    """report_from_dict, faster for plain results."""
    results = _plain_results(data.get("results"))
    if results is None:
        return report_from_dict(data)
    return Report(host=data["host"], gpus=data["gpus"], results=results, profile=data.get("profile"),
                  options=data.get("options", {}), started_at=data.get("started_at", ""),
                  duration_s=data.get("duration_s", 0.0), envbuild_version=data.get("envbuild_version", ""),
                  interrupted=data.get("interrupted"))


def node_from_dict(data: Any, source: str, default_name: str) -> NodeReport:
    """One node from a decoded single-node report (or a fleet report's node entry); an error row if unusable."""
    if not isinstance(data, dict):
        return error_node(default_name, source, f"{source}: not an envbuild report (a JSON {type(data).__name__})")
    host = data.get("host")
    name = data.get("node") or (host.get("hostname") if isinstance(host, dict) else None) or default_name
    name = str(name)
    if data.get("error"):
        return error_node(name, data.get("source") or source, str(data["error"]), data.get("envbuild_version", ""))
    schema, version = data.get("schema"), data.get("schema_version")
    if schema != SCHEMA_ID:
        return error_node(name, source, f"{source}: not an envbuild report (schema {schema!r})")
    if version != SCHEMA_VERSION:
        return error_node(name, source, f"{source}: {SCHEMA_ID} schema v{version}; this envbuild reads v"
                                        f"{SCHEMA_VERSION} (merge with the envbuild that wrote it)",
                          str(data.get("envbuild_version", "")))
    try:
        try:
            report = _report_from_dict(data)
        except TypeError:  # a field this envbuild does not know: read what it knows
            report = report_from_dict(_lenient(data))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        what = f"missing field {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        return error_node(name, source, f"{source}: unreadable {SCHEMA_ID} v{SCHEMA_VERSION} report ({what})",
                          str(data.get("envbuild_version", "")))
    if not isinstance(report.host, dict) or not isinstance(report.results, list):
        return error_node(name, source, f"{source}: unreadable report (host or results of the wrong type)")
    return NodeReport(node=name, source=data.get("source") or source, report=report, raw=data)


def read_file(path: Path) -> List[NodeReport]:
    """The node(s) in one file: a single-node report gives one, a fleet report gives its nodes (merging merges)."""
    from envbuild.fsutil import InputRefused, read_bounded

    source = str(path)
    try:
        text = read_bounded(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        return [error_node(path.stem, source, f"{source}: not UTF-8 text (byte {exc.start})")]
    except InputRefused as exc:
        return [error_node(path.stem, source, f"{source}: cannot read: {exc}")]
    except OSError as exc:
        return [error_node(path.stem, source, f"{source}: cannot read: {exc.strerror or exc}")]
    if not text.strip():
        return [error_node(path.stem, source, f"{source}: empty file (the node's doctor never wrote its report?)")]
    try:
        data = json.loads(text)
    except RecursionError:
        return [error_node(path.stem, source, f"{source}: JSON nested too deeply to read")]
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        kind = "truncated" if cut else "malformed"
        return [error_node(path.stem, source, f"{source}:{exc.lineno}: {kind} JSON: {exc.msg} (column {exc.colno})")]
    if isinstance(data, dict) and data.get("schema") == FLEET_SCHEMA_ID:
        nodes = data.get("nodes")
        if data.get("schema_version") != FLEET_SCHEMA_VERSION or not isinstance(nodes, list):
            return [error_node(path.stem, source, f"{source}: unreadable {FLEET_SCHEMA_ID} report "
                                                  f"(schema v{data.get('schema_version')})")]
        return [node_from_dict(n, source, f"{path.stem}[{i}]") for i, n in enumerate(nodes)]
    node = node_from_dict(data, source, path.stem)
    if node.raw is not None and not (ENTRY_KEYS & data.keys()) and text.lstrip().startswith("{"):
        node.raw_text = text[text.index("{") + 1:].strip()  # the report's members and its closing brace
    return [node]


def _identity(path: Path) -> Optional[Tuple[int, int]]:
    """The file's (device, inode): one stat, where resolve() took one lstat per path component."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def expand_inputs(paths: Sequence[str], exclude: Iterable[str] = ()) -> List[Path]:
    """The files to read: files as given, directories searched for *.json (sorted). Bad paths are exit 2."""
    skip = {_identity(Path(p)) for p in exclude if p and p != "-"} - {None}
    files: List[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(f for f in path.rglob("*.json") if f.is_file())
            if not found:
                raise EnvbuildError(f"{p}: no *.json node reports in this directory")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        elif path.exists():
            raise EnvbuildError(f"{p}: not a file or directory")
        else:
            raise EnvbuildError(f"{p}: no such file or directory")
    seen = set(skip)
    unique = []
    for f in files:  # a file named twice (a dir and a file in it) counts once; the merge's own outputs not at all
        key = _identity(f)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    if not unique:
        raise EnvbuildError("no node reports to merge")
    return unique


def _dedupe(nodes: List[NodeReport]) -> Tuple[List[NodeReport], List[str]]:
    """One row per node: of two reports of the same node the newer run wins (the other is listed as superseded)."""
    by_name: Dict[str, NodeReport] = {}
    superseded: List[str] = []
    for n in nodes:
        old = by_name.get(n.node)
        if old is None:
            by_name[n.node] = n
            continue
        newer = n if (n.error is None, n.report.started_at, n.source) > \
            (old.error is None, old.report.started_at, old.source) else old
        superseded.append((old if newer is n else n).source)
        by_name[n.node] = newer
    return list(by_name.values()), sorted(superseded)


def _version_key(version: str) -> Tuple[int, Any]:
    from packaging.version import InvalidVersion, Version

    try:
        return (1, Version(version))
    except InvalidVersion:
        return (0, version)


def version_results(nodes: List[NodeReport]) -> List[Result]:
    """A `fleet.envbuild_version` error on each node whose report came from another envbuild than most nodes',
    and one fleet-wide result; reports of different versions may judge the same node differently."""
    versions = Counter(n.report.envbuild_version or "unknown" for n in nodes if n.error is None)
    if not versions:
        return []
    majority = max(versions, key=lambda v: (versions[v], _version_key(v)))
    odd = {n.node: n.report.envbuild_version or "unknown" for n in nodes
           if n.error is None and (n.report.envbuild_version or "unknown") != majority}
    for n in nodes:
        if n.node in odd:
            n._status.clear()
            n.findings.append(Result(
                VERSION_CHECK, "fleet", Status.ERROR,
                f"report written by envbuild {odd[n.node]}; {versions[majority]} of {sum(versions.values())} nodes "
                f"ran envbuild {majority}: verdicts of different versions do not compare",
                evidence={"node_version": odd[n.node], "fleet_version": majority},
                remediation=f"install envbuild {majority} on this node and rerun its doctor"))
    listing = ", ".join(f"{v} on {versions[v]}" for v in sorted(versions, key=_version_key))
    if odd:
        return [Result(VERSION_CHECK, "fleet", Status.ERROR,
                       f"{len(odd)} node(s) ran another envbuild than the fleet's {majority}: {listing}",
                       evidence={"versions": dict(sorted(versions.items())), "nodes": dict(sorted(odd.items()))},
                       remediation=f"run envbuild {majority} on every node")]
    return [Result(VERSION_CHECK, "fleet", Status.PASS, f"every report came from envbuild {majority}",
                   evidence={"versions": dict(versions)})]


def merge(nodes: List[NodeReport], fleet_results: Sequence[Result] = (), strict: bool = False,
          superseded: Sequence[str] = ()) -> FleetReport:
    """Join node reports into one fleet report: one row per node, fixed order, version agreement checked."""
    from envbuild import __version__

    unique, dropped = _dedupe(nodes)
    unique.sort(key=lambda n: (natural_key(n.node), n.source))
    results = list(fleet_results) + version_results(unique)
    from envbuild.fleet.audit import audits_in, compare

    audits = audits_in(unique)
    if audits:  # processes audited with audit_actor (or doctor --ray --audit): members must agree
        results += compare(audits)
    results.sort(key=lambda r: (r.check_id, r.subject or ""))
    return FleetReport(nodes=unique, fleet_results=results, envbuild_version=__version__, strict=strict,
                       superseded=sorted(list(superseded) + dropped))


def merge_files(paths: Sequence[str], exclude: Iterable[str] = (), strict: bool = False) -> FleetReport:
    """`envbuild report merge`: read every node report under `paths` and merge them."""
    import gc

    nodes: List[NodeReport] = []
    files = expand_inputs(paths, exclude)
    gc.disable()  # 1000 reports are millions of small objects, none cyclic: the collector's passes doubled the time
    try:
        for f in files:
            nodes.extend(read_file(f))
        fleet = merge(nodes, strict=strict)
        # they live until the command ends: frozen, the full passes that rendering's allocations trigger skip
        # them (unfrozen, those passes were half of a 1000-node merge's time)
        gc.freeze()
        return fleet
    finally:
        gc.enable()


def fleet_to_dict(fleet: FleetReport) -> Dict[str, Any]:
    """The fleet JSON (docs/fleet.md): each node entry is the node's single-node report (envbuild.report v1,
    exactly as the node wrote it) plus `node`, `source`, `node_status`, `error` and `fleet_findings`."""
    nodes = []
    for n in fleet.nodes:
        entry: Dict[str, Any] = {"node": n.node, "source": n.source, "node_status": n.status(fleet.strict).value,
                                 "error": n.error, "fleet_findings": [r.to_dict() for r in n.findings]}
        if n.raw_text is None:
            body = n.raw if n.raw is not None else report_to_dict(n.report)
            entry.update({k: v for k, v in body.items() if k not in entry})
        nodes.append(entry)
    starts = sorted(n.report.started_at for n in fleet.nodes if n.report.started_at)
    return {
        "schema": FLEET_SCHEMA_ID,
        "schema_version": FLEET_SCHEMA_VERSION,
        "envbuild_version": fleet.envbuild_version,
        "first_started_at": starts[0] if starts else None,
        "last_started_at": starts[-1] if starts else None,
        "strict": fleet.strict,
        "node_count": len(fleet.nodes),
        "node_summary": fleet.node_counts(),
        "summary": fleet.result_counts(),
        "bad_nodes": fleet.bad_nodes(),
        "exit_code": fleet.exit_code(),
        "fleet_results": [r.to_dict() for r in fleet.fleet_results],
        "superseded": list(fleet.superseded),
        "nodes": nodes,
    }


def fleet_to_json(fleet: FleetReport) -> List[str]:
    """The fleet JSON text, in pieces to be written one after the other. A node report read from a file is
    spliced in as the node wrote it (its keys after the entry's own), not decoded and encoded again: 1000 nodes
    are 60 MB of JSON."""
    data = fleet_to_dict(fleet)
    nodes = data.pop("nodes")
    head = json.dumps(data, default=str, indent=1)
    parts = [head[:-2], ',\n "nodes": [\n']
    for i, (n, entry) in enumerate(zip(fleet.nodes, nodes)):
        if i:
            parts.append(",\n")
        text = json.dumps(entry, default=str, separators=(",", ":"))
        if n.raw_text is not None:
            parts += [text[:-1], ",", n.raw_text]
        else:
            parts.append(text)
    parts.append("\n ]\n}\n")
    return parts
