"""The terminal form of an explain result: the verdict, causes ranked with the lines behind them, what tells
the leading ones apart, and the first-failure timeline. Plain text (no colour), so it pastes into an issue."""
from __future__ import annotations

from typing import Any, Dict, List

_FACT_LINE = (("nccl_version", "NCCL"), ("nccl_build_cuda", "NCCL built for CUDA"), ("cuda_driver_version", "libcuda's CUDA"),
              ("driver_version", "driver"), ("driver_cuda", "driver's CUDA"), ("cuda_runtime", "CUDA runtime"),
              ("cuda_runtime_code", "CUDA runtime"), ("torch_version", "torch"), ("gpu_model", "GPU"), ("nranks", "ranks"),
              ("framework", "framework"), ("failing_call", "failing NCCL call"), ("cuda_error", "CUDA error"),
              ("transport", "transports"))


_NODE_LINE = (("gpu_model", "GPU"), ("driver_version", "driver"), ("cuda_driver_version", "driver CUDA"),
              ("torch_version", "torch"), ("torch_nccl", "torch's NCCL"))


def _values(result: Dict[str, Any], fid: str) -> List[str]:
    vals = [v["value"] for v in result["facts"].get(fid, [])]
    if fid == "nranks" and vals:
        return [max(vals, key=int)]
    return vals[:4]


def _where(loc: Dict[str, Any]) -> str:
    return f"{loc['source']}:{loc['line']}"


def render(result: Dict[str, Any]) -> str:
    out: List[str] = []
    inp = result["inputs"]
    out.append(f"envbuild explain · {len(inp['sources'])} input(s), {inp['lines']} lines")
    facts = [f"{label} {', '.join(_values(result, fid))}" for fid, label in _FACT_LINE if _values(result, fid)]
    if facts:
        out.append("facts: " + " · ".join(facts))
    nf = result.get("node_facts")
    if nf:
        shown = [f"{label} {', '.join(v['value'] for v in nf['values'][fid][:2])}" for fid, label in _NODE_LINE
                 if nf["values"].get(fid)]
        origins = sorted({v["origin"].split(" (")[0] for vs in nf["values"].values() for v in vs})
        if shown:
            out.append(f"node ({'; '.join(origins)}): " + " · ".join(shown))
    for c in result.get("cross_checks") or []:
        if c["verdict"] == "differs":
            out.append(f"cross-check: {c['says']}")
    for p in inp["problems"]:
        out.append(f"note: {p['source']}: {p['message']}")
    run = result.get("run")
    if run:
        out.append(f"run dir: {len(run['processes'])} process(es) on {len(run['nodes'])} node(s)")
        for r in run["first_failures"][:8]:
            out.append(f"  {'*' if r['first'] else ' '} {_clock(r['t'])} {r['who']}: {r['what'][:140]}  [{r['file']}]")
        for v in run["flight_recorder"]:
            out.append(f"  flight recorder: {v['says']}")
    for m in result.get("missing") or []:
        out.append(f"missing: {m['file']}: {m['message']}")
    verdict = result["verdict"]
    recovered = result.get("recovered") or {"failures": 0, "shown": []}
    if verdict == "ok":
        if recovered["failures"]:
            out.append(f"verdict: no failure left — the run got past each failure it printed ({recovered['failures']} "
                       "signature(s))")
            out.extend(_recoveries(recovered))
        else:
            out.append("verdict: no failure recognised in the logs (nothing recognised as an error)")
        return "\n".join(out) + "\n"
    if verdict == "unknown":
        out.append("verdict: a failure, cause unknown — no known signature explains it")
        for f in result["failures_without_cause"][:4]:
            loc = f["locations"][0]
            out.append(f"  {f['signature']}: {loc['text'][:160]}  ({_where(loc)})")
    else:
        top = result["causes"][0]
        why = " — no single line names it" if top["label"] == "medium" and top["probability"] >= 0.9 else ""
        # A "low" answer is the best of weak evidence (right about half the time on the corpus, about one time in ten
        # on blind slices at first sight): say it is a guess, so nobody acts on it before its check confirms it.
        lead = "a guess, check it first:" if top["label"] == "low" else "most likely"
        out.append(f"verdict: {lead} {top['id']} — {top['title']} ({top['probability']:.0%}, {top['label']}{why})")
        if top.get("held") == "warned":
            out.append("  every failure it printed was a warning or info line (or quoted in a question whether it matters), "
                       "and nothing after it an error: a run that logs a failure that way says it went on from it")
        elif top.get("held") == "ignored":
            out.append("  the lines that name it are an exception the program went on past: Python's report of one it ignored "
                       "(in a finalizer, at exit), or one logged with what the program does instead (retrying, falling back)")
        elif top.get("held") == "looks_healthy":
            seen = result["looks_healthy"]
            out.append(f"  its text reads like the reports of runs that went on past such lines (learned healthy check: "
                       f"{seen['probability']:.0%}, holds from {seen['threshold']:.0%}): it may not have failed at all")
        if run and not run.get("failed", True):
            out.append(f"  no process of this run failed: the recorded facts are {top['id']}'s mechanism, a risk for the "
                       "next run rather than the cause of a failure in this one")
        if result.get("tied"):
            out.append(f"  the evidence fits {', '.join(result['tied'])} equally: tell them apart with the steps below")
    if result["causes"]:
        out.append("")
        out.append("causes, ranked:")
    for i, c in enumerate(result["causes"], 1):
        out.append(f"{i:>2}. {c['id']:<4} {c['probability']:>4.0%}  {c['title']}")
        for e in c["evidence"][:4]:
            loc = e["locations"][0] if e["locations"] else None
            times = f" ×{e['count']}" if e["count"] > 1 else ""
            where = f"  [{_where(loc)}]" if loc else ""
            out.append(f"        + {e['signature']}{times}{where}: {loc['text'][:140] if loc else ''}")
        for a in c["adjustments"][:3]:
            sign = f"+{a['delta']:g}" if a["delta"] else f"x{a['factor']:g}"
            out.append(f"        {sign} {a['origin']}: {a['reason'][:150]}")
        for r in c["ruled_out_by"][:2]:
            out.append(f"        - lowered by {r}")
        if i <= 3:
            if c["checks"]:
                out.append(f"        check: envbuild doctor --check {' --check '.join(c['checks'][:3])}")
            for f in c["flips"][:1]:
                out.append(f"        flip:  {f['set']} and rerun — {f['reading']}")
            out.append(f"        fix:   {c['fix']}")
    if result["next_steps"]:
        out.append("")
        out.append("what tells the leading causes apart:")
        out.extend(f"  - {s}" for s in result["next_steps"])
    if result.get("profile"):
        out.append("")
        out.append("log vs image:")
        for r in result["profile"]:
            out.append(f"  {r['component']:<28} image {r['image'] or '-':<12} log {', '.join(r['log']) or '-':<16} {r['verdict']}")
    if recovered["failures"]:
        out.append("")
        out.append(f"failures the run got past ({recovered['failures']}), not counted against it:")
        out.extend(_recoveries(recovered))
    if result["timeline"]:
        out.append("")
        out.append("first failure per process (earliest first):")
        for t in result["timeline"]:
            phase = f" in {t['phase']}" if t["phase"] else ""
            when = (t["time"] or "").replace("0000-", "")
            out.append(f"  {'*' if t['first'] else ' '} {when:<26} {t['who'][:48]:<48} {t['signature']}{phase}  [{t['source']}:{t['line']}]")
            if t["first"] and t["exception"]:
                out.append(f"      raised: {t['exception'][:160]}" + (f"  at {t['frame']}" if t["frame"] else ""))
    return "\n".join(out) + "\n"


def _recoveries(recovered: Dict[str, Any]) -> List[str]:
    """Each failure the run got past (its first line and the last line it was printed on), with the later line that
    shows it did."""
    out = []
    for r in recovered["shown"][:4]:
        f, c = r["failure"], r["completion"]
        last = f" (last on line {r['last_line']})" if r["last_line"] != f["line"] else ""
        out.append(f"  - {r['signature']}  [{_where(f)}]{last}: {f['text'][:120]}")
        out.append(f"    then {r['completion_signature']}  [{c['source']}:{r['completion_line']}]: {c['text'][:120]}")
    if recovered["failures"] > 4:
        out.append(f"  - and {recovered['failures'] - 4} more")
    return out


def _clock(t: float) -> str:
    """A recorded time (seconds since the epoch) as the UTC time of day a person matches against other logs."""
    import datetime as _dt

    try:
        return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, OSError, ValueError):
        return f"t={t}"
