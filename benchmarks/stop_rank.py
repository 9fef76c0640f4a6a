"""SIGSTOP one rank of a probe at random moments and measure how long the doctor takes to give its verdict.

Issue 26: a rank stopped at any moment of any probe, before its first phase included, must be caught inside the
mode's cap (30 s in quick: envbuild/doctor/probe_run.py QUICK_PHASE_CAP_S). The rank stops itself through the
payload harness's test hooks (checks/_harness.py): stop 0 with ENVBUILD_TEST_SIGSTOP_AT=<start> (before its first
phase), the others with ENVBUILD_TEST_SIGSTOP_AFTER_S=<a random moment within the healthy run's length>; the hook
notes the moment and where the rank was in ENVBUILD_TEST_SIGSTOP_LOG. Time to verdict = the probe's end (the
doctor's exit, or the launch's return on a CPU) minus that moment.

On a GPU node, the real doctor and its real probes (the arguments after `--`; pick one probe with --check):

    python benchmarks/stop_rank.py --stops 20 --json out.json -- --quick --gpus 0 --check comm.weight_sync

On a CPU machine, the same launcher with a CPU payload (tests/payloads/phases_payload.py, 2 ranks) and the quick
run's deadlines (`--cap` to try a shorter one):

    python benchmarks/stop_rank.py --cpu --stops 20 --cap 5

First one healthy run is timed (the anchor: its length bounds the random moments); then the stops. Prints each
stop, the worst time to verdict and its ratio to the cap (goal: cap plus the launcher's kill and stack-dump
grace, < 1.25 of the cap). Exit 1 when a stop was not caught (no fail, or slower than 2 x the cap).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
from procmark import marked  # noqa: E402  (the tests' marker lookup)

CPU_PAYLOAD = REPO / "tests" / "payloads" / "phases_payload.py"


def _stops_logged(log: Path) -> List[Dict[str, object]]:
    try:
        return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def _hook_env(k: int, moment: float, log: Path) -> Dict[str, str]:
    if k == 0:
        return {"ENVBUILD_TEST_SIGSTOP_AT": "<start>", "ENVBUILD_TEST_SIGSTOP_LOG": str(log)}
    return {"ENVBUILD_TEST_SIGSTOP_AFTER_S": f"{moment:.3f}", "ENVBUILD_TEST_SIGSTOP_LOG": str(log)}


def cpu_run(hook: Dict[str, str], cap: float, nranks: int) -> Dict[str, object]:
    """One launch of the CPU payload under the quick deadlines (`cap` for the start and every phase)."""
    from envbuild.doctor.launcher import START, launch
    from envbuild.doctor.probes import failure_result

    saved = {k: os.environ.get(k) for k in hook}
    os.environ.update(hook)
    try:
        out = launch(str(CPU_PAYLOAD), nranks, python=sys.executable, gpus=None, args=[], deadline_s=120,
                     backend="none", phase_deadlines={START: cap, "*": cap})
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    ended = time.time()
    broken = failure_result(out, what="the CPU payload")
    return {"ended": ended, "status": "pass" if broken is None else broken.status.value,
            "summary": "" if broken is None else broken.summary, "left": out.leftover_pids}


# The doctors running now: a stop of this benchmark (SIGTERM, SIGINT: a `timeout` around it) is passed on to them,
# and each ends its ranks itself (its own clean stop), so none runs on after the benchmark.
RUNNING: Set[subprocess.Popen] = set()


def _pass_stop_on(signum: int, _frame: object) -> None:
    for proc in list(RUNNING):
        try:
            proc.send_signal(signal.SIGTERM)
        except OSError:
            pass
    raise SystemExit(128 + signum)


def doctor_run(hook: Dict[str, str], doctor_args: List[str], workdir: str, k: int) -> Dict[str, object]:
    """One whole `envbuild doctor` run (this checkout's) with the hook in its environment."""
    marker = uuid.uuid4().hex
    report = os.path.join(workdir, f"stop{k}.json")
    env = {**os.environ, **hook, "ENVBUILD_TEST_MARK": marker,
           "PYTHONPATH": os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    with subprocess.Popen([sys.executable, "-m", "envbuild", "doctor", "--json", report, "-q", *doctor_args],
                          env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        RUNNING.add(proc)
        try:
            _out, err = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:  # a doctor past any deadline of its own: stopped as a user would
            proc.terminate()
            try:
                _out, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                _out, err = proc.communicate()
        finally:
            RUNNING.discard(proc)
    ended = time.time()
    try:
        doc = json.loads(Path(report).read_text())
    except (OSError, ValueError):
        doc = {}
    bad = [r for r in doc.get("results") or [] if r.get("status") in ("fail", "error")]
    left = marked(marker)
    return {"ended": ended, "status": "fail" if bad else ("pass" if doc else "no report"),
            "summary": "; ".join(f"{r['check_id']}: {r['summary'][:160]}" for r in bad),
            "exit_code": proc.returncode, "left": left, "stderr_tail": err[-400:]}


def main(argv: Optional[List[str]] = None) -> int:
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _pass_stop_on)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stops", type=int, default=20)
    ap.add_argument("--cpu", action="store_true", help="the CPU payload under the launcher instead of the doctor")
    ap.add_argument("--cap", type=float, default=None, help="CPU only: the start and phase cap (default: quick's)")
    ap.add_argument("--ranks", type=int, default=2, help="CPU only: ranks of the payload")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--parallel", type=int, default=1, help="doctor mode: stops run this many at a time (each a "
                    "whole doctor of its own; on one GPU 4-5 fit: a stopped probe holds little)")
    ap.add_argument("--tries", type=int, default=4, help="a stop that came after the rank ended is drawn again at "
                    "half its moment, up to this many runs in all")
    ap.add_argument("--json", default=None)
    ap.add_argument("doctor_args", nargs=argparse.REMAINDER, help="after --: the doctor's arguments")
    args = ap.parse_args(argv)
    from envbuild.doctor.probe_run import QUICK_PHASE_CAP_S

    cap = args.cap if (args.cpu and args.cap) else QUICK_PHASE_CAP_S
    doctor_args = [a for a in args.doctor_args if a != "--"]
    rng = random.Random(args.seed)
    rows: List[Dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="stop-rank-") as workdir:
        def one(k: int, hook: Dict[str, str]) -> Dict[str, object]:
            return cpu_run(hook, cap, args.ranks) if args.cpu else doctor_run(hook, doctor_args, workdir, k)

        t0 = time.monotonic()
        anchor = one(-1, {})
        anchor_s = time.monotonic() - t0
        print(f"anchor (no stop): {anchor_s:.1f} s, {anchor['status']}"
              + (f": {anchor['summary']}" if anchor["summary"] else ""), flush=True)
        moments = [rng.uniform(0.0, max(0.5, anchor_s * 0.9)) for _ in range(args.stops)]
        tries = [0] * args.stops

        def landed(k: int) -> Tuple[Dict[str, object], List[Dict[str, object]]]:
            """One stop; a moment after the rank had already ended is drawn again at half of it (the doctor's
            whole run, the anchor, outlasts its ranks' lives), up to --tries times, so every stop lands."""
            while True:
                tries[k] += 1
                log = Path(workdir) / f"stops{k}-{tries[k]}.jsonl"
                out = one(k, _hook_env(k, moments[k], log))
                logged = _stops_logged(log)
                if logged or k == 0 or tries[k] >= args.tries:
                    return out, logged
                moments[k] *= 0.5

        if args.cpu or args.parallel <= 1:
            outs = [landed(k) for k in range(args.stops)]
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=args.parallel) as pool:
                outs = list(pool.map(landed, range(args.stops)))
        for k, (out, logged) in enumerate(outs):
            moment = moments[k]
            row: Dict[str, object] = {"stop": k, "asked_s": None if k == 0 else round(moment, 2), "tries": tries[k],
                                      **out}
            if logged:
                first = min(logged, key=lambda e: float(e["t"]))
                row.update(where=first["where"], how=first["how"], rank=first["rank"],
                           to_verdict_s=round(float(out["ended"]) - float(first["t"]), 2))
            else:
                row.update(where="(the probe ended before the moment)", to_verdict_s=None)
            row.pop("ended")
            rows.append(row)
            print(f"stop {k:2d} {'<start>' if k == 0 else f'at {moment:5.1f} s':>10}: rank stopped "
                  f"{row['where']}; verdict {out['status']} after "
                  f"{row['to_verdict_s'] if row['to_verdict_s'] is not None else '-'} s; left {len(out['left'])}",
                  flush=True)
    timed = [r for r in rows if r["to_verdict_s"] is not None]
    worst = max((float(r["to_verdict_s"]) for r in timed), default=0.0)
    missed = [r for r in timed if r["status"] != "fail" or float(r["to_verdict_s"]) > 2 * cap or r["left"]]
    print(f"{len(rows)} stops ({len(timed)} landed), worst time to verdict {worst:.1f} s = {worst / cap:.2f} x the "
          f"{cap:.0f} s cap; anchor {anchor_s:.1f} s; {len(missed)} not caught")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"mode": "cpu" if args.cpu else "doctor", "doctor_args": doctor_args, "cap_s": cap,
                       "anchor_s": round(anchor_s, 2), "worst_to_verdict_s": worst,
                       "worst_over_cap": round(worst / cap, 3), "stops": rows}, fh, indent=2)
    return 1 if missed or not timed else 0


if __name__ == "__main__":
    sys.exit(main())
