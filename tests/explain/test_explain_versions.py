"""The log's driver against the CUDA its software was built for (envbuild/explain/versions.py): a newer CUDA major
than the driver runs is D9 and contradicts the log even without an error line; a newer minor is what
minor-version compatibility covers in healthy runs, so it only weighs in beside a failure."""
import pytest

from envbuild.explain.explain import ExplainOptions, run
from envbuild.explain.versions import cuda_of_driver


@pytest.mark.parametrize("driver, cuda", [
    ("384.81", (9, 0)), ("515.43.04", (11, 7)), ("515.43.03", (11, 6)), ("535", (12, 2)),
    ("575.51.03", (12, 9)), ("580.65.06", (13, 0)), ("340.93", None),
])
def test_the_driver_table(driver, cuda):
    assert cuda_of_driver(driver) == cuda


def _explain(tmp_path, text):
    log = tmp_path / "x.log"
    log.write_text(text, encoding="utf-8")
    return run(ExplainOptions(paths=[str(log)]))


def _d9(result):
    return next((c for c in result["causes"] if c["id"] == "D9"), None)


def test_an_older_cuda_major_than_the_build_names_d9(tmp_path):
    res = _explain(tmp_path, "h:1:1 [0] NCCL INFO cudaDriverVersion 11040\nh:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
                             "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)\n")
    assert res["top"] == "D9", [(c["id"], c["score"]) for c in res["causes"]]
    reason = [a["reason"] for a in _d9(res)["adjustments"]][0]
    assert "CUDA 12.4" in reason and "11.4" in reason


def test_a_major_gap_is_a_finding_without_an_error_line(tmp_path):
    res = _explain(tmp_path, "| NVIDIA-SMI 470.82.01    Driver Version: 470.82.01    CUDA Version: 11.4     |\n"
                             "PyTorch version: 2.1.0+cu121\n")
    assert res["verdict"] == "explained" and res["top"] == "D9"


def test_a_minor_gap_in_a_healthy_run_raises_nothing(tmp_path):
    res = _explain(tmp_path, "h:1:1 [0] NCCL INFO cudaDriverVersion 12020\nh:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
                             "h:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 8 cudaDev 0 busId 1000 - Init COMPLETE\n")
    assert res["verdict"] == "ok" and res["causes"] == []


def test_a_minor_gap_is_a_hint_beside_a_failure_told_in_words(tmp_path):
    res = _explain(tmp_path, "we use 8xH800, driver 535, conda env; torch 2.8.0+cu128\n"
                             "after a few steps training crashes with an unhandled cuda error\n")
    d9 = _d9(res)
    assert d9 is not None and any(a["origin"] == "log-hint" and "driver 535" in a["reason"] for a in d9["adjustments"])


def test_a_driver_that_runs_the_build_adds_nothing(tmp_path):
    res = _explain(tmp_path, "| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0 |\n"
                             "torch 2.11.0+cu130\nRuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert _d9(res) is None


@pytest.mark.parametrize("text, facts", [
    ("we use 8xH800, driver 535, conda env\n", {"gpu_model": "H800", "driver_version": "535"}),
    ("训练机器：4x8H800 80G\n驱动版本：515.43.04\n", {"gpu_model": "H800", "driver_version": "515.43.04"}),
    ("- nvidia-cuda-runtime-cu12    12.1.105\n- torch==2.4.0\n", {"cuda_runtime_wheel": "12.1", "torch_version": "2.4.0"}),
    # never a fragment inside an identifier, nor a driver the reporter only plans to install
    ("NVRM: gpuClearFbhubPoisonIntrForBug2924523_GA100\nupdate driver to 570 fixes it\n", {}),
])
def test_environment_descriptions_are_read_as_facts(tmp_path, text, facts):
    got = {k: v[0]["value"] for k, v in _explain(tmp_path, text)["facts"].items() if k in
           ("gpu_model", "driver_version", "cuda_runtime_wheel", "torch_version")}
    assert got == facts


def test_the_driver_table_agrees_with_creates():
    from envbuild.explain.versions import MIN_DRIVER
    from envbuild.install.activation import MIN_DRIVER as CREATE

    assert {k: MIN_DRIVER[k] for k in CREATE} == CREATE


# --- versions the reporter states checked against each other (this round) ---------------------------------------

VLLM_UNDEF = "ImportError: /site-packages/vllm/_C.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEi\n"


@pytest.mark.parametrize("listing, clash", [
    ("vllm==0.6.3\ntorch==2.5.1+cu124\n", True),       # vLLM 0.6.3 was built against torch 2.4
    ("I use vllm 0.8.5 with torch 2.7.0\n", True),     # 0.8.x: torch 2.6
    ("vllm==0.6.3\ntorch==2.4.0+cu121\n", False),      # the pinned minor
    ("vllm==0.5.3\ntorch==2.3.0\n", False),            # a patch apart (2.3.1 pinned): not told apart
    ("vllm==0.6.3\ntorch==2.4.0\ntorch 2.5.1\n", False),  # one stated torch fits: say nothing
    ("vllm==0.2.1\ntorch==2.5.1\n", False),            # a release outside the table is not judged
])
def test_a_vllm_and_a_torch_that_cannot_go_together_raise_u5(explain_text, listing, clash):
    _, data = explain_text(VLLM_UNDEF + listing)
    reasons = [a["reason"] for c in data["causes"] if c["id"] == "U5" for a in c["adjustments"] if a["origin"] == "log-hint"]
    assert bool(reasons) == clash, data["causes"]
    if clash:
        assert data["top"] == "U5" and "built against torch" in reasons[0]


def test_a_version_listing_alone_is_no_failure(explain_text):
    proc, data = explain_text("vllm==0.6.3\ntorch==2.5.1+cu124\nCuda compilation tools, release 11.8, V11.8.89\n")
    assert proc.returncode == 0 and data["verdict"] == "ok"


@pytest.mark.parametrize("nvcc, clash", [("11.8, V11.8.89", True), ("12.4, V12.4.131", False)])
def test_nvcc_of_another_cuda_major_than_torch_raises_c9(explain_text, nvcc, clash):
    text = (f"Cuda compilation tools, release {nvcc}\ntorch 2.5.1+cu124\n"
            "RuntimeError: Error building extension 'flash_attn_cuda'\n")
    _, data = explain_text(text)
    hinted = [a for c in data["causes"] if c["id"] == "C9" for a in c["adjustments"] if a["origin"] == "log-hint"]
    assert bool(hinted) == clash, data["causes"]


def test_vllm_table_rows_do_not_overlap():
    from envbuild.explain.versions import VLLM_TORCH, vllm_torch

    rows = sorted(VLLM_TORCH)
    assert all(a[1] < b[0] for a, b in zip(rows, rows[1:]))
    assert vllm_torch("0.6.3.post1") == (2, 4) and vllm_torch("0.7.3") == (2, 5) and vllm_torch("0.12.0") is None
