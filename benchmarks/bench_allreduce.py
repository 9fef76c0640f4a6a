"""Our all_reduce busbw and time-to-answer vs nccl-tests' all_reduce_perf, in the same call, same sizes.

    python benchmarks/bench_allreduce.py --nccl-tests .nccl-tests/bin/all_reduce_perf [--gpus 0,1]
        [--sizes 64M,256M,1G] [--budget-ms 10] [--min-iters 3] [--json out.json]

Goals (issue 6): our busbw within 0.95-1.05 of nccl-tests' at 64 MiB, 256 MiB and 1 GiB, and the same
answer in <= 1/3 of nccl-tests' measurement time. Both sides run with NCCL's defaults for the node (NVLS
off, as the launcher pins it) and the NCCL library torch loads (put its lib dir first on LD_LIBRARY_PATH
for nccl-tests).

Times compared:
- measurement time: for nccl-tests, the wall time of the run over the sizes minus the wall time of the
  same binary over one 8-byte size (-b 8 -e 8 -c 1: process start, CUDA and NCCL init, and a checked
  8-byte all_reduce, so the first use of its kernels is start-up too). For us, the payload's own clock
  (evidence measure_s) from its first checked collective to its last timed one, which starts after the
  same kind of start-up: process group, communicator, one checked all_reduce of one element. Inside both
  windows every size is checked exactly (nccl-tests' -c 1; our checked run per size) and its buffers
  allocated. The per-size split of our window (fill + check vs timing) is printed and kept in the JSON.
- end to end: both processes' whole wall time (ours includes python + torch import, which nccl-tests
  does not pay).
nccl-tests runs with its defaults (-w 1 -n 20, out-of-place and in-place, -c 1); we compare against its
out-of-place busbw, which is what our payload measures. Iterations on our side: as many as fill
--budget-ms of device time per size, at least --min-iters.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    text = text.strip().upper().rstrip("B").rstrip("I")
    if text and text[-1] in UNITS:
        return int(float(text[:-1]) * UNITS[text[-1]])
    return int(text)


def run_nccl_tests(binary: str, sizes, ngpus: int, env) -> dict:
    """One all_reduce_perf run over exactly `sizes` (-b min -e max -f factor) and a start-up baseline."""
    lo, hi = min(sizes), max(sizes)
    factor = round((hi / lo) ** (1 / max(1, len(sizes) - 1))) if len(sizes) > 1 else 2
    argv = [binary, "-b", str(lo), "-e", str(hi), "-f", str(factor), "-g", str(ngpus), "-c", "1"]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    base_argv = [binary, "-b", "8", "-e", "8", "-g", str(ngpus), "-c", "1"]
    t0 = time.perf_counter()
    base = subprocess.run(base_argv, capture_output=True, text=True, env=env, timeout=120)
    base_wall = time.perf_counter() - t0
    rows = parse_nccl_tests(proc.stdout)
    return {"argv": argv, "wall_s": round(wall, 3), "baseline_argv": base_argv, "baseline_wall_s": round(base_wall, 3),
            "baseline_rc": base.returncode, "measure_s": round(wall - base_wall, 3), "rows": rows,
            "stdout_tail": proc.stdout[-3000:]}


def parse_nccl_tests(text: str) -> dict:
    """size -> {oop_time_us, oop_algbw, oop_busbw, oop_wrong, ip_...} from all_reduce_perf's table
    (columns: size count type redop root, then time algbw busbw #wrong for out-of-place and in-place)."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) < 13 or not (f[0].isdigit() and f[1].isdigit()):
            continue
        try:
            nums = [float(x) for x in (f[5], f[6], f[7], f[9], f[10], f[11])]
        except ValueError:
            continue
        out[int(f[0])] = {"oop_time_us": nums[0], "oop_algbw": nums[1], "oop_busbw": nums[2], "oop_wrong": f[8],
                          "ip_time_us": nums[3], "ip_algbw": nums[4], "ip_busbw": nums[5], "ip_wrong": f[12]}
    return out


def run_ours(sizes, gpus, budget_ms: float, min_iters: int) -> dict:
    from envbuild.doctor.launcher import launch

    t0 = time.perf_counter()
    out = launch("comm_nccl_collectives.py", len(gpus), python=sys.executable, gpus=gpus, backend="nccl",
                 args=["--ops", "all_reduce", "--sizes", ",".join(map(str, sizes)), "--check-dtypes", "",
                       "--budget-ms", str(budget_ms), "--min-iters", str(min_iters)],
                 deadline_s=240, phase_deadlines={"init": 90, "*": 60})
    wall = time.perf_counter() - t0
    if not out.ok:
        raise SystemExit(f"our payload failed: {out.reason} {[r.stderr_tail[-1500:] for r in out.ranks]}")
    ev = out.ranks[0].result["evidence"]
    return {"wall_s": round(wall, 3), "measure_s": ev["measure_s"], "startup_s": ev.get("startup_s"),
            "status": out.ranks[0].result["status"], "rows": {r["size"]: r for r in ev["rows"]},
            "time_split": ev.get("time_split", [])}


BUSBW_RATIO = (0.95, 1.05)
TIME_RATIO_MAX = round(1 / 3, 3)


def compare(sizes: List[int], ours: dict, theirs: dict) -> dict:
    """The table and the ratios of one call: busbw ours/nccl-tests per size, and the two time ratios."""
    table = []
    for s in sizes:
        o = ours["rows"].get(s)
        t = theirs["rows"].get(s)
        if not o or not t:
            table.append({"size": s, "missing": "ours" if not o else "nccl-tests"})
            continue
        table.append({"size": s, "ours_busbw": o["busbw"], "ours_iters": o["iters"],
                      "nccl_tests_busbw_oop": t["oop_busbw"], "nccl_tests_busbw_ip": t["ip_busbw"],
                      "ratio": round(o["busbw"] / t["oop_busbw"], 3) if t["oop_busbw"] else None})
    time_ratio = round(ours["measure_s"] / theirs["measure_s"], 3) if theirs["measure_s"] > 0 else None
    return {"sizes": sizes, "table": table, "ours": ours, "nccl_tests": theirs,
            "time_ratio_measure": time_ratio, "time_ratio_end_to_end": round(ours["wall_s"] / theirs["wall_s"], 3),
            "goals": {"busbw_ratio": list(BUSBW_RATIO), "time_ratio_max": TIME_RATIO_MAX}}


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def report_lines(result: dict) -> List[str]:
    """What the benchmark prints: a busbw table, then one line per goal with its verdict."""
    from envbuild.data.checks._common import size_label

    ours, theirs = result["ours"], result["nccl_tests"]
    lo, hi = result["goals"]["busbw_ratio"]
    split = {t["requested"]: t for t in ours.get("time_split", [])}
    lines = [f"{'size':>8} {'ours GB/s':>10} {'iters':>6} {'nccl-tests GB/s':>16} {'ratio':>7}"
             f" {'check s':>8} {'timing s':>9}"]
    for row in result["table"]:
        label = size_label(row["size"])
        if "missing" in row:
            lines.append(f"{label:>8} missing from {row['missing']}")
            continue
        t = split.get(row["size"], {})
        lines.append(f"{label:>8} {row['ours_busbw']:>10.1f} {row['ours_iters']:>6} "
                     f"{row['nccl_tests_busbw_oop']:>16.1f} {row['ratio']:>7.3f} "
                     f"{t.get('check_s', float('nan')):>8.4f} {t.get('timing_s', float('nan')):>9.4f}")
    for row in result["table"]:
        if "missing" not in row:
            ok = row["ratio"] is not None and lo <= row["ratio"] <= hi
            lines.append(f"busbw ratio at {size_label(row['size'])}: {row['ratio']} (goal {lo}-{hi}: {_verdict(ok)})")
    ratio, most = result["time_ratio_measure"], result["goals"]["time_ratio_max"]
    lines.append(f"measurement time ratio: {ratio} = ours {ours['measure_s']:.3f} s / nccl-tests "
                 f"{theirs['measure_s']:.3f} s (its wall {theirs['wall_s']:.3f} - start-up "
                 f"{theirs['baseline_wall_s']:.3f}) (goal <= {most}: {_verdict(ratio is not None and ratio <= most)})")
    lines.append(f"end to end: ours {ours['wall_s']:.3f} s (start-up in the payload {ours.get('startup_s')} s), "
                 f"nccl-tests {theirs['wall_s']:.3f} s; ratio {result['time_ratio_end_to_end']} (not a goal: "
                 "ours starts python and imports torch)")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nccl-tests", required=True, help="path to all_reduce_perf")
    ap.add_argument("--gpus", default="0,1")
    ap.add_argument("--sizes", default="64M,256M,1G")
    ap.add_argument("--budget-ms", type=float, default=10.0, help="our device time per size")
    ap.add_argument("--min-iters", type=int, default=3)
    ap.add_argument("--json", help="write the numbers here")
    args = ap.parse_args()
    gpus = [int(g) for g in args.gpus.split(",")]
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", CUDA_VISIBLE_DEVICES=",".join(map(str, gpus)))

    ours = run_ours(sizes, gpus, args.budget_ms, args.min_iters)
    theirs = run_nccl_tests(args.nccl_tests, sizes, len(gpus), env)
    result = dict(compare(sizes, ours, theirs), gpus=gpus)
    print("\n".join(report_lines(result)))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
