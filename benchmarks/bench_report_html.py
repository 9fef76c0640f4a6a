"""`envbuild report html` on a 64-node fleet: render time (goal <= 2 s) and page size (goal < 5 MB), against
rendering the one recorded node report in the same run as the anchor.

    python benchmarks/bench_report_html.py [--nodes 64] [--runs 5]

The fleet is built from real recorded runs (docs/gpu-runs/doctor-full-2gpu.json with the train step of
train-moe-default-2gpu.json): 64 copies named node-000.., each node's bandwidth numbers scaled by a fixed
factor between 0.94 and 1.03, one node with a slow all_reduce (a fail) and one whose NCCL differs (a warn).
Times are in-process (the command's import of matplotlib included once per process, measured separately).
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

REPO = Path(__file__).resolve().parent.parent
RUNS = REPO / "docs" / "gpu-runs"


def node_report(i: int) -> Dict[str, Any]:
    """Node i of the fleet: the recorded 2xH200 full doctor report with its train step put back in."""
    base = json.loads((RUNS / "doctor-full-2gpu.json").read_text())
    train = json.loads((RUNS / "train-moe-default-2gpu.json").read_text())["results"][0]
    rep = copy.deepcopy(base)
    rep["host"]["hostname"] = f"node-{i:03d}"
    rep["results"] = [r for r in rep["results"] if r["check_id"] != "train.moe_step"] + [copy.deepcopy(train)]
    factor = 0.94 + (i * 37 % 10) / 100  # 0.94 .. 1.03, fixed per node
    for r in rep["results"]:
        for m in r["metrics"]:
            if m["unit"] in ("GB/s", "ratio") and ("gbps" in m["name"] or "fraction" in m["name"] or "busbw" in m["name"]):
                m["value"] = round(m["value"] * factor, 3)
        if r["check_id"] == "comm.nccl_collectives":
            for row in r["evidence"]["rows"]:
                row["busbw"] = round(row["busbw"] * (0.45 if i == 17 else factor), 2)
            if i == 17:
                r["status"] = "fail"
                r["summary"] = "busbw below the fail band: all_reduce 147 GB/s at 1GiB = 0.31 of the 478 GB/s line rate"
                r["causes"] = ["N3", "D3"]
                r["remediation"] = "check `nvidia-smi nvlink -s` and the kernel log for Xid errors; drain the node"
    if i == 42:
        for r in rep["results"]:
            if r["check_id"] == "stack.nccl_copies":
                r["summary"] = "3 libnccl copies with different versions are reachable (2.28.9, 2.27.3, 2.21.5)"
    rep["summary"] = {s: sum(1 for r in rep["results"] if r["status"] == s) for s in ("pass", "warn", "fail", "skip", "error")}
    rep["exit_code"] = 1 if rep["summary"]["fail"] else 0
    return rep


def write_fleet(folder: Path, nodes: int) -> List[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(nodes):
        p = folder / f"node-{i:03d}.json"
        p.write_text(json.dumps(node_report(i)))
        paths.append(p)
    return paths


def render_seconds(paths: List[str], runs: int) -> Tuple[float, float]:
    """(median wall, median CPU) seconds of one in-process render: on a shared machine the CPU time says what the
    page costs, the wall time what a user waited."""
    from envbuild.report.html import render_files

    wall, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        render_files(paths)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    t0 = time.perf_counter()
    import matplotlib.figure  # noqa: F401  (what the first page of a process pays once)
    import_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        write_fleet(Path(tmp) / "fleet", args.nodes)
        one = [str(RUNS / "doctor-full-2gpu.json")]
        render_seconds(one, 1)  # warm: fonts and the template
        anchor, anchor_cpu = render_seconds(one, args.runs)
        fleet_s, fleet_cpu = render_seconds([str(Path(tmp) / "fleet")], args.runs)
        out = Path(tmp) / "fleet.html"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "envbuild", "report", "html", str(Path(tmp) / "fleet"), "-o", str(out)],
                              cwd=REPO, capture_output=True, text=True)
        cli_s = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"envbuild report html exited {proc.returncode}: {proc.stderr[-500:]}")
        size = out.stat().st_size
    print(f"matplotlib import (once per process): {import_s:.2f} s")
    print(f"anchor: 1 node (doctor-full-2gpu.json) renders in {anchor:.3f} s wall, {anchor_cpu:.3f} s CPU "
          f"(median of {args.runs})")
    print(f"{args.nodes} nodes render in {fleet_s:.3f} s wall = {fleet_s / anchor:.1f}x the anchor, {fleet_cpu:.3f} s "
          f"CPU = {fleet_cpu / anchor_cpu:.1f}x (goal <= 2 s: {'met' if fleet_s <= 2 else 'MISSED'})")
    print(f"`envbuild report html` of {args.nodes} nodes, whole process: {cli_s:.2f} s")
    print(f"page size: {size / 1e6:.2f} MB (goal < 5 MB: {'met' if size < 5e6 else 'MISSED'})")


if __name__ == "__main__":
    main()
