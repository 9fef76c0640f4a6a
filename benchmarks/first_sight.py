"""first_sight: how `envbuild explain` did on each blind slice the first and only time it saw it, pooled.

Why: every held-out slice is scored once, untouched, and then the knowledge and the ranker learn it, so a later run
of bench_explain.py scores those logs in-sample. The first sight survives only in docs/explain-slice<N>-before.md,
whose per-log table the scoring session wrote from the benchmark's -v output. This reads those tables back and
pools them: the measure of explain on text nobody tuned it on (issue 25), and of what its confidence words meant
there (precision of "high", "medium" and "low" answers at first sight).

    python benchmarks/first_sight.py [--docs DIR] [--last K] [--json out.json]

A row counts as the benchmark counted it (its `bench` cell): "ok..." is top-1, "top-3 only" (or "top3") is top-3, "MISS" is
neither; logs labelled `unknown` are left out of the percentages, as in bench_explain.py. The precision of a
confidence word is over the answers where explain named a cause (verdict other than "ok") on a log with a known
label: the same points bench_explain.py's calibration uses.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
HEADER = ["log", "thread", "established cause", "explain: verdict, first cause (others)", "confidence", "bench"]
_DOC = re.compile(r"^explain-slice(\d+)-before\.md$")
WORDS = ("high", "medium", "low")


class SliceDocError(ValueError):
    """A slice doc whose table cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class FirstSight:
    """One log of one blind slice as the benchmark scored it the first time."""

    slice: int
    log: str
    label: str  # the established cause as the table writes it, e.g. "U5 (also U1)", "none", "unknown"
    verdict: str  # explained / unknown / ok
    word: Optional[str]  # high / medium / low; None where explain reported no failure
    bench: str  # the benchmark's cell: "ok", "ok (via also)", "top-3 only", "MISS", ...

    @property
    def scored(self) -> bool:
        return not self.label.startswith("unknown")

    @property
    def top1(self) -> bool:
        return self.bench.startswith("ok")

    @property
    def top3(self) -> bool:
        return self.top1 or self.bench.replace("-", "").startswith("top3")  # "top-3 only"; slices 4-6 wrote "top3"

    @property
    def answered(self) -> bool:
        """explain named a cause (its word is a calibration point)."""
        return self.scored and self.verdict != "ok" and self.word in WORDS


def _cells(line: str) -> List[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def read_slice_doc(path: Path) -> List[FirstSight]:
    """The per-log table of one docs/explain-slice<N>-before.md."""
    m = _DOC.match(path.name)
    if not m:
        raise SliceDocError(f"{path}: not a slice doc (explain-slice<N>-before.md)")
    number, rows, in_table = int(m.group(1)), [], False
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.startswith("|"):
            in_table = False
            continue
        cells = _cells(line)
        if cells == HEADER:
            in_table = True
            continue
        if not in_table or set("".join(cells)) <= set("-: "):
            continue
        if len(cells) != len(HEADER):
            raise SliceDocError(f"{path}:{line_no}: {len(cells)} cells, the table has {len(HEADER)}")
        log, _, label, said, word, bench = cells
        verdict = said.split(",")[0].split()[0] if said else ""
        if verdict not in ("explained", "unknown", "ok"):
            raise SliceDocError(f"{path}:{line_no}: verdict {verdict!r} is not explained, unknown or ok")
        rows.append(FirstSight(number, log, label, verdict, word if word in WORDS else None, bench))
    if not rows:
        raise SliceDocError(f"{path}: no per-log table (header {' | '.join(HEADER)})")
    return rows


def read_docs(docs: Path = DOCS) -> List[FirstSight]:
    """Every slice doc under `docs`, in slice order."""
    paths = sorted((p for p in docs.glob("explain-slice*-before.md") if _DOC.match(p.name)),
                   key=lambda p: int(_DOC.match(p.name).group(1)))  # type: ignore[union-attr]
    return [row for p in paths for row in read_slice_doc(p)]


def score(rows: Iterable[FirstSight]) -> Dict[str, Any]:
    """Top-1/top-3 over the scored logs and the precision of each confidence word over the answers."""
    rows = list(rows)
    scored = [r for r in rows if r.scored]
    n = len(scored)
    words = {}
    for w in WORDS:
        said = [r for r in rows if r.answered and r.word == w]
        words[w] = {"n": len(said), "right": sum(r.top1 for r in said),
                    "precision": sum(r.top1 for r in said) / len(said) if said else None}
    return {"logs": len(rows), "scored": n, "top1_n": sum(r.top1 for r in scored), "top3_n": sum(r.top3 for r in scored),
            "top1": sum(r.top1 for r in scored) / n if n else None, "top3": sum(r.top3 for r in scored) / n if n else None,
            "slices": sorted({r.slice for r in rows}), "words": words}


def summary(rows: Sequence[FirstSight], last: int = 6) -> Dict[str, Any]:
    """Pooled over every slice, over the last `last` slices, and per slice."""
    numbers = sorted({r.slice for r in rows})
    recent = set(numbers[-last:])
    return {"pooled": score(rows), "last": score(r for r in rows if r.slice in recent),
            "per_slice": {n: score(r for r in rows if r.slice == n) for n in numbers}}


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1%}"


def lines(s: Dict[str, Any]) -> List[str]:
    """What bench_explain.py and this script print."""
    def one(name: str, sc: Dict[str, Any]) -> str:
        sl = sc["slices"]
        span = f"slices {sl[0]}-{sl[-1]}" if len(sl) > 1 else f"slice {sl[0]}" if sl else "no slice"
        return (f"{name} ({span}, {sc['scored']} logs with a cause or none): top-1 {_pct(sc['top1'])} ({sc['top1_n']})  "
                f"top-3 {_pct(sc['top3'])} ({sc['top3_n']})")

    def words(sc: Dict[str, Any]) -> str:
        return "  ".join(f"{w} {sc['words'][w]['n']} answers, {_pct(sc['words'][w]['precision'])} right" for w in WORDS)

    out = [one("first sight, pooled", s["pooled"]), "  its confidence words at first sight: " + words(s["pooled"]),
           one("first sight, recent", s["last"])]
    out += [f"  slice {n}: top-1 {_pct(sc['top1'])} ({sc['top1_n']}/{sc['scored']})  top-3 {_pct(sc['top3'])} "
            f"({sc['top3_n']}/{sc['scored']})" for n, sc in s["per_slice"].items()]
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=Path, default=DOCS, help="folder of explain-slice<N>-before.md (default: docs/)")
    ap.add_argument("--last", type=int, default=6, help="how many of the newest slices the 'recent' line pools")
    ap.add_argument("--json", type=Path, help="also write the numbers and every row as JSON here")
    args = ap.parse_args(argv)
    try:
        rows = read_docs(args.docs)
    except (SliceDocError, OSError) as exc:
        print(f"first_sight: {exc}", file=sys.stderr)
        return 2
    if not rows:
        print(f"first_sight: no explain-slice<N>-before.md under {args.docs}", file=sys.stderr)
        return 2
    s = summary(rows, args.last)
    try:
        print("\n".join(lines(s)), flush=True)
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if args.json:
        try:
            args.json.write_text(json.dumps({**s, "rows": [asdict(r) for r in rows]}, indent=1, default=str) + "\n")
        except OSError as exc:
            print(f"first_sight: --json {args.json}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
