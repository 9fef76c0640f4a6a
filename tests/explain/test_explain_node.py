"""explain with what is known of the node (--root BUNDLE, --report doctor.json): the node's records outrank the
log's free text, and every fact the log states is checked against them. The bundle is a real capture of a 1xH200
VM (tests/fixtures/bundles/h200x2: torch 2.11.0+cu130 with its NCCL 2.28.9 wheel, a system libnccl 2.28.3 in the
ld.so cache, the driver's GA100-named dmesg lines); the logs are NCCL's own line formats."""
import json
from pathlib import Path

import jsonschema

from explain_helpers import assert_top

BUNDLE = Path(__file__).resolve().parents[1] / "fixtures" / "bundles" / "h200x2"
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "envbuild" / "explain" / "schema.json").read_text())

SYSTEM_COPY_RAN = """\
vm:2311:2311 [0] NCCL INFO NCCL version 2.28.3+cuda13.0
vm:2311:2311 [0] NCCL INFO cudaDriverVersion 13000
vm:2311:2340 [0] include/alloc.h:112 NCCL WARN Cuda failure 999 'unknown error'
torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.28.3
"""
WHEEL_RAN = "vm:2311:2311 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\nvm:2311:2311 [0] NCCL INFO cudaDriverVersion 13000\nstep 1 loss 0.5\n"


def _json(proc):
    data = json.loads(proc.stdout)
    jsonschema.validate(data, SCHEMA)
    return data


def test_bundle_names_the_loaded_system_copy_first(explain, tmp_path):
    log = tmp_path / "run.log"
    log.write_text(SYSTEM_COPY_RAN)
    proc = explain(str(log), "--root", str(BUNDLE))
    out = proc.stdout.decode()
    assert proc.returncode == 1, proc.stderr
    assert ("cross-check: the run printed NCCL 2.28.3; this env's torch carries 2.28.9; the system copy on the loader "
            "path (/lib/x86_64-linux-gnu/libnccl.so.2) is 2.28.3: the run loaded that copy, not torch's") in out
    assert out.index("cross-check:") < out.index("verdict:")
    assert "verdict: most likely C3" in out
    assert "GPU H200" in out and "A100" not in out  # the dmesg's gpuClear..._GA100 is a function name, not a GPU
    data = _json(explain(str(log), "--root", str(BUNDLE), "--json", "-"))
    assert data["top"] == "C3" and data["cross_checks"][0]["verdict"] == "differs"
    assert any(a["origin"] == "node" for a in data["causes"][0]["adjustments"])
    assert data["node_facts"]["values"]["torch_nccl"][0]["value"] == "2.28.9"


def test_doctor_report_alone_gives_the_same_cross_check(explain, tmp_path):
    log = tmp_path / "run.log"
    log.write_text(SYSTEM_COPY_RAN)
    data = _json(explain(str(log), "--report", str(BUNDLE / ".envbuild" / "report.json"), "--json", "-"))
    assert data["top"] == "C3"
    assert "the system copy on the loader path" in data["cross_checks"][0]["says"]


def test_a_log_that_agrees_with_the_node_adds_nothing(explain, tmp_path):
    """(The bundle's own report has a failed check, stack.cuda_wheel_mix, so the verdict is the doctor's; the log's
    agreeing versions add no cause.)"""
    log = tmp_path / "ok.log"
    log.write_text(WHEEL_RAN)
    data = _json(explain(str(log), "--root", str(BUNDLE), "--json", "-"))
    rows = {r["fact"]: r for r in data["cross_checks"]}
    assert rows["nccl_version"]["verdict"] == "match" and rows["cuda_driver_version"]["verdict"] == "match"
    assert "the run used torch's NCCL" in rows["nccl_version"]["says"]
    assert not any(a["origin"] == "node" for c in data["causes"] for a in c["adjustments"])
    alone = _json(explain(str(log), "--json", "-"))
    assert alone["verdict"] == "ok" and alone["cross_checks"] == []


def test_a_newer_libcuda_than_the_node_driver_is_named(explain, tmp_path):
    log = tmp_path / "compat.log"
    log.write_text("vm:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\nvm:1:1 [0] NCCL INFO cudaDriverVersion 13010\n"
                   "RuntimeError: CUDA error: unknown error\n")
    data = _json(explain(str(log), "--root", str(BUNDLE), "--json", "-"))
    assert data["top"] in ("C1", "C8")
    assert "forward-compatible libcuda" in data["cross_checks"][0]["says"]


def test_log_stating_the_wheel_and_another_banner_contradicts_itself(explain, tmp_path):
    log = tmp_path / "preload.log"
    log.write_text("torch 2.11.0+cu130 cuda 13.0\nnvidia-nccl-cu13 2.28.9\nvm:5:5 [0] NCCL INFO NCCL version 2.28.3+cuda13.0\n"
                   "all_reduce ok 1.0\n")
    data = _json(explain(str(log), "--json", "-"))
    assert_top(data, "C3")


def test_a_doctor_report_of_a_driver_that_never_answered_names_the_driver_fault(explain, tmp_path):
    """The report of a real run on the lent H100 with NVML made to hang (docs/gpu-runs/s18/nvml-hung-fold.json:
    node.driver_version failed with D3, stack.torch's init hang folded under it): a training log that died with
    CUDA's and NCCL's generic errors is then the driver's fault, not the code's or NCCL's."""
    report = Path(__file__).resolve().parents[2] / "docs" / "gpu-runs" / "s18" / "nvml-hung-fold.json"
    log = tmp_path / "run.log"
    log.write_text("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda "
                   "error\nRuntimeError: CUDA error: unknown error\n")
    proc = explain(str(log), "--report", str(report), "--json", "-")
    assert proc.returncode == 1, proc.stderr
    data = _json(proc)
    assert_top(data, "D3")
    top = data["causes"][0]
    assert any(a["origin"] == "doctor" and "node.driver_version fail" in a["reason"] for a in top["adjustments"]), top
