"""Replaying the committed 2xH200 bundle here gives the verdicts the doctor gave live on that machine.

The live side is the lead's integrated run (docs/gpu-runs/doctor-full-2gpu.json, code at 126dd0f, 40
minutes after the capture). One difference is expected and named: that run carried torch_memory_saver
in PYTHONPATH, the capture run did not, so stack.tms_hook passed live and skips on the bundle.
"""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXPECTED_DIFFERENCES = {("stack.tms_hook", ""): ("pass", "skip")}
NEW_SINCE_THE_LIVE_RUN = {("node.net_interfaces", "")}  # issue 26: no interface variable set on that node: pass


def verdicts(report):
    return {(r["check_id"], r.get("subject") or ""): r["status"] for r in report["results"]
            if r["category"] in ("node", "stack")}


def test_replay_of_the_h200_bundle_matches_the_live_static_verdicts(tmp_path):
    out = tmp_path / "replay.json"
    proc = subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--root",
                           str(REPO / "tests/fixtures/bundles/h200x2"), "-q", "--json", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    live = verdicts(json.loads((REPO / "docs/gpu-runs/doctor-full-2gpu.json").read_text()))
    replay = verdicts(json.loads(out.read_text()))
    assert set(live) == set(replay) - NEW_SINCE_THE_LIVE_RUN
    assert {replay[k] for k in NEW_SINCE_THE_LIVE_RUN} == {"pass"}
    differ = {k: (live[k], replay[k]) for k in live if live[k] != replay[k]}
    assert differ == EXPECTED_DIFFERENCES
    assert len(live) >= 30 and sum(s == "pass" for s in live.values()) >= 20
