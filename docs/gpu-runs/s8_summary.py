"""The summary of docs/gpu-runs/s8-doctor.sh: every goal of issue 26 against what this call measured, where the offload
and static seconds went, and each injected fault's root and consequences against what the checks are written to say.

Written so that whoever reads only $OUT/s8-summary.txt can tell, line by line, what was met and what was not:
    python3 docs/gpu-runs/s8_summary.py RUN_DIR OUT_DIR
RUN_DIR holds what the script kept (reports/<step>/doctor-*.json, faults/runs.tsv and faults/<name>.json,
fincore-*.txt); OUT_DIR the bench-*.json it reads and s8-faults.json it writes. Standard library only.
"""
from __future__ import annotations

import glob
import json
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

# What the same measurements gave before this session's changes (docs/gpu-runs/s7/, issue 26).
BEFORE = {"static-cold": "3.8 s (s7)", "static-warm": "1.7 s (s7)", "quick": "19.1 s then 15.9 s (s7)",
          "full": "292 s (issue 26: train.moe_step 203 s, comm.offload_cycle 62 s)"}

# fault -> (root check ids that must fail, unfolded; check ids folded under them at least). None: no fail at all.
EXPECTED: Dict[str, Optional[Tuple[List[str], List[str]]]] = {
    "healthy-quick": None,
    "f01-nccl-ifname-nonexistent": (["node.net_interfaces"], ["stack.torch", "comm.offload_cycle"]),
    "f02-gloo-ifname-nonexistent": (["node.net_interfaces"], []),
    "f03-nccl-ifname-exact-prefix": (["node.net_interfaces"], ["stack.torch"]),
    "f04-ib-hca-absent": None,
    "f05-sigstop-weight-sync-start": (["comm.weight_sync"], []),
    "f06-sigstop-compute-timer": (["gpu.compute"], []),
    "f07-crash-offload-pause": (["comm.offload_cycle"], []),
    "f08-ulimit-memlock-64k": None,
    "f09-second-libnccl-preload": (["stack.nccl_copies"], ["comm.weight_sync"]),
    "f10-cuda-visible-devices-5": (["node.cuda_visible_devices"], ["stack.torch"]),
    "f11-cuda-visible-devices-empty": (["node.cuda_visible_devices"], ["stack.torch"]),
    "f12-m3-pidfd-blocked": (["gpu.cumem_ipc"], []),
    "f13-stub-libcuda-first": (["stack.libcuda_stub"], ["stack.torch", "gpu.basic", "comm.offload_cycle"]),
    "f14-compat-libcuda-first": (["stack.libcuda_compat"], ["stack.torch", "gpu.basic", "comm.offload_cycle"]),
    "f15-sigstop-offload-pause": (["comm.offload_cycle"], []),
    "f16-sigstop-weight-sync-teardown": (["comm.weight_sync"], []),
    # session 12: the static doctor's stack probe resolves torch's libraries and initialises CUDA and NCCL through the
    # copies resolved (--resolve-init); the stack faults again, static
    "f09s-second-libnccl-preload-static": (["stack.nccl_copies"], []),
    "f10s-cuda-visible-devices-5-static": (["node.cuda_visible_devices"], ["stack.torch"]),
    "f13s-stub-libcuda-first-static": (["stack.libcuda_stub"], ["stack.torch"]),
    "f14s-compat-libcuda-first-static": (["stack.libcuda_compat"], ["stack.torch"]),
}


def load(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def results(report: Dict[str, Any], check_id: str) -> List[Dict[str, Any]]:
    """The check's results that ran (a mode's skips say nothing here)."""
    return [r for r in report.get("results") or [] if r.get("check_id") == check_id and r.get("status") != "skip"]


def goals(out: str) -> List[str]:
    lines = ["== goals (wall time of the whole `python3 -m envbuild doctor ...`, benchmarks/bench_doctor.py)"]
    for step in ("static-cold", "static-warm", "quick", "full"):
        runs = load(os.path.join(out, f"bench-{step}.json")).get("runs") or []
        if not runs:
            lines.append(f"  {step:<12} NOT MEASURED in this call (see the step's line above); before: {BEFORE[step]}")
        for k, run in enumerate(runs):
            verdict = "met" if run["ratio_to_goal"] <= 1.0 else "MISSED"
            label = step if len(runs) == 1 else f"{step} #{k + 1}"
            lines.append(f"  {label:<12} {run['wall_s']:6.1f} s, goal {run['goal_s']:.0f} s, ratio "
                         f"{run['ratio_to_goal']:.2f} -> {verdict}; exit {run['exit_code']} {run.get('summary')}; "
                         f"left behind: {run['leftovers'] or 'nothing'}; before: {BEFORE[step]}")
            top = sorted(run["split_s"].items(), key=lambda kv: -kv[1])[:6]
            lines.append("               slowest checks: " + ", ".join(f"{c} {s:.2f} s" for c, s in top if s >= 0.05))
    return lines


def static_split(run_dir: str) -> List[str]:
    lines = ["== static: where the stack probe's seconds went (stack.torch evidence.probe_s; phases of its main "
             "thread, inventory = its other thread)"]
    for step in ("static-cold", "static-warm"):
        for path in sorted(glob.glob(os.path.join(run_dir, "reports", step, "doctor-*.json"))):
            report = load(path)
            for r in results(report, "stack.torch"):
                p = (r.get("evidence") or {}).get("probe_s") or {}
                phases = ", ".join(f"{k} {v:.2f}" for k, v in sorted((p.get("phases") or {}).items(),
                                                                   key=lambda kv: -kv[1]) if v >= 0.01)
                lines.append(f"  {step}: probe {p.get('elapsed')} s [{phases}]; inventory thread "
                             f"{p.get('inventory')} s; doctor run {report.get('duration_s')} s")
    for name in ("fincore-before.txt", "fincore-after.txt"):
        path = os.path.join(run_dir, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read().strip().splitlines()
            lines.append(f"  {name} (page-cache residency of torch's and the CUDA wheels' libraries; "
                         f"before = the machine as lent, after = after the first static run):")
            lines += ["    " + ln for ln in text[-12:]]
    return lines


def offload_split(run_dir: str) -> List[str]:
    lines = ["== offload: per cycle (comm.offload_cycle: TMS pause/resume with slime's re-pinned CPU backup; "
             "train.moe_step: its slime cycles)"]
    for step in ("quick", "full"):
        for path in sorted(glob.glob(os.path.join(run_dir, "reports", step, "doctor-*.json"))):
            report = load(path)
            for r in results(report, "comm.offload_cycle"):
                ev = r.get("evidence") or {}
                cyc = ev.get("cycles") or []
                region = (ev.get("region_bytes") or 0) / 2 ** 30
                lines.append(f"  {os.path.basename(path)} comm.offload_cycle {r['status']} {r.get('duration_s')} s, "
                             f"{len(cyc)} cycles of {region:.1f} GiB ({ev.get('backend')}): pause "
                             + " ".join(f"{c.get('pause_s')}" for c in cyc) + " s; resume "
                             + " ".join(f"{c.get('resume_s')}" for c in cyc) + " s")
            for r in results(report, "train.moe_step"):
                ev = r.get("evidence") or {}
                lines.append(f"  {os.path.basename(path)} train.moe_step {r['status']} {r.get('duration_s')} s: "
                             f"{r.get('summary', '')[:300]}")
                lines.append(f"    offload mode {ev.get('offload_mode')}")
                for s in ev.get("steps") or []:
                    if s.get("cycle"):
                        gib = (s.get("released_bytes") or 0) / 2 ** 30
                        lines.append("    cycle {step}: train {t:.2f} s, offload {o:.2f} s ({gib:.1f} GiB released), "
                                     "resume {r:.2f} s, rebuild {b:.2f} s".format(
                                         step=s.get("step"), t=s.get("train_s", 0), o=s.get("offload_s", 0), gib=gib,
                                         r=s.get("resume_s", 0), b=s.get("rebuild_s", 0)))
    return lines


def launch_split(run_dir: str) -> List[str]:
    lines = ["== probes: seconds from each rank's start (warm: its handing) to its first phase, of the check's "
             "seconds (evidence.launch): the part of a probe's time that was start-up, not its work"]
    for step in ("quick", "full"):
        for path in sorted(glob.glob(os.path.join(run_dir, "reports", step, "doctor-*.json"))):
            report = load(path)
            parts = []
            for r in report.get("results") or []:
                launches = (r.get("evidence") or {}).get("launch")
                if not launches or r["check_id"] in [p[0] for p in parts]:
                    continue
                ranks = [k for launch in launches for k in launch.get("ranks") or []]
                start = max((k.get("start_s") or 0.0 for k in ranks), default=0.0)
                warm = "warm" if ranks and all(k.get("warm") for k in ranks) else "cold" if ranks else "?"
                parts.append((r["check_id"], f"{r['check_id']} {warm} {start:.2f} of {r.get('duration_s', 0):.2f} s"))
            lines.append(f"  {step} {os.path.basename(path)}: " + "; ".join(text for _, text in parts))
    return lines


def roots_and_folded(report: Dict[str, Any]) -> Tuple[List[str], List[str]]:
    roots, folded = [], []
    for r in report.get("results") or []:
        if r.get("status") not in ("fail", "error"):
            continue
        (folded if (r.get("evidence") or {}).get("consequence_of") else roots).append(r["check_id"])
    return roots, folded


def faults(run_dir: str, out: str) -> List[str]:
    lines = ["== faults (docs/faults.md): the root that must fail first and what must fold under it, against "
             "what this run said"]
    tsv = os.path.join(run_dir, "faults", "runs.tsv")
    combined: Dict[str, Any] = {}
    ok = bad = 0
    if os.path.exists(tsv):
        with open(tsv, encoding="utf-8") as fh:
            rows = [ln.rstrip("\n").split("\t") for ln in fh if ln.strip()]
    else:
        rows = []
    for name, rc, wall, fault, cmd in rows:
        report = load(os.path.join(run_dir, "faults", name + ".json"))
        combined[name] = {"fault": fault, "command": cmd, "exit_code": int(rc), "wall_s": int(wall), "report": report}
        roots, folded = roots_and_folded(report)
        want = EXPECTED.get(name, "unknown")
        if not report:
            verdict = "NO REPORT"
        elif want is None:
            verdict = "as expected" if not roots and not folded else "DIFFERS: expected no fail"
        elif want == "unknown":
            verdict = "(no expectation written)"
        else:
            missing_root = [c for c in want[0] if c not in roots]
            extra_root = [c for c in roots if c not in want[0]]
            missing_fold = [c for c in want[1] if c not in folded]
            verdict = "as expected" if not (missing_root or extra_root or missing_fold) else (
                "DIFFERS:" + (f" root(s) missing {missing_root}" if missing_root else "")
                + (f" other root(s) {extra_root}" if extra_root else "")
                + (f" not folded {missing_fold}" if missing_fold else ""))
        ok += verdict == "as expected"
        bad += verdict.startswith(("DIFFERS", "NO REPORT"))
        lines.append(f"  {name}: {fault}")
        lines.append(f"    exit {rc} after {wall} s; roots {roots or 'none'}; folded {folded or 'none'} -> {verdict}")
        for r in report.get("results") or []:
            if r.get("status") in ("fail", "error") and not (r.get("evidence") or {}).get("consequence_of"):
                lines.append(f"    ROOT {r['check_id']} {r.get('causes')}: {r.get('summary', '')[:220]}")
    lines.append(f"  {len(rows)} fault runs: {ok} as expected, {bad} differ or gave no report")
    with open(os.path.join(out, "s8-faults.json"), "w", encoding="utf-8") as fh:
        json.dump(combined, fh, indent=1)
    return lines


def main(argv: List[str]) -> int:
    run_dir, out = argv[1], argv[2]
    for block in (goals(out), static_split(run_dir), launch_split(run_dir), offload_split(run_dir),
                  faults(run_dir, out)):
        print("\n".join(block))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
