"""The doctor folds consequences under their root cause (doctor/fold.py), replayed on a run with a
forward-compatible libcuda first on the library path (tests/explain/fixtures/doctor-compat-first.json)."""
import json

from explain_helpers import FIXTURES

from envbuild.doctor.fold import fold_consequences, root_causes
from envbuild.report.json_report import report_from_dict
from envbuild.report.model import Result, Status


def _replay():
    return report_from_dict(json.loads((FIXTURES / "doctor-compat-first.json").read_text())).results


def test_compat_libcuda_is_the_one_root_and_the_probes_its_consequences():
    results = fold_consequences(_replay())
    assert root_causes(results) == [("stack.libcuda_compat", ["C8"], ["cumem.ipc", "offload.cycle", "weight.sync"])]
    by = {r.check_id: r for r in results}
    for cid, before in (("cumem.ipc", ["M1", "D8"]), ("offload.cycle", ["C9", "M5"]), ("weight.sync", ["C5", "C3"])):
        r = by[cid]
        assert r.status == Status.FAIL  # still a failure: the exit code does not change
        assert r.causes == ["C8"]
        assert r.summary.startswith("consequence of stack.libcuda_compat (C8): ")
        assert r.evidence["consequence_of"]["blamed_before"] == before
        assert r.evidence["consequence_of"]["signature"] == "cuda.get_device_count"
    assert by["node.dev_shm"].causes == ["O1"] and "consequence" not in by["node.dev_shm"].summary


def test_nothing_folds_without_a_failed_root():
    results = [r for r in _replay() if r.check_id != "stack.libcuda_compat"]
    before = [(r.check_id, list(r.causes), r.summary) for r in results]
    assert [(r.check_id, r.causes, r.summary) for r in fold_consequences(results)] == before


def test_a_root_whose_causes_do_not_explain_the_message_does_not_fold():
    results = [Result("stack.nccl_copies", "stack", Status.FAIL, "two libnccl copies", causes=["C3"]),
               Result("cumem.ipc", "gpu", Status.FAIL, "Unexpected error from cudaGetDeviceCount()", causes=["M1"])]
    fold_consequences(results)
    assert results[1].causes == ["M1"] and "consequence_of" not in results[1].evidence


def test_doctor_json_report_carries_the_fold(tmp_path):
    """What the fold writes travels in the doctor's JSON report (the root lists its consequences)."""
    from envbuild.report.json_report import report_to_dict
    from envbuild.report.model import Report

    results = fold_consequences(_replay())
    data = report_to_dict(Report(host={}, gpus=[], results=results))
    root = next(r for r in data["results"] if r["check_id"] == "stack.libcuda_compat")
    assert root["evidence"]["consequences"] == ["cumem.ipc", "offload.cycle", "weight.sync"]


def test_a_probe_finding_the_static_root_already_names_folds_under_it():
    """f09 on the H200 (docs/gpu-runs/s7/f09.json, the system libnccl preloaded): stack.nccl_copies and
    comm.weight_sync [libnccl] both failed naming C3; the probe saw the same two copies in its rank, so the run
    has one root, the static check, and what the probe's finding explains folds there too."""
    from pathlib import Path

    run = Path(__file__).resolve().parents[2] / "docs" / "gpu-runs" / "s7" / "f09.json"
    data = json.loads(run.read_text())
    for r in data["results"]:  # the run as the doctor wrote it before folding
        (r.get("evidence") or {}).pop("consequence_of", None)
    results = report_from_dict(data).results
    nccl_error = Result("comm.weight_sync", "comm", Status.FAIL, "broadcast failed: DistBackendError: NCCL error",
                        causes=["C5"], subject="transfer")
    results.append(nccl_error)
    fold_consequences(results)
    roots = root_causes(results)
    assert [(cid, causes) for cid, causes, _ in roots] == [("stack.nccl_copies", ["C3"])]
    assert sorted(roots[0][2]) == ["comm.weight_sync [libnccl]", "comm.weight_sync [transfer]"]
    probe = next(r for r in results if r.subject == "libnccl")
    assert probe.status == Status.FAIL and probe.summary.startswith("consequence of stack.nccl_copies (C3): ")
    assert nccl_error.causes == ["C3"]


def test_a_probe_finding_with_a_cause_of_its_own_stays_a_root():
    results = [Result("stack.nccl_copies", "stack", Status.FAIL, "two libnccl copies", causes=["C3"]),
               Result("comm.weight_sync", "comm", Status.FAIL, "NCCL_CUMEM_ENABLE differs", causes=["C5"],
                      subject="nccl_env", evidence={"explains": ["NCCL error"]})]
    fold_consequences(results)
    assert "consequence_of" not in results[1].evidence and results[1].causes == ["C5"]
