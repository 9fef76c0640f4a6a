"""Stop a real `envbuild doctor` from outside at random moments and see what it leaves: processes, GPU memory,
the report.

Issue 17 asks that SIGINT, SIGTERM and SIGHUP end every payload process the doctor started, write the report
of the checks finished so far with the interrupted one marked and exit 128 + the signal, and that a SIGKILLed
doctor's ranks die with it (their parent-death signal). tests/doctor/test_doctor_stop.py proves it on CPU with
a gloo payload; this runs the shipped doctor on a GPU node, where a rank left behind holds GPU memory:

    python benchmarks/stop_doctor.py --stops 8 --json out.json -- --quick --gpus 0

Each stop starts the doctor (its arguments after `--`) with a marker variable every child inherits, waits a
random time (uniform in --after, seeded), sends the next signal of --signals, and then records: the exit code,
seconds from the signal to the doctor's exit and to the last marked process's end, the processes still alive
after --grace seconds, nvidia-smi's compute apps and the GPU memory in use against before the run, and the
report's `interrupted` entry. A doctor that has not ended 120 s after its signal is recorded as hung, with every
thread's Python stack (it runs under `-X faulthandler`, and gets SIGABRT). Exit 1 when anything was left behind, a
doctor hung, or an exit code was neither 128 + the signal nor the signal's own default end.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from procmark import cmdline, marked  # noqa: E402  (the tests' marker lookup)


def gpu_state() -> Dict[str, object]:
    """nvidia-smi's compute apps and memory used per GPU (MiB); empty without nvidia-smi."""
    if not shutil.which("nvidia-smi"):
        return {}
    apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.strip()
    used = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True).stdout.strip()
    return {"compute_apps": [ln.strip() for ln in apps.splitlines() if ln.strip()],
            "memory_used_mib": {ln.split(",")[0].strip(): int(ln.split(",")[1]) for ln in used.splitlines()
                                if "," in ln}}


EARLY_S = 1.0  # a signal this early may find the doctor still importing, before its handlers are in place


def one_stop(k: int, sig: signal.Signals, after_s: float, doctor_args: List[str], workdir: str,
             grace_s: float) -> Dict[str, object]:
    marker = uuid.uuid4().hex
    report = os.path.join(workdir, f"stop{k}.json")
    env = {**os.environ, "ENVBUILD_TEST_MARK": marker}
    before = gpu_state()
    argv = [sys.executable, "-X", "faulthandler", "-m", "envbuild", "doctor", "--json", report] + doctor_args
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    ranks_seen = 0
    while time.monotonic() - t0 < after_s and proc.poll() is None:
        ranks_seen = max(ranks_seen, sum("checks/" in cmdline(p) for p in marked(marker)))
        time.sleep(0.05)
    finished_first = proc.poll() is not None
    running = [f"{p} {cmdline(p)[:120]}" for p in marked(marker) if p != proc.pid]
    t_sig = time.monotonic()
    if not finished_first:
        os.kill(proc.pid, sig)
    hung = False
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # a doctor that hung: SIGABRT makes faulthandler print every thread's stack
        hung = True
        proc.send_signal(signal.SIGABRT)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    t_exit = time.monotonic()
    end = t_exit + grace_s
    while marked(marker) and time.monotonic() < end:
        time.sleep(0.05)
    t_gone = time.monotonic()
    left = [f"{p} {cmdline(p)[:160]}" for p in marked(marker)]
    for pid in marked(marker):  # the next stop must start on a clean node
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.5)
    after = gpu_state()
    try:
        with open(report, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        doc = {}
    expected_rc = -int(sig) if sig == signal.SIGKILL else 128 + int(sig)
    row = {"stop": k, "signal": sig.name, "after_s": round(after_s, 2), "finished_before_signal": finished_first,
           "running_at_signal": running, "exit_code": proc.returncode,
           # -signal: it came before the doctor installed its handlers and its default action ended the process,
           # which only an early signal with no report written yet may do; left_behind says whether anything survived
           "exit_code_ok": not hung and (finished_first or proc.returncode == expected_rc
                                         or (proc.returncode == -int(sig) and after_s < EARLY_S and not doc)),
           "hung": hung,
           "signal_to_exit_s": round(t_exit - t_sig, 2), "signal_to_all_gone_s": round(t_gone - t_sig, 2),
           "left_behind": left, "gpu_before": before, "gpu_after": after,
           "report_interrupted": doc.get("interrupted"), "report_results": len(doc.get("results") or []),
           "traceback": "Traceback" in err, "stderr_tail": err[-(6000 if hung else 600):]}
    return row


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stops", type=int, default=8)
    ap.add_argument("--signals", default="INT,TERM,HUP,KILL", help="sent in turn")
    ap.add_argument("--after", default="1,20", help="MIN,MAX seconds after the start to send the signal")
    ap.add_argument("--grace", type=float, default=10.0, help="seconds the payloads get to end after the doctor")
    ap.add_argument("--seed", type=int, default=1305)
    ap.add_argument("--json", default=None)
    ap.add_argument("doctor_args", nargs=argparse.REMAINDER, help="after --: the doctor's arguments")
    args = ap.parse_args(argv)
    doctor_args = [a for a in args.doctor_args if a != "--"]
    lo, hi = (float(x) for x in args.after.split(","))
    sigs = [getattr(signal, "SIG" + s.strip().upper()) for s in args.signals.split(",")]
    rng = random.Random(args.seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="stop-doctor-") as workdir:
        for k in range(args.stops):
            sig = sigs[k % len(sigs)]
            row = one_stop(k, sig, rng.uniform(lo, hi), doctor_args, workdir, args.grace)
            rows.append(row)
            apps = (row["gpu_after"] or {}).get("compute_apps")
            print(f"stop {k:2d} {row['signal']:<7} at {row['after_s']:5.1f} s: exit {row['exit_code']} "
                  f"({'ok' if row['exit_code_ok'] else 'HUNG' if row['hung'] else 'WRONG'}), exit {row['signal_to_exit_s']:.2f} s / all gone "
                  f"{row['signal_to_all_gone_s']:.2f} s after the signal; left {len(row['left_behind'])}; "
                  f"gpu apps after {apps if apps is not None else 'n/a'}; interrupted "
                  f"{(row['report_interrupted'] or {}).get('where') or '-'}", flush=True)
    bad = [r for r in rows if r["left_behind"] or not r["exit_code_ok"] or r["traceback"]
           or (r["gpu_after"] or {}).get("compute_apps")]
    print(f"{len(rows)} stops, {len(bad)} with something wrong")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"doctor_args": doctor_args, "stops": rows}, fh, indent=2)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
