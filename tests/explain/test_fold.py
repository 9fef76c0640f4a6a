"""The doctor folds consequences under their root cause (doctor/fold.py), replayed on a run with a
forward-compatible libcuda first on the library path (tests/explain/fixtures/doctor-compat-first.json)."""
import json

from conftest import FIXTURES

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
