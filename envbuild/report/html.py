"""`envbuild report html`: one self-contained HTML page for one node's doctor report or a fleet of them.

The page leads with the verdict and the root causes, then what a cluster admin forwards: the failing checks
with their fixes, a node x check grid (fleet), the P2P matrix, busbw against the line rate, the train step's
memory and time per cycle, and the env-vs-image table. Plots are inline SVG from matplotlib (html_plots.py);
there is no script and no external asset, so the file opens offline and can be mailed. The same reports give
the same bytes (no generation time on the page), so pages diff and cache.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from envbuild import __version__
from envbuild.report.html_data import (BusbwSeries, nccl_run, p2p_matrix, profile_rows, read_nccl_tests,
                                       results_of, size_text, train_run)
from envbuild.report.html_input import NodeReport, read_inputs
from envbuild.report.model import Report, Result, Status

TEMPLATE = "report.html.j2"
_EVIDENCE_CHARS = 3000  # per result on a one-node page; a fleet page shows no evidence (size)
_FIX_STATUSES = (Status.FAIL, Status.ERROR, Status.WARN)


@dataclass
class Section:
    """One plot section: the SVG when there is something to draw, else `missing` says what and why."""

    svg: Optional[str] = None
    missing: List[str] = field(default_factory=list)
    extra: Dict[str, Any] = field(default_factory=dict)


def render_files(paths: Sequence[str], nccl_tests: Sequence[str] = (), title: Optional[str] = None) -> Tuple[str, List[str]]:
    """(page, notes) for the reports at `paths` (files, folders, merged fleet reports); bad input raises
    InputFileError naming the file."""
    inputs = read_inputs(paths)
    reference: List[BusbwSeries] = []
    for ref in nccl_tests:
        reference += read_nccl_tests(ref)
    page = render_nodes(inputs.nodes, reference=reference, title=title, notes=inputs.notes,
                        fleet_results=inputs.fleet_results)
    return page, inputs.notes


def render_nodes(nodes: List[NodeReport], reference: Sequence[BusbwSeries] = (), title: Optional[str] = None,
                 notes: Sequence[str] = (), fleet_results: Sequence[Result] = ()) -> str:
    """The page for these nodes: one node gets its full detail, several (or a merged report) are a fleet;
    `fleet_results` are a merged report's results about the fleet as a whole."""
    import jinja2

    from envbuild.paths import templates_dir

    # templates/ as lock.spec.template_env reads it (StrictUndefined), escaping for HTML; report/ sits below
    # lock/ in the layers, so the setup is not imported from there
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), undefined=jinja2.StrictUndefined,
                             autoescape=True, keep_trailing_newline=True)
    fleet = len(nodes) > 1 or bool(fleet_results)
    whole = [NodeReport(name="fleet-wide", source="merged report",
                        report=Report(host={}, gpus=[], results=list(fleet_results)))] if fleet_results else []
    ctx = {
        "title": title or (f"envbuild fleet report · {len(nodes)} nodes" if fleet else
                           f"envbuild doctor · {nodes[0].name}"),
        "version": __version__,
        "fleet": fleet,
        "verdict": _verdict(nodes, list(fleet_results)),
        "nodes": [_node_card(n) for n in nodes],
        "causes": _causes(nodes + whole, len(nodes)),
        "findings": _findings(nodes + whole, len(nodes)),
        "grid": _grid(nodes) if fleet else None,
        "fleet_results": [{"status": r.status.value, "check": r.check_id, "subject": r.subject or "",
                           "summary": r.summary, "remediation": r.remediation} for r in fleet_results],
        "p2p": _p2p_section(nodes),
        "nccl": _nccl_section(nodes, reference),
        "train": _train_section(nodes),
        "profile": _profile_section(nodes),
        "stack": _stack_table(nodes),
        "details": [_details(n, with_evidence=not fleet) for n in nodes],
        "notes": list(notes),
        "status_order": ["fail", "error", "warn", "pass", "skip"],
    }
    return env.get_template(TEMPLATE).render(**ctx)


# ---------------------------------------------------------------- verdict, causes, findings


def _failed(n: NodeReport) -> bool:
    return n.report.exit_code(strict=bool(n.report.options.get("strict"))) != 0


def _node_status(n: NodeReport) -> str:
    c = n.report.counts()
    if _failed(n):
        return "fail" if c["fail"] else "error"
    return "warn" if c["warn"] else "pass"


def _verdict(nodes: List[NodeReport], fleet_results: List[Result]) -> Dict[str, Any]:
    counts = {s.value: 0 for s in Status}
    for n in nodes:
        for k, v in n.report.counts().items():
            counts[k] += v
    for r in fleet_results:
        counts[r.status.value] += 1
    bad = [n.name for n in nodes if _failed(n)]
    warned = [n.name for n in nodes if not _failed(n) and n.report.counts()["warn"]]
    fleet_bad = sorted({r.check_id for r in fleet_results if r.status in (Status.FAIL, Status.ERROR)})
    if len(nodes) > 1 or fleet_results:
        word = f"{len(bad)} of {len(nodes)} nodes FAIL" if bad else (
            f"all {len(nodes)} nodes pass" + (f", {len(warned)} with warnings" if warned else ""))
        if fleet_bad:
            word = (word if bad else f"{len(nodes)} nodes") + f"; fleet-wide {', '.join(fleet_bad)} FAIL"
    else:
        word = "FAIL" if bad else ("PASS with warnings" if warned else "PASS")
    status = "fail" if bad or fleet_bad else ("warn" if warned else "pass")
    return {"word": word, "status": status, "counts": counts, "bad": bad, "warned": warned}


def _causes(nodes: List[NodeReport], total: int) -> List[Dict[str, Any]]:
    """Every root cause a failing or warning check names, worst first, with where it was seen and its fix."""
    from envbuild.knowledge import load_causes

    known = load_causes()
    fleet = len(nodes) > 1
    seen: Dict[str, Dict[str, Any]] = {}
    for n in nodes:
        for r in n.report.results:
            if r.status not in _FIX_STATUSES:
                continue
            for cid in r.causes:
                entry = seen.setdefault(cid, {"id": cid, "rank": -1, "checks": {}, "nodes": set()})
                if r.status.rank > entry["rank"]:
                    entry["rank"], entry["status"] = r.status.rank, r.status.value
                entry["nodes"].add(n.name)
                label = r.check_id if fleet else r.check_id + (f" [{r.subject}]" if r.subject else "")
                entry["checks"].setdefault(label, []).append(n.name)
    out = []
    for cid, entry in seen.items():
        cause = known.get(cid)
        where = [_on_nodes(label, names, total) if fleet else label for label, names in entry.pop("checks").items()]
        out.append({**entry, "nodes": sorted(entry["nodes"]), "where": where,
                    "title": cause.title if cause else "(not in this envbuild's knowledge/causes.toml)",
                    "fix": cause.fix if cause else "", "mechanism": cause.mechanism if cause else ""})
    out.sort(key=lambda e: (-e["rank"], -len(e["nodes"]), e["id"]))
    return out


def _on_nodes(label: str, names: List[str], total: int) -> str:
    """'node.uvm_hmm on all 64 nodes', 'comm.nccl_collectives on node-017', '... on 9 nodes (a, b, c, ...)'."""
    uniq = list(dict.fromkeys(names))
    if len(uniq) == total:
        return f"{label} on all {total} nodes"
    if len(uniq) <= 3:
        return f"{label} on {', '.join(uniq)}"
    return f"{label} on {len(uniq)} nodes ({', '.join(uniq[:4])}, …)"


def _findings(nodes: List[NodeReport], total: int) -> List[Dict[str, Any]]:
    """Failing, erroring and warning results, one entry per check and verdict; on a fleet the nodes that share
    the same finding are listed under it instead of repeating it 64 times."""
    groups: Dict[Tuple[str, str, str], Dict[str, Any]] = {}
    for n in nodes:
        for r in n.report.results:
            if r.status not in _FIX_STATUSES:
                continue
            key = (r.check_id, r.status.value, r.remediation or "")
            g = groups.setdefault(key, {"check_id": r.check_id, "status": r.status.value, "rank": r.status.rank,
                                        "remediation": r.remediation, "causes": [], "items": []})
            g["items"].append({"node": n.name, "subject": r.subject, "summary": r.summary})
            g["causes"] = sorted(set(g["causes"]) | set(r.causes))
    fleet = len(nodes) > 1
    for g in groups.values():
        by_text: Dict[Tuple[str, str], List[str]] = {}
        for it in g["items"]:
            by_text.setdefault((it["subject"] or "", it["summary"]), []).append(it["node"])
        g["nodes"] = len({it["node"] for it in g["items"]})
        g["lines"] = [{"subject": subject, "summary": summary,
                       "where": _on_nodes("", names, total).strip() if fleet else ""}
                      for (subject, summary), names in by_text.items()]
    return sorted(groups.values(), key=lambda g: (-g["rank"], g["check_id"]))


def _node_card(n: NodeReport) -> Dict[str, Any]:
    rep = n.report
    gpus = [g for g in rep.gpus if isinstance(g, dict)]
    names = sorted({str(g.get("name")) for g in gpus if g.get("name")})
    opts = rep.options if isinstance(rep.options, dict) else {}
    return {
        "name": n.name, "source": n.source, "status": _node_status(n), "counts": rep.counts(),
        "host": rep.host.get("hostname"), "kernel": rep.host.get("kernel"), "facts": rep.host.get("source"),
        "gpus": f"{len(gpus)} x {', '.join(names)}" if gpus else "no GPU inventory (NVML not available)",
        "mode": opts.get("mode", "?"), "profile": rep.profile, "started": rep.started_at,
        "duration": rep.duration_s, "envbuild": rep.envbuild_version, "python": opts.get("python"),
    }


# ---------------------------------------------------------------- fleet grid


def _grid(nodes: List[NodeReport]) -> Dict[str, Any]:
    """node x check: each cell the worst status over the check's subjects on that node, with its summary."""
    cats: Dict[str, str] = {}
    for n in nodes:
        for r in n.report.results:
            cats.setdefault(r.check_id, r.category)
    rank = _category_order([cats[c] for c in cats])
    checks = sorted(cats, key=lambda c: rank[cats[c]])  # stable: the doctor's order within a category
    rows = []
    for n in nodes:
        cells: Dict[str, Tuple[int, str, str]] = {}
        for r in n.report.results:
            prev = cells.get(r.check_id)
            if prev is None or r.status.rank > prev[0]:
                subject = f" [{r.subject}]" if r.subject else ""
                cells[r.check_id] = (r.status.rank, r.status.value, f"{r.status.value}{subject}: {r.summary}")
        rows.append({"node": n.name, "status": _node_status(n),
                     "cells": [{"status": cells[c][1], "title": f"{n.name} · {c} · {cells[c][2]}"} if c in cells
                               else {"status": "none", "title": f"{n.name} · {c}: not run"} for c in checks]})
    bad_first = sorted(rows, key=lambda row: ({"fail": 0, "error": 1, "warn": 2}.get(row["status"], 3)))
    return {"checks": checks, "categories": [cats[c] for c in checks], "rows": bad_first}


# ---------------------------------------------------------------- plot sections


def _missing(n: NodeReport, check_id: str, how: str) -> str:
    """Why a node has no data for a plot: the check's own skip reason, its failure before measuring, or that it
    did not run (and how to make it run)."""
    rs = results_of(n.report, check_id)
    if not rs:
        return f"{check_id} did not run: {how}"
    r = max(rs, key=lambda x: x.status.rank)
    word = {"skip": "skipped", "fail": "failed before it measured", "error": "broke (the check itself)"}.get(
        r.status.value, "has no data for this plot")
    return f"{check_id} {word}: {r.summary}"


def _grouped(missing: List[Tuple[str, str]], fleet: bool) -> List[str]:
    """One line per distinct reason; on a fleet the nodes sharing it are named after it (64 identical lines
    say less than one line with a count)."""
    if not fleet:
        return [why for _, why in missing]
    by_why: Dict[str, List[str]] = {}
    for name, why in missing:
        by_why.setdefault(why, []).append(name)
    out = []
    for why, names in by_why.items():
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        out.append(f"{shown}: {why}" if len(names) == 1 else f"{len(names)} nodes ({shown}): {why}")
    return out


def _p2p_section(nodes: List[NodeReport]) -> Section:
    from envbuild.report import html_plots

    fleet = len(nodes) > 1
    how = "it runs with `envbuild doctor --quick` or `--full` on 2 or more GPUs"
    found = []
    sec = Section()
    missing: List[Tuple[str, str]] = []
    for n in nodes:
        m = p2p_matrix(n.report)
        if m is None:
            missing.append((n.name, _missing(n, "gpu.p2p", how)))
        else:
            worst = max((r.status for r in results_of(n.report, "gpu.p2p")), key=lambda s: s.rank)
            found.append((n.name, m, worst))
    sec.missing = _grouped(missing, fleet)
    if not found:
        return sec
    if fleet:
        sec.svg = html_plots.fleet_p2p_chart(found, salt="fleet-p2p")
        slow = [(c.fraction, name, src, dst) for name, m, _ in found for (src, dst), c in m.cells.items()
                if c.fraction is not None]
        if slow:
            frac, name, src, dst = min(slow)
            sec.extra["slowest"] = f"slowest pair: {name} GPU {src} → GPU {dst} at {frac:.2f} of line rate"
    else:
        m = found[0][1]
        sec.svg = html_plots.p2p_heatmap(m, salt="p2p")
        sec.extra["bidir"] = [{"pair": f"GPU {a} ↔ GPU {b}", "gbps": f"{g:.0f}",
                               "fraction": f"{f:.2f}" if f is not None else "-"} for a, b, g, f in m.bidir]
        sec.extra["line_rate"] = m.line_rate_gbps
        sec.extra["link"] = m.link
    return sec


def _nccl_section(nodes: List[NodeReport], reference: Sequence[BusbwSeries]) -> Section:
    from envbuild.report import html_plots

    fleet = len(nodes) > 1
    how = "it runs with `envbuild doctor --quick` or `--full` on 2 or more GPUs"
    sec = Section()
    runs = []
    missing: List[Tuple[str, str]] = []
    for n in nodes:
        run = nccl_run(n.report)
        if run is None:
            missing.append((n.name, _missing(n, "comm.nccl_collectives", how)))
        else:
            runs.append((n, run))
    sec.missing = _grouped(missing, fleet)
    if not runs:
        if reference:
            sec.missing.append("the nccl-tests reference is not drawn without a comm.nccl_collectives result")
        return sec
    rates = [r.line_rate_gbps for _, r in runs if r.line_rate_gbps]
    line_rate = min(rates) if rates else None
    sec.extra["line_rate_text"] = runs[0][1].line_rate_text
    if not fleet:
        groups: Dict[str, List[BusbwSeries]] = {}
        for s in runs[0][1].series:
            groups.setdefault(s.op, []).append(s)
        sec.svg = html_plots.busbw_chart(groups, line_rate, reference=reference, salt="busbw")
        sec.extra["table"] = _busbw_table(runs[0][1].series, reference)
        return sec
    per_node = []  # the first subject's all_reduce of every node (NCCL_CUMEM_ENABLE=0 in the doctor's order)
    for n, run in runs:
        ar = [s for s in run.series if s.op == "all_reduce"]
        if ar:
            s = ar[0]
            per_node.append((n, BusbwSeries(label=n.name, op="all_reduce", sizes=s.sizes, busbw=s.busbw,
                                            status=s.status)))
    if not per_node:
        sec.missing.append("no node measured all_reduce")
        return sec
    top = [(n.name, s.busbw[-1], s.status or Status.PASS, s.sizes[-1]) for n, s in per_node]
    slow = min(top, key=lambda t: t[1])
    sec.svg = html_plots.busbw_chart({"all_reduce": [s for _, s in per_node]}, line_rate, reference=reference,
                                     highlight=slow[0], salt="busbw-fleet")
    sec.extra["bars"] = html_plots.fleet_busbw_bars([(t[0], t[1], t[2]) for t in top], line_rate,
                                                    size_text(slow[3]), salt="fleet-busbw")
    import statistics

    med = statistics.median(t[1] for t in top)
    sec.extra["slowest"] = (f"slowest node: {slow[0]}, all_reduce {slow[1]:.0f} GB/s at {size_text(slow[3])} = "
                            f"{slow[1] / med:.2f} of the fleet median {med:.0f} GB/s")
    return sec


def _busbw_table(series: Sequence[BusbwSeries], reference: Sequence[BusbwSeries]) -> Dict[str, Any]:
    """The plotted numbers as a table (op x size), so they can be copied and read without the plot."""
    sizes = sorted({z for s in series for z in s.sizes})
    rows = []
    for s in list(series) + list(reference):
        vals = dict(zip(s.sizes, s.busbw))
        rows.append({"op": s.op, "label": s.label, "cells": [f"{vals[z]:.0f}" if z in vals else "" for z in sizes]})
    return {"sizes": [size_text(z) for z in sizes], "rows": rows}


def _train_section(nodes: List[NodeReport]) -> Section:
    from envbuild.report import html_plots

    fleet = len(nodes) > 1
    sec = Section()
    runs = []
    missing: List[Tuple[str, str]] = []
    for n in nodes:
        run = train_run(n.report)
        if run is None or not run.steps:
            missing.append((n.name, _missing(n, "train.moe_step", "it runs with `envbuild doctor --full` (or "
                                             "`--check train.moe_step`) on a node with megatron-core")))
            continue
        run.label = n.name if fleet else run.label
        runs.append((n, run))
    sec.missing = _grouped(missing, fleet)
    if runs:
        sec.svg = html_plots.train_chart([r for _, r in runs], salt="train")
        listed = [(n, r) for n, r in runs if not fleet or r.status is not Status.PASS]
        sec.extra["runs"] = [{"node": n.name, "status": r.status.value, "summary": r.summary} for n, r in listed]
        sec.extra["passed"] = len(runs) - len(listed)
    return sec


def _profile_section(nodes: List[NodeReport]) -> Dict[str, Any]:
    """stack.profile_match's table; on a fleet, one row per component with each distinct env value and the
    nodes that have it, so the one node with another NCCL stands out."""
    tables = [(n, profile_rows(n.report)) for n in nodes]
    have = [(n, t) for n, t in tables if t]
    missing = _grouped([(n.name, _missing(n, "stack.profile_match", "pass `--profile NAME` to `envbuild doctor`"))
                        for n, t in tables if not t], len(nodes) > 1)
    if not have:
        return {"rows": [], "missing": missing}
    first = have[0][1]
    if len(have) == 1:
        rows = [dict(row, nodes="") for row in first["rows"]]
    else:
        by_comp: Dict[str, Dict[str, Any]] = {}
        for n, t in have:
            for row in t["rows"]:
                comp = by_comp.setdefault(row.get("component", "?"), dict(row, values={}))
                comp["values"].setdefault(row.get("env", "-"), []).append(n.name)
                if row.get("verdict") not in ("match", "match (commit unknown)"):
                    comp["verdict"], comp["severity"], comp["why"] = row.get("verdict"), row.get("severity"), row.get("why")
        rows = []
        for comp in by_comp.values():
            vals = comp.pop("values")
            comp["env"] = "; ".join(f"{v} ({_count(ns)})" for v, ns in vals.items()) if len(vals) > 1 else next(iter(vals))
            rows.append(comp)
    for row in rows:
        row["cls"] = _verdict_class(row)
    order = {"fail": 0, "warn": 1, "skip": 2, "pass": 3}
    rows.sort(key=lambda row: order[row["cls"]])  # mismatches first, the profile's order kept within each
    return {"rows": rows, "profile": first["profile"], "image": first["image"], "missing": missing,
            "status": first["status"].value, "summary": first["summary"]}


def _count(names: List[str]) -> str:
    return ", ".join(names) if len(names) <= 3 else f"{len(names)} nodes"


def _verdict_class(row: Dict[str, Any]) -> str:
    verdict = str(row.get("verdict", ""))
    if verdict.startswith("match"):
        return "pass"
    if verdict == "not checked":
        return "skip"
    sev = row.get("severity")
    return {"fail": "fail", "warn": "warn"}.get(str(sev), "warn" if verdict == "differs" else "skip")


def _stack_table(nodes: List[NodeReport]) -> List[Dict[str, Any]]:
    """stack.* results (the env under test against its profile); on a fleet only those that are not a pass."""
    fleet = len(nodes) > 1
    rows = []
    for n in nodes:
        for r in n.report.results:
            if r.category == "stack" and (not fleet or r.status in _FIX_STATUSES):
                rows.append({"node": n.name, "check": r.check_id + (f" [{r.subject}]" if r.subject else ""),
                             "status": r.status.value, "summary": r.summary})
    return rows


def _category_order(categories: List[str]) -> Dict[str, int]:
    """Categories in the order the doctor wrote them (node, stack, gpu, comm, train): a report lists its results
    grouped that way already, except a check whose id and category disagree, which this regroups."""
    order: Dict[str, int] = {}
    for c in categories:
        order.setdefault(c, len(order))
    return order


def _details(n: NodeReport, with_evidence: bool) -> Dict[str, Any]:
    rank = _category_order([r.category for r in n.report.results])
    results = sorted(n.report.results, key=lambda r: rank[r.category])
    rows = []
    for r in results:
        if not with_evidence and r.status is Status.PASS:
            continue
        ev = ""
        if with_evidence and r.evidence:
            ev = json.dumps(r.evidence, indent=1, default=str)
            if len(ev) > _EVIDENCE_CHARS:
                ev = ev[:_EVIDENCE_CHARS] + f"\n… {len(ev) - _EVIDENCE_CHARS} more characters in the JSON report"
        metrics = [f"{m.name} = {m.value:g} {m.unit}".rstrip() + (f" (expect {m.expect})" if m.expect else "")
                   for m in r.metrics if isinstance(m.value, (int, float))][:24] if with_evidence else []
        rows.append({"category": r.category, "check": r.check_id, "subject": r.subject or "", "status": r.status.value,
                     "summary": r.summary, "remediation": r.remediation, "causes": r.causes, "evidence": ev,
                     "metrics": metrics, "duration": r.duration_s})
    return {"name": n.name, "status": _node_status(n), "rows": rows, "card": _node_card(n),
            "hidden_pass": sum(1 for r in results if r.status is Status.PASS) if not with_evidence else 0}


def write_html(text: str, path: str, flag: str = "--output") -> None:
    from envbuild.outputs import write_output

    write_output(path, text, flag)


def page_of_json(json_text: "str | Sequence[str]", written: Optional[str] = None) -> str:
    """The page of a report given as its JSON text (a doctor's or a fleet's), read through the same reader
    `report html` uses, so `doctor --html` and `report html` of one run give the same page: from `written`, the
    run's --json file, when it is one (the page then names it as `report html` would), else from a temporary copy."""
    import os
    import tempfile

    if written and os.path.isfile(written):
        return render_files([written])[0]
    fd, tmp = tempfile.mkstemp(prefix="envbuild-report-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.writelines([json_text] if isinstance(json_text, str) else json_text)
        return render_files([tmp])[0]
    finally:
        os.unlink(tmp)
