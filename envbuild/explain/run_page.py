"""`envbuild report html RUN_DIR`: the page of an `envbuild record` run directory, a timeline per process.

What a person needs from a failed run is who went wrong first and what the others did meanwhile: one row per
recorded process (grouped by node), its life as a bar from start to its last record, and on it the moments the
recorder wrote (group init/destroy, a hang, the first exception, the exit, going silent), with the causes
`explain RUN_DIR` names above. Like the doctor's page (envbuild/report/html.py): inline CSS and SVG, no script, no external asset,
no generation time, so the same run dir gives the same bytes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

TEMPLATE = "run.html.j2"
ROW_H = 22
LABEL_W = 300
PLOT_W = 860
MAX_ROWS = 400  # a run dir of 4000 processes draws its first 400 by start (the page says so)
MAX_MARKS = 60  # markers per row: a group rebuilt every step for a week would draw a solid line

# event kind -> (css class, what the marker says); kinds not listed are not drawn
MARKS = {
    "process_group": ("mark-pg", "group"),
    "hang": ("mark-hang", "hang"),
    "collective": ("mark-coll", "collective"),
    "exception": ("mark-exc", "exception"),
    "exit": ("mark-exit", "exit"),
    "truncated": ("mark-note", "events cut"),
    "capped": ("mark-note", "file capped"),
}


def render_run(root: str) -> Tuple[str, List[str]]:
    """(page, notes) for one run directory."""
    import jinja2

    from envbuild import __version__
    from envbuild.explain import explain, rundir, runjudge
    from envbuild.paths import templates_dir

    path = Path(root)
    result = explain.run(explain.ExplainOptions(paths=[root]))
    run = rundir.read(path)
    rows = runjudge.first_failures(run)
    nodes = runjudge.node_of(run)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), undefined=jinja2.StrictUndefined,
                             autoescape=True, keep_trailing_newline=True)
    causes = [{"id": c["id"], "title": c["title"], "confidence": c.get("confidence"),
               "reasons": [a["reason"] for a in c.get("adjustments", []) if a.get("origin") == "record"]}
              for c in result.get("causes", [])]
    ctx = {"version": __version__, "root": root, "causes": causes,
           "verdict": "fail" if causes else "pass",
           "headline": f"{causes[0]['id']}: {causes[0]['title']}" if causes else "no recorded failure",
           "n_procs": len(run.procs), "nodes": sorted(set(nodes.values())),
           "first_failures": rows[:16], "timeline": timeline(run, nodes, rows),
           "missing": run.missing[:50], "more_missing": max(0, len(run.missing) - 50)}
    return env.get_template(TEMPLATE).render(**ctx), []


def timeline(run: Any, nodes: Dict[int, str], rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The SVG's geometry: one row per process, by node then start time; x in seconds from the first start."""
    procs = [p for p in run.procs if p.times()]
    procs.sort(key=lambda p: (nodes[id(p)], min(p.times())))
    shown = procs[:MAX_ROWS]
    if not shown:
        return {"rows": [], "width": LABEL_W + PLOT_W, "height": 0, "ticks": [], "hidden": len(run.procs)}
    t0 = min(min(p.times()) for p in shown)
    t1 = max(max(p.times()) for p in shown)
    span = max(t1 - t0, 1e-3)

    def x(t: float) -> float:
        return round(LABEL_W + (t - t0) / span * (PLOT_W - 20), 1)

    by_who = {r["who"]: r for r in rows}
    out = []
    y, node = 14, None
    for i, p in enumerate(shown):
        y += ROW_H * (2 if nodes[id(p)] != node else 1)  # a node's first row leaves a line for its name
        node = nodes[id(p)]
        row = by_who.get(p.who)
        state = "silent" if row and row.get("silent") else "failed" if row else "exited" if p.exited else "running"
        marks = []
        for e in p.events:
            kind = e.get("kind")
            if kind not in MARKS or not isinstance(e.get("t"), (int, float)):
                continue
            css, word = MARKS[kind]
            marks.append({"x": x(e["t"]), "css": css, "title": f"{e['t'] - t0:.2f} s {word}: {_describe(e)}"})
        if len(marks) > MAX_MARKS:  # keep the first and the last ones: the start of trouble and its end
            marks = marks[:MAX_MARKS // 2] + marks[-MAX_MARKS // 2:]
        start, last = min(p.times()), p.t_last or min(p.times())
        out.append({"id": f"proc-row-{i}", "y": y, "label": f"{p.role} · pid {p.pid}", "node": nodes[id(p)],
                    "x0": x(start), "x1": max(x(last), x(start) + 2), "state": state, "marks": marks,
                    "first": bool(row and row.get("first")),
                    "title": f"{p.who} on {nodes[id(p)]}: {state}" + (f" — {row['what']}" if row else "")})
    ticks = []
    step = _tick_step(span)
    t = 0.0
    while t <= span + 1e-9:
        ticks.append({"x": x(t0 + t), "label": f"{t:g} s"})
        t += step
    return {"rows": out, "width": LABEL_W + PLOT_W, "height": y + ROW_H + 6, "ticks": ticks,
            "hidden": len(run.procs) - len(shown), "span": round(span, 1)}


def _describe(e: Dict[str, Any]) -> str:
    kind = e.get("kind")
    if kind == "process_group":
        return f"{e.get('op')} {e.get('backend') or ''} rank {e.get('rank')}/{e.get('world')}".strip()
    if kind == "hang":
        return f"main thread still for {e.get('stuck_s')} s in {e.get('collective') or e.get('frame')}"
    if kind == "collective":
        return f"{e.get('name')} {e.get('state')}"
    if kind == "exception":
        return f"{e.get('type')}: {str(e.get('message'))[:160]}"
    if kind == "exit":
        return f"code {e.get('code')}"
    return str({k: v for k, v in e.items() if k not in ("t", "kind")})[:160]


def _tick_step(span: float) -> float:
    for step in (0.5, 1, 2, 5, 10, 30, 60, 300, 600, 1800, 3600, 4 * 3600, 86400):
        if span / step <= 12:
            return float(step)
    return 7 * 86400.0
