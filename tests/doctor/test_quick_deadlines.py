"""A quick run reports a stuck rank after seconds: every spec-declared phase deadline is capped in quick mode
(the offload probe's 90 s phases let one SIGSTOPped rank hold `--quick` past 150 s), full mode keeps them; and
`--soak N` is the --full train step with N slime cycles."""
import json
import subprocess
import sys

from envbuild.doctor.context import DoctorContext
from envbuild.doctor.launcher import START
from envbuild.doctor.probe_run import QUICK_PHASE_CAP_S, ProbeRun
from envbuild.doctor.registry import all_checks
from envbuild.facts.source import open_source


def runs(mode):
    ctx = DoctorContext(facts=open_source(None, python=sys.executable), mode=mode, gpus=[0])
    return {c.id: ProbeRun(c, ctx) for c in all_checks() if c.probe is not None}


def test_quick_caps_every_declared_phase_deadline_and_full_keeps_them():
    quick, full = runs("quick"), runs("full")
    cap = QUICK_PHASE_CAP_S
    assert quick["comm.offload_cycle"].phase_deadlines() == {"init": cap, "*": cap, START: cap}
    assert full["comm.offload_cycle"].phase_deadlines() == {"init": 90.0, "*": 90.0, START: 90.0}
    for check_id, run in quick.items():
        assert all(v <= cap for v in run.phase_deadlines().values()), check_id
        assert set(full[check_id].phase_deadlines()) <= set(run.phase_deadlines()), check_id


def test_no_wait_of_a_quick_probe_is_left_to_the_run_deadline():
    """Every probe of a quick run bounds the start (spawn to first phase) and every phase, declared or not, by
    the cap: a rank SIGSTOPped before its first phase was held until the 120 s run deadline before (issue 26)."""
    for check_id, run in runs("quick").items():
        deadlines = run.phase_deadlines()
        assert deadlines.get(START) == QUICK_PHASE_CAP_S and deadlines.get("*") <= QUICK_PHASE_CAP_S, check_id


def doctor(*args):
    return subprocess.run([sys.executable, "-m", "envbuild", "doctor", *args], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)


def test_soak_is_the_full_train_step_with_n_cycles(tmp_path):
    out = tmp_path / "r.json"
    proc = doctor("--soak", "7", "--check", "train.moe_step", "--json", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["options"]["mode"] == "full" and data["options"]["set"] == {"train.steps": "7"}
    for bad in (["--soak", "0"], ["--soak", "3", "--quick"], ["--soak", "3", "--set", "train.steps=4"]):
        proc = doctor(*bad)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (bad, proc.stderr)
