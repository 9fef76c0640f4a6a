"""CLI latency: median wall time of `envbuild --help` (goal <= 0.3 s) and of the static doctor replaying the real
2xH200 bundle (goal <= 3 s), each next to `python -c pass` measured in the same run as the anchor.

    python benchmarks/bench_cli.py [--runs N]

Timings are whole processes (interpreter start included), as a user on a login node sees them.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUNDLE = REPO / "tests" / "fixtures" / "bundles" / "h200x2"


def median_wall(argv, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append(time.perf_counter() - t0)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    py = sys.executable
    subprocess.run([py, "-m", "envbuild", "--help"], cwd=REPO, capture_output=True)  # warm the page cache
    anchor = median_wall([py, "-c", "pass"], args.runs)
    rows = [
        ("envbuild --help", [py, "-m", "envbuild", "--help"], 0.3),
        (f"envbuild doctor --root {BUNDLE.relative_to(REPO)} -q",
         [py, "-m", "envbuild", "doctor", "--root", str(BUNDLE), "-q"], 3.0),
    ]
    print(f"{'what':58} {'median s':>9} {'goal s':>7} {'x anchor':>9}  verdict")
    print(f"{'python -c pass (anchor)':58} {anchor:9.3f} {'':>7} {1.0:9.1f}")
    for name, argv, goal in rows:
        t = median_wall(argv, args.runs)
        print(f"{name:58} {t:9.3f} {goal:7.1f} {t / anchor:9.1f}  {'ok' if t <= goal else 'OVER GOAL'}")
    print(f"({args.runs} runs each, {py})")


if __name__ == "__main__":
    main()
