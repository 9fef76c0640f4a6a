"""`envbuild explain` end to end: read the logs, scan them, combine with what is known, rank, build the
result (a plain dict: the JSON output, schema envbuild/explain/schema.json, and what the text renderer reads).

Exit codes: 0 no failure recognised in the logs, 1 a failure was found (a cause named, or 'unknown'),
2 bad usage or input (a missing path, nothing readable at all, a malformed --report).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from envbuild.errors import EnvbuildError
from envbuild.explain import context, node, rank, ranker
from envbuild.explain.calibrate import tied
from envbuild.explain.reader import Problem, blocks, expand
from envbuild.explain.scan import Hit, ScanResult, Scanner

SCHEMA_ID = "envbuild.explain"
SCHEMA_VERSION = 1
TIMELINE_ROWS = 16


@dataclass
class ExplainOptions:
    paths: Sequence[str]
    report: Optional[str] = None
    root: Optional[str] = None
    profile: Optional[str] = None
    held_out: Optional[str] = None  # a repository whose own signatures are not used (the benchmark's LORO)
    strict_hold_out: bool = False  # with held_out: also drop signatures written from it and other repositories
    ranker: Optional[Any] = None  # a ranker.Model to use instead of the shipped one (the benchmark's LORO folds)


def new_scanner(held_out: Optional[str] = None, strict: bool = False) -> Scanner:
    """A scanner with every signature, or without those written only from `held_out`'s logs (`strict`: without
    any written from them)."""
    from envbuild.knowledge.signatures import load_facts, load_signatures

    return Scanner([s for s in load_signatures() if s.credited_on(held_out, strict)], load_facts())


def scan_paths(paths: Sequence[str], extra: Sequence[tuple] = (), held_out: Optional[str] = None,
               strict: bool = False) -> tuple:
    """(ScanResult, problems) for `paths` plus (name, text) pairs in `extra`."""
    sources, problems = expand(paths)
    scanner = new_scanner(held_out, strict)
    for src in sources:
        scanner.feed_source(src.name, blocks(src, problems))
    for name, text in extra:
        scanner.feed_source(name, [text.encode("utf-8", "replace")])
    return scanner.result(), problems


def run(opts: ExplainOptions) -> Dict[str, Any]:
    from envbuild.knowledge import load_causes

    report = context.read_report(Path(opts.report)) if opts.report else None
    extra: List[tuple] = []
    origin = "doctor"
    if opts.root:
        bundle_report, logs = context.bundle_inputs(opts.root)
        extra.extend(logs)
        if report is None and bundle_report is not None:
            report, origin = bundle_report, "bundle"
    paths, record_adj, run_section = _run_dirs(opts.paths, extra)
    scan, problems = _scan(paths, extra, opts.held_out, opts.strict_hold_out, given=bool(opts.paths))
    if scan.bytes == 0 and not extra and run_section is None:
        why = "; ".join(f"{p.source}: {p.message}" for p in problems) or "the input is empty"
        raise EnvbuildError(f"explain: no log text to read ({why})")
    adjustments: List[rank.Adjustment] = context.log_adjustments(scan) + record_adj
    reading = ranker.read(scan, opts.ranker)
    adjustments.extend(ranker.adjustments(reading))
    if report is not None:
        adjustments.extend(context.report_adjustments(report, origin))
    facts = node.from_bundle(opts.root) if opts.root else node.NodeFacts()
    if report is not None:
        facts = node.merge(facts, node.from_report(report, "doctor report" if origin == "doctor" else "bundle report.json"))
    checks, node_adj = node.cross_check(scan, facts)
    adjustments.extend(node_adj)
    profile_rows = None
    if opts.profile:
        padj, profile_rows = context.profile_adjustments(opts.profile, scan)
        adjustments.extend(padj)
    causes = load_causes()
    ranked = rank.rank(scan, adjustments, {c.id: c.title for c in causes.values()})
    doctor_failed = context.doctor_failed(report)
    verdict = rank.verdict(scan, ranked, doctor_failed or context.contradicts_itself(adjustments)
                           or any(a.origin in ("node", "record") for a in adjustments))
    healthy = ranker.looks_healthy(reading) if verdict == "explained" else None
    result = build(scan, ranked, verdict, problems, profile_rows, report is not None, healthy)
    result["node_facts"] = facts.to_dict() if facts else None
    result["cross_checks"] = sorted(checks, key=lambda r: r["verdict"] != "differs")
    if run_section is not None:
        # Whether anything in the run failed: recorded facts alone (two libnccl copies in one communicator) name a
        # cause's mechanism even in a run that went through, and the reader must be told which of the two it is.
        run_section["failed"] = bool(run_section["first_failures"]) or rank.failing(scan) \
            or doctor_failed
        result["run"] = run_section
        result["missing"] = run_section["missing"]
    return result


def _scan(paths: Sequence[str], extra: Sequence[tuple], held_out: Optional[str], strict: bool, given: bool) -> tuple:
    """A run dir with no log files of its own is scanned from its recorded texts alone; no path at all is still
    bad usage (scan_paths says so)."""
    if not paths and given:
        scanner = new_scanner(held_out, strict)
        for name, text in extra:
            scanner.feed_source(name, [text.encode("utf-8", "replace")])
        return scanner.result(), []
    return scan_paths(paths, extra, held_out, strict)


def _run_dirs(paths: Sequence[str], extra: List[tuple]) -> tuple:
    """Paths with every `envbuild record` run dir replaced by its NCCL and faulthandler logs; the recorded
    exceptions join `extra` (so the text scanner reads them too); the run's findings and its 'run' section."""
    from envbuild.explain import rundir, runjudge

    out: List[str] = []
    adj: List[rank.Adjustment] = []
    section: Optional[Dict[str, Any]] = None
    for raw in paths:
        p = Path(raw)
        if raw == "-" or not p.is_dir() or not rundir.is_run_dir(p):
            out.append(raw)
            continue
        run = rundir.read(p)
        out.extend(str(f) for f in run.text_files)
        extra.extend(run.texts)
        for proc in run.procs:
            texts = [str(e.get("traceback") or "") + f"\n{e.get('type', '')}: {e.get('message', '')}"
                     for e in proc.of_kind("exception")[:2]]
            if proc.failure and proc.failure.get("traceback"):
                texts.append(str(proc.failure["traceback"]))
            if texts:
                extra.append((f"{proc.host}/proc/{proc.key} ({proc.role})", "\n".join(texts)[:200000]))
        a, section = runjudge.judge(run)
        adj.extend(a)
    return out, adj, section


def named_by_evidence(rc: rank.RankedCause) -> bool:
    """Whether one piece of evidence names this cause on its own (a signature weighing >= 3.5 for it, or a
    doctor, node or log finding as strong): without one, many weak hints add up to a score, not to "high". The
    learned ranker's guess never names a cause by itself: it reads words, not a mechanism."""
    return (any(h.signature.supports.get(rc.id, 0.0) >= rank.NAMES_IT for h in rc.signatures)
            or any(a.delta >= rank.NAMES_IT and a.origin != "model" for a in rc.adjustments))


def guessed_only(rc: rank.RankedCause) -> bool:
    """Whether the cause rests on the learned ranker's guess alone (no signature, no doctor, node or log finding):
    its label is then "low" whatever the calibrated share says, because such guesses were measured right about half
    the time (docs/explain.md, the sixth round), which is what "low" means."""
    return not rc.signatures and all(a.origin == "model" for a in rc.adjustments)


FINDINGS = ("doctor", "bundle", "node", "record")  # evidence from outside the log's lines


def ignored_evidence(rc: rank.RankedCause, scan: ScanResult) -> bool:
    """Whether every failure line behind this cause was inside Python's report of an exception it ignored (a
    finalizer at exit: scan.ignored_failures), while other failure lines of the log were loud: those name no cause
    here (a title "LogicError after multi-bleu", "it fails with an exception"), and the interpreter said it went on
    past the one that does (NervanaSystems/neon #99). Not every warning-level line: a run's own [W ...] line often
    names the cause of the crash printed after it (measured: three right answers held low that way)."""
    failures = [h.signature.id for h in rc.signatures if h.signature.kind == "failure"]
    return bool(failures) and all(sid in scan.ignored_failures for sid in failures)


def held_by(rc: rank.RankedCause, warned: bool, ignored: bool = False,
            healthy: Optional[Tuple[float, float]] = None) -> Optional[str]:
    """Why the cause's label is "low" whatever its calibrated share, or None when it is not held: it rests on the
    learned ranker's guess alone ("guessed", guessed_only); or, unless a doctor, node or recorded finding stands
    behind it, the log printed its failures only as warnings ("warned", rank.warned_only), every line naming it is
    Python's report of an exception it ignored ("ignored", ignored_evidence), or its text reads like the corpus's
    runs that went on (`healthy`, ranker.looks_healthy: its probability at least its threshold, "looks_healthy")."""
    if guessed_only(rc):
        return "guessed"
    if any(a.delta > 0 and a.origin in FINDINGS for a in rc.adjustments):
        return None
    if warned:
        return "warned"
    if ignored:
        return "ignored"
    if healthy is not None and healthy[0] >= healthy[1]:
        return "looks_healthy"
    return None


def _hit_dict(h: Hit, cause: Optional[str] = None) -> Dict[str, Any]:
    s = h.signature
    d = {"signature": s.id, "means": s.means, "count": h.count, "processes": len(h.whos),
         "locations": [loc.to_dict() for loc in h.locations], "source": s.source,
         "knowledge": f"envbuild/knowledge/signatures/{s.file.name}:{s.line}"}
    if cause:
        d["weight"] = s.supports.get(cause)
    return d


def _facts(scan: ScanResult) -> Dict[str, List[Dict[str, Any]]]:
    return {fid: [{"value": v.value, "count": v.count, "first": v.first.to_dict()}
                  for v in sorted(values.values(), key=lambda v: -v.count)]
            for fid, values in sorted(scan.facts.items())}


def timeline(scan: ScanResult) -> List[Dict[str, Any]]:
    """The first failure of every process, in time order where the lines carry a time, else in reading order."""
    order = {name: i for i, name in enumerate(scan.sources)}
    rows = [p for p in scan.processes.values() if p.first_failure is not None]
    rows.sort(key=lambda p: (p.first_failure.ts is None, p.first_failure.ts or "",  # type: ignore[union-attr]
                             order.get(p.first_failure.source, 0), p.first_failure.line))  # type: ignore[union-attr]
    out = []
    for i, p in enumerate(rows[:TIMELINE_ROWS]):
        loc = p.first_failure
        out.append({"who": p.who, "source": loc.source, "line": loc.line, "time": loc.ts,  # type: ignore[union-attr]
                    "signature": p.failure_signature, "text": loc.text, "phase": p.failure_phase,  # type: ignore[union-attr]
                    "exception": p.exception, "frame": p.frame, "first": i == 0})
    return out


def _next_steps(entries: List[Dict[str, Any]]) -> List[str]:
    """What tells the leading causes apart: a doctor check or a variable flip per cause, in rank order."""
    steps: List[str] = []
    for c in entries[:3]:
        for chk in c["checks"][:1]:
            s = f"envbuild doctor --check {chk}  (confirms or clears {c['id']})"
            if s not in steps:
                steps.append(s)
        for f in c["flips"][:1]:
            s = f"rerun with {f['set']}: {f['reading']}"
            if s not in steps:
                steps.append(s)
    return steps


def build(scan: ScanResult, ranked: List[rank.RankedCause], verdict: str, problems: List[Problem],
          profile_rows: Optional[List[Dict[str, Any]]], had_report: bool,
          healthy: Optional[Tuple[float, float]] = None) -> Dict[str, Any]:
    from envbuild.knowledge import load_causes
    from envbuild.knowledge.signatures import load_flips

    causes, flips, checks = load_causes(), load_flips(), context.check_causes()
    by_cause: Dict[str, List[str]] = {}
    for chk, cs in sorted(checks.items(), key=lambda kv: (len(kv[1]), kv[0])):  # the most specific check first
        for c in cs:
            by_cause.setdefault(c, []).append(chk)
    entries = []
    shown = rank.top(ranked) if verdict != "ok" else []
    warned = rank.warned_only(scan)
    for rc in shown:
        cause = causes.get(rc.id)
        sig_flips = [{"set": h.signature.flip, "reading": f"the {h.signature.id} failure goes away"}
                     for h in rc.signatures if h.signature.flip]
        held = held_by(rc, warned, ignored_evidence(rc, scan), healthy)
        entries.append({
            "id": rc.id, "title": rc.title, "score": rc.score, "confidence": rc.share, "probability": rc.confidence,
            "label": "low" if held else rank.label(rc.confidence, named_by_evidence(rc)),
            "held": held,
            "named": named_by_evidence(rc),
            "evidence": [_hit_dict(h, rc.id) for h in rc.signatures],
            "adjustments": [a.to_dict() for a in rc.adjustments],
            "ruled_out_by": rc.ruled_out_by,
            "checks": by_cause.get(rc.id, []),
            "flips": [{"set": f.set, "reading": f.reading} for f in flips.get(rc.id, ())] or sig_flips[:1],
            "detect": cause.detect if cause else "", "fix": cause.fix if cause else "",
        })
    hits = rank.counted_hits(scan)
    unexplained = [_hit_dict(h) for h in hits.values() if h.signature.kind == "failure" and not h.signature.supports]
    return {
        "schema": SCHEMA_ID, "schema_version": SCHEMA_VERSION, "verdict": verdict,
        "top": entries[0]["id"] if entries and verdict == "explained" else None,
        "tied": tied([(c.id, c.score) for c in ranked]) if verdict == "explained" else [],
        "inputs": {"sources": scan.sources, "lines": scan.lines, "bytes": scan.bytes, "engine": scan.engine,
                   "problems": [p.to_dict() for p in problems], "doctor_report": had_report},
        "facts": _facts(scan),
        "causes": entries,
        "next_steps": _next_steps(entries) if verdict == "explained" else [],
        "failures_without_cause": unexplained,
        "recovered": {"failures": scan.recovered, "shown": [r.to_dict() for r in scan.recoveries]},
        "warned_only": warned and verdict != "ok",
        "looks_healthy": None if healthy is None else {"probability": round(healthy[0], 3), "threshold": healthy[1]},
        "timeline": timeline(scan),
        "profile": profile_rows,
    }


def exit_code(result: Dict[str, Any]) -> int:
    return 0 if result["verdict"] == "ok" else 1
