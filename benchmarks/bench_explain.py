"""bench_explain: how often `envbuild explain` names the cause a thread established, and how fast it reads.

Accuracy: every log of tests/explain/corpus/manifest.toml through the same engine as the CLI (in process).
  top-1: the first cause named equals the label (or its `also`); top-3: the label is among the first three.
  `none` logs count as right when explain finds no failure; `unknown` logs (no thread established a cause) are
  reported apart, as the share where explain at least recognised a failure, and are not in the headline.
Speed: a 10 MB and a 1 GiB log made by repeating the corpus's own text (and a 32 MiB one where no line repeats,
  the worst case, no goal), in a temp dir deleted afterwards, read
  by `envbuild explain` as a child process (wall time and peak RSS from wait4). The anchor is a bare Python loop
  reading the same file in 4 MiB blocks and counting newlines, measured in the same run; ratios are against it.

    python benchmarks/bench_explain.py [--accuracy-only] [--speed-only] [--big-mib 1024] [--json out.json]
Goals (issue 14): top-1 >= 80 %; 1 GiB <= 10 s and <= 200 MB RSS; 10 MB <= 1 s.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Tuple

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "explain" / "corpus"
sys.path.insert(0, str(REPO))


def load_manifest() -> List[Dict[str, Any]]:
    from envbuild.tomlcompat import toml

    return toml.loads((CORPUS / "manifest.toml").read_text())["log"]


def predict(path: Path) -> Tuple[str, List[str]]:
    """(verdict, cause ids in rank order) for one log, through the CLI's own code path."""
    from envbuild.explain.explain import ExplainOptions, run

    result = run(ExplainOptions(paths=[str(path)]))
    return result["verdict"], [c["id"] for c in result["causes"]]


def accuracy() -> Dict[str, Any]:
    rows = []
    per: Dict[str, Dict[str, int]] = defaultdict(lambda: {"n": 0, "top1": 0, "top3": 0})
    for entry in load_manifest():
        verdict, ids = predict(CORPUS / entry["file"])
        label = entry["cause"]
        also = entry.get("also") or []
        ok_labels = {label} | set([also] if isinstance(also, str) else also)
        if label == "none":
            top1 = top3 = verdict == "ok"
        elif label == "unknown":
            top1 = top3 = verdict != "ok"
        else:
            top1 = verdict == "explained" and bool(ids) and ids[0] in ok_labels
            top3 = verdict != "ok" and bool(ok_labels & set(ids[:3]))
        cls = label if label in ("none", "unknown") else label
        per[cls]["n"] += 1
        per[cls]["top1"] += int(top1)
        per[cls]["top3"] += int(top3)
        rows.append({"file": entry["file"], "label": label, "verdict": verdict, "predicted": ids[:3],
                     "top1": top1, "top3": top3})
    scored = [r for r in rows if r["label"] != "unknown"]
    unknown = [r for r in rows if r["label"] == "unknown"]
    return {
        "logs": len(rows), "scored": len(scored),
        "top1": sum(r["top1"] for r in scored) / max(1, len(scored)),
        "top3": sum(r["top3"] for r in scored) / max(1, len(scored)),
        "unknown_failure_recognised": sum(r["top1"] for r in unknown) / max(1, len(unknown)) if unknown else None,
        "per_class": dict(sorted(per.items())), "rows": rows,
    }


def _synthesise(path: Path, size: int, distinct: bool = False) -> None:
    """`size` bytes of the corpus's own text, repeated (every log, in manifest order, then again). With
    `distinct`, every line of every copy gets the copy's number in front, so no line repeats: the worst case
    for explain (no repeated block to count in bulk) on the densest real text there is (trimmed failures)."""
    parts = [(CORPUS / e["file"]).read_bytes() for e in load_manifest()]
    unit = b"".join(p if p.endswith(b"\n") else p + b"\n" for p in parts)
    lines = unit.split(b"\n")
    with open(path, "wb") as f:
        written, copy = 0, 0
        while written < size:
            data = b"\n".join(b"[%d] " % copy + line for line in lines) if distinct else unit
            chunk = data[: size - written]
            f.write(chunk)
            written += len(chunk)
            copy += 1


def _anchor(path: Path) -> float:
    t0 = time.perf_counter()
    n = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(4 << 20)
            if not b:
                break
            n += b.count(b"\n")
    return time.perf_counter() - t0


def _run_explain(path: Path) -> Tuple[float, float, float, int]:
    """(wall seconds, CPU seconds, peak RSS MiB, exit code) of `envbuild explain PATH` as a child process.
    CPU time is quoted beside wall time because the benchmark machine may be shared."""
    cmd = [sys.executable, "-m", "envbuild", "explain", str(path), "--json", os.devnull]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=str(REPO), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, proc.returncode


def speed(big_mib: int, distinct_mib: int) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    tmp = Path(tempfile.mkdtemp(prefix="bench_explain_"))
    cases = [("10MB", 10 * 1000 * 1000, 1.0, False), (f"{big_mib}MiB", big_mib << 20, 10.0 * big_mib / 1024, False)]
    if distinct_mib:
        cases.append((f"{distinct_mib}MiB-distinct", distinct_mib << 20, None, True))
    try:
        for name, size, goal_s, distinct in cases:
            path = tmp / f"{name}.log"
            _synthesise(path, size, distinct)
            anchor = _anchor(path)
            wall, cpu, rss, rc = _run_explain(path)
            out[name] = {"bytes": size, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "peak_rss_mib": round(rss, 1), "exit": rc,
                         "anchor_read_s": round(anchor, 3), "ratio_to_anchor": round(wall / anchor, 2) if anchor else None,
                         "goal_s": goal_s, "meets_time": goal_s is None or wall <= goal_s, "meets_rss": rss <= 200,
                         "mb_per_s": round(size / 1e6 / wall, 1)}
            path.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    from envbuild.explain.explain import new_scanner

    out["engine"] = new_scanner().engine
    out["load_average"] = os.getloadavg()[0]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--accuracy-only", action="store_true")
    ap.add_argument("--speed-only", action="store_true")
    ap.add_argument("--big-mib", type=int, default=1024, help="size of the big synthetic log (default 1024 = 1 GiB)")
    ap.add_argument("--distinct-mib", type=int, default=32, help="size of the no-repeated-line log (0: skip)")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every log's prediction")
    args = ap.parse_args()
    report: Dict[str, Any] = {}
    if not args.speed_only:
        acc = accuracy()
        report["accuracy"] = acc
        print(f"corpus: {acc['logs']} logs, {acc['scored']} with an established cause or none")
        print(f"top-1 {acc['top1']:.1%}  top-3 {acc['top3']:.1%}  (goal top-1 >= 80%)")
        if acc["unknown_failure_recognised"] is not None:
            print(f"unknown-labelled logs where a failure was recognised: {acc['unknown_failure_recognised']:.0%}")
        print(f"{'class':<8} {'n':>3} {'top1':>5} {'top3':>5}")
        for cls, c in acc["per_class"].items():
            print(f"{cls:<8} {c['n']:>3} {c['top1']:>5} {c['top3']:>5}")
        for r in acc["rows"]:
            if args.verbose or not r["top1"]:
                mark = "ok  " if r["top1"] else ("top3" if r["top3"] else "MISS")
                print(f"  {mark} {r['file']:<40} label {r['label']:<8} got {r['verdict']:<9} {' '.join(r['predicted'])}")
    if not args.accuracy_only:
        sp = speed(args.big_mib, args.distinct_mib)
        report["speed"] = sp
        print(f"speed (engine {sp['engine']}; anchor = a bare Python read of the same file counting newlines):")
        print(f"  load average at the end: {sp['load_average']:.1f} (on {os.cpu_count()} CPUs)")
        for name, s in sp.items():
            if name in ("engine", "load_average"):
                continue
            goal = f"goal {s['goal_s']:g} s" if s["goal_s"] else "no goal"
            print(f"  {name:<16} {s['wall_s']:>7.2f} s wall, {s['cpu_s']:.2f} s CPU ({goal}), {s['mb_per_s']} MB/s  peak RSS "
                  f"{s['peak_rss_mib']:.0f} MiB (goal 200)  anchor {s['anchor_read_s']:.2f} s, ratio {s['ratio_to_anchor']}x  exit {s['exit']}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
