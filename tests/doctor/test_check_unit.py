"""The check unit as the runner executes it: a probe check declares a spec, the runner launches the payload,
turns a hang or a crash into the check's `fail`, and stamps the check's id and category on every result."""
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

from envbuild.doctor.context import DoctorContext
from envbuild.doctor.registry import Check, ProbeSpec, all_checks, verdict
from envbuild.doctor.runner import run_check
from envbuild.facts.source import FactSource
from envbuild.report.model import Status

PAYLOADS = Path(__file__).resolve().parents[1] / "payloads"


class TwoGpuFacts(FactSource):
    """A live node whose NVML reports two GPUs (the payloads here are torch-free and never touch them)."""

    is_live = True
    description = "fake live node"

    def nvml(self) -> Dict[str, Any]:
        return {"device_count": 2}


def probe(payload: str, judge, **spec: Any) -> Check:
    spec.setdefault("deadline_s", {"quick": 30, "full": 30})
    return Check(id="comm.t", category="comm", title="t", fn=judge, needs=frozenset({"gpu"}), causes=("M4",),
                 probe=ProbeSpec(str(PAYLOADS / payload), "the test probe", backend="none", **spec))


def judge_every_rank(ctx, run):
    outcome = run.launch(["all"])
    return [verdict(Status.PASS, r.result["summary"], subject=f"rank{r.rank}") for r in outcome.ranks]


def test_a_probe_runs_one_rank_per_gpu_and_every_result_carries_the_checks_id():
    results = run_check(probe("ok_payload.py", judge_every_rank), DoctorContext(facts=TwoGpuFacts(), python=sys.executable))
    assert [r.subject for r in results] == ["rank0", "rank1"]
    assert all(r.check_id == "comm.t" and r.category == "comm" and r.status is Status.PASS for r in results)


def test_a_hang_never_reaches_the_judgement_it_is_the_runners_fail_with_the_specs_causes():
    judged = []
    chk = probe("hang_payload.py", lambda ctx, run: judged.append(run.launch()) or [],
                phase_deadlines={"collective": 1.0}, hang_causes=("M4", "D7"))
    [res] = run_check(chk, DoctorContext(facts=TwoGpuFacts(), python=sys.executable))
    assert judged == []
    assert res.check_id == "comm.t" and res.status is Status.FAIL
    assert res.summary.startswith("the test probe hung: rank 1 hung in phase 'collective'")
    assert res.causes == ["M4", "D7"] and res.evidence["leftover_pids"] == []


def test_a_crash_is_a_fail_naming_the_rank_and_the_error():
    chk = probe("crash_payload.py", lambda ctx, run: run.launch() and [], crash_causes=("D3",))
    [res] = run_check(chk, DoctorContext(facts=TwoGpuFacts(), python=sys.executable))
    assert res.status is Status.FAIL and "rank 1" in res.summary and "999" in res.summary
    assert res.causes == ["D3"] and res.check_id == "comm.t"


def test_the_mode_picks_the_deadline_from_the_spec():
    seen = {}

    def judge(ctx, run):
        seen[ctx.mode] = (run.mode, run.deadline_s)
        return verdict(Status.PASS, "ok")

    chk = probe("ok_payload.py", judge, deadline_s={"quick": 7, "full": 70})
    for mode in ("static", "quick", "full"):
        run_check(chk, DoctorContext(facts=TwoGpuFacts(), mode=mode, python=sys.executable))
    assert seen == {"static": ("quick", 7.0), "quick": ("quick", 7.0), "full": ("full", 70.0)}


def test_every_probe_declares_its_deadlines_in_one_place():
    probes = [c for c in all_checks() if c.probe is not None]
    assert len(probes) >= 8
    for c in probes:
        assert set(c.probe.deadline_s) == {"quick", "full"}, c.id
        assert not hasattr(c, "timeout_s")


def test_a_spec_without_both_deadlines_is_refused():
    with pytest.raises(ValueError, match="deadline_s needs exactly"):
        ProbeSpec("x.py", "x", deadline_s={"quick": 5})


def test_cli_skips_the_probes_with_a_reason_without_a_gpu(tmp_path):
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present: this test is about nodes without one")
    except Exception:
        pass
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--quick", "--check", "gpu.p2p", "--check",
                           "cumem.ipc", "--check", "offload.cycle", "--check", "weight.sync", "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())["results"]
    assert sorted(r["check_id"] for r in results) == ["comm.offload_cycle", "comm.weight_sync", "gpu.cumem_ipc",
                                                       "gpu.p2p"]  # the old ids it was asked for run the renamed checks
    assert {r["status"] for r in results} == {"skip"}
    assert all("driver" in r["summary"] or "GPU" in r["summary"] for r in results)


@pytest.mark.parametrize("old, new", [("weight.sync", "comm.weight_sync"), ("offload.cycle", "comm.offload_cycle"),
                                      ("cumem.ipc", "gpu.cumem_ipc")])
def test_an_old_id_selects_the_renamed_check_and_says_so(old, new, tmp_path, no_gpu_env):
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--check", old, "--json", str(out), "-q"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"check {old} was renamed to {new}" in proc.stderr
    assert [r["check_id"] for r in json.loads(out.read_text())["results"]] == [new]


def test_one_name_everywhere_id_module_payload_and_test_file():
    repo = Path(__file__).resolve().parents[2]
    for c in all_checks():
        stem = c.id.replace(".", "_")
        assert c.id.startswith(c.category + "."), c.id
        assert c.fn.__module__ == f"envbuild.doctor.checks.{stem}", c.id  # static checks too: one module each
        if c.probe is not None:
            assert c.probe.payload == stem + ".py" and (repo / "checks" / c.probe.payload).is_file(), c.id
            assert (repo / "tests" / "doctor" / f"test_{stem}.py").is_file(), c.id
    # every module of the package is one check's, or a private one (_name.py) that registers none
    modules = {p.stem for p in (repo / "envbuild" / "doctor" / "checks").glob("*.py") if p.stem != "__init__"}
    public = {m for m in modules if not m.startswith("_")}
    assert public == {c.id.replace(".", "_") for c in all_checks()}


def test_a_check_reads_the_stack_probes_facts_exactly_when_it_declares_the_need():
    """The runner lets checks after a "stack" check go first while the stack probe still runs; a check that reads
    ctx.facts.stack() without the need would silently wait for the probe again (and one that declares it without
    reading it would be held back for nothing)."""
    import inspect

    for c in all_checks():
        reads = "facts.stack()" in inspect.getsource(sys.modules[c.fn.__module__])
        assert reads == ("stack" in c.needs), c.id


def test_a_check_whose_module_is_not_named_after_its_id_is_refused():
    """node.ulimits in node_os.py (five checks in one module, as before the split) is refused when it registers."""
    from envbuild.doctor.registry import check

    def ulimits(ctx):
        return None

    ulimits.__module__ = "envbuild.doctor.checks.node_os"
    with pytest.raises(ValueError, match=r"node\.ulimits: it must live in envbuild/doctor/checks/node_ulimits\.py, "
                                         r"not node_os\.py"):
        check("node.ulimits", "node", "t")(ulimits)


def test_a_check_whose_id_is_not_prefixed_by_its_category_is_refused():
    from envbuild.doctor.registry import check

    with pytest.raises(ValueError, match="must start with its category"):
        check("weight.sync", "comm", "t")(lambda ctx: None)


def test_every_check_has_one_docs_section():
    """docs/checks-<category>.md has exactly one heading that starts with each registered check's id (its section),
    and no section for an id that is not registered (a renamed or removed check)."""
    import re

    docs = Path(__file__).resolve().parents[2] / "docs"
    heading = re.compile(r"^#{1,4} `?([a-z]+\.[a-z0-9_]+)`?(?=[\s:(]|$)", re.M)
    ids = {c.id: c.category for c in all_checks()}
    sections: dict = {}
    for page in sorted(docs.glob("checks-*.md")):
        for cid in heading.findall(page.read_text()):
            sections.setdefault(cid, []).append(page.name)
    for cid, category in ids.items():
        assert sections.get(cid) == [f"checks-{category}.md"], (cid, sections.get(cid))
    assert set(sections) <= set(ids), sorted(set(sections) - set(ids))
