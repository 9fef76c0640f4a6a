"""Issue 25, fourteenth round (having read held-out slices 18 and 19).

1. A driver the log shows running the software's CUDA clears D9. caffe #492 printed `CUDA version: 8000` and
   `CUDA driver version: 9000` beside NCCL's unhandled cuda error, and D9 ("driver older than the runtime") still came
   first, from the learned ranker's reading of the words "version" and "cuda". The integer versions Caffe prints and
   the "driver / runtime" line of CUDA's deviceQuery are now read, and a driver at or past every runtime the log names
   cuts D9 as a signature's rules_out does, the ranker's share included; one behind it still raises D9.
2. GPUs named by their bare number are PCIe GPUs too. "multiple 4090 gpus", "2 or 4 A6000", "4 L4 gpus" (DeepSpeed
   #4433, transformers #28280, verifiers #208) were not read as the PCIe-only hint the hang symptom needs, so a hang
   on them never reached N3. A bare number counts when it is counted or called a GPU or card, not as a port.
3. A library's class built with a keyword it does not take is a version mismatch (U5), not a bug.
4. A failure after the system's automatic upgrades is a driver upgraded in one half (D2).
5. A MIG or GPU UUID read as a device index (C11); a vGPU without its licence (D8)."""
import pytest

from explain_helpers import assert_top, fires

NCCL_FAILS = "Check failed: result == ncclSuccess (1 vs. 0) unhandled cuda error\n"


def caused(data) -> list:
    return [c["id"] for c in data["causes"]]


@pytest.mark.parametrize("versions", [
    "I0404 10:13:38.892246 12760 caffe.cpp:458] CUDA version: 8000\n"
    "I0404 10:13:38.892247 12760 caffe.cpp:459] CUDA driver version: 9000\n",
    "  CUDA Driver Version / Runtime Version          11.4 / 11.2\n",
    "  CUDA Driver Version / Runtime Version          11.2 / 11.2\n",
])
def test_a_driver_that_runs_the_logs_cuda_is_not_behind(explain_text, versions):
    proc, data = explain_text(NCCL_FAILS + versions)
    assert proc.returncode == 1, proc.stderr
    assert data["top"] != "D9", [(c["id"], c["score"]) for c in data["causes"]]
    d9 = [c for c in data["causes"] if c["id"] == "D9"]
    assert not d9 or any(a["factor"] < 1 and "not behind" in a["reason"] for a in d9[0]["adjustments"]), d9


def test_a_driver_behind_the_runtime_still_points_at_d9(explain_text):
    proc, data = explain_text("CUDA driver version is insufficient for CUDA runtime version\n"
                              "  CUDA Driver Version / Runtime Version          10.2 / 11.0\n")
    assert proc.returncode == 1, proc.stderr
    assert_top(data, "D9")
    d9 = [c for c in data["causes"] if c["id"] == "D9"][0]
    assert all(a["factor"] == 1 for a in d9["adjustments"]), d9["adjustments"]


@pytest.mark.parametrize("text", [
    "[BUG] Deadlock in distribution with multiple 4090\n"
    "I'm trying to train a model with multiple 4090 gpus, but it always gets stuck and no report is shown.\n",
    "During the training it stucks with multi-GPUs (2 or 4 A6000), but works with a single GPU.\n"
    "tried to run the following code, stuck with backend `nccl`, but works with `gloo`:\n",
])
def test_a_hang_on_gpus_named_by_their_bare_number_is_pcie_p2p(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 1, proc.stderr
    assert_top(data, "N3")


@pytest.mark.parametrize("line, hint", [
    ("My setup is 4 L4 gpus, I'm using 1 GPU as vLLM server", True),
    ("8x A10G on a g5.48xlarge", True),
    ("two 3090 ti cards", True),
    ("RTX A5000 GPUs", True),
    ("export MASTER_PORT=4090", False),
    ("the L4 load balancer in front of the cluster", False),
    ("in 2080 we will all use NVLink", False),
    ("4x 4090 on one board", True),
    ("frames resized to 1920x1080 and 1920 x 1080", False),
    ("input_ids [151644 8948 198 2610 3090 1050]", False),
    ("Epoch 3 3090 samples seen", False),
    ("model.layers.4 2050", False),
    ("at libfoo.so (+0x1050)", False),
    ("step 4 L4 loss 0.5", False),
])
def test_the_bare_number_hint_needs_a_count_or_the_word_gpu(line, hint):
    assert fires("topo.pcie_gpus", line) is hint


def test_a_hang_on_a_port_numbered_like_a_gpu_is_not_p2p(explain_text):
    proc, data = explain_text("MASTER_PORT=4090 torchrun --nproc_per_node 8 train.py\n"
                              "the job hangs at the first all_reduce\n")
    assert "N3" not in caused(data)[:1], [(c["id"], c["score"]) for c in data["causes"]]


@pytest.mark.parametrize("text", [
    "(TaskRunner pid=109035) TypeError: EngineArgs.__init__() got an unexpected keyword argument 'model_hf_config'\n",
    "[rank0]: TypeError: Trainer.__init__() got an unexpected keyword argument 'processing_class'\n",
])
def test_a_library_class_built_with_a_keyword_it_does_not_take_is_a_version_mismatch(explain_text, text):
    """3. Five threads in four slices (6, 9, 17, 18) ended a `SomeClass.__init__() got an unexpected keyword argument`
    with a version pin: the caller was written for another release of the library. A plain function's TypeError
    stays the code's bug (U2)."""
    proc, data = explain_text(text)
    assert proc.returncode == 1, proc.stderr
    assert_top(data, "U5")


def test_a_functions_unexpected_keyword_stays_a_bug(explain_text):
    proc, data = explain_text("TypeError: forward() got an unexpected keyword argument 'packed_seq_params'\n")
    assert_top(data, "U2")


def test_a_failure_after_the_systems_automatic_upgrades_is_a_driver_half_upgraded(explain_text):
    """4. cuInit's 999 after Ubuntu's automatic upgrades (futhark #1117): the upgraded user-space driver beside the
    old kernel module until a reboot (D2). The sentence alone is no failure."""
    proc, data = explain_text("CUDA call cuInit(0) failed with error code 999 (unknown error)\n"
                              "I'm on UBUNTU 20.04 and i'm now thinking the automatic upgrades may have something to "
                              "do with it.\n")
    assert proc.returncode == 1, proc.stderr
    assert_top(data, "D2")
    proc, data = explain_text("unattended-upgrades ran last night; the job finished fine\n")
    assert proc.returncode == 0 and data["verdict"] == "ok", data["verdict"]


@pytest.mark.parametrize("line, hit", [
    ("i'm now thinking the automatic upgrades may have something to do with it.", True),
    ("It broke after the system update last night", True),
    ("After the package update (pip install -U vllm) the engine fails", False),
    ("auto-upgrade pip before installing", False),
    ("I disabled unattended-upgrades long ago", False),
])
def test_only_an_operating_system_upgrade_is_read_as_one(line, hit):
    """A pip, conda or uv upgrade is a package change (U5's ground), not the driver's halves parting (D2)."""
    assert fires("prose.system_upgrade", line) is hit


@pytest.mark.parametrize("text, cause", [
    ("ValueError: invalid literal for int() with base 10: 'MIG-74d68ce8-f74a-5408-a325-06b493f31c14'\n", "C11"),
    ("ValueError: invalid literal for int() with base 10: 'GPU-5a3e1c2b-0000-1111-2222-333344445555'\n", "C11"),
    ("CUDA error 102 at ggml-cuda.cu:7100: device doesn't have valid Grid license\ncurrent device: 0\n", "D8"),
])
def test_a_device_named_by_uuid_and_an_unlicensed_vgpu_are_named(explain_text, text, cause):
    """5. From held-out slice 19: a MIG or GPU UUID parsed as a device index (blackfish #108: the process never
    picks its GPUs, C11), and a vGPU without its licence (llama-cpp-python #904: D8)."""
    proc, data = explain_text(text)
    assert proc.returncode == 1, proc.stderr
    assert_top(data, cause)


@pytest.mark.parametrize("line, hit", [
    ("CUDA error 102 at ggml-cuda.cu:7100: device doesn't have valid Grid license", True),
    ("vGPU license is expired on this VM", True),
    ("this VM has a valid vGPU license", False),
    ("a vGPU license is not required for passthrough", False),
])
def test_only_a_missing_vgpu_licence_is_read_as_one(line, hit):
    assert fires("cuda.vgpu_unlicensed", line) is hit


def test_an_index_that_is_just_a_bad_number_is_the_codes_bug(explain_text):
    proc, data = explain_text("ValueError: invalid literal for int() with base 10: 'abc'\n")
    assert_top(data, "U2")


@pytest.mark.parametrize("error", [
    "RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain.\n",
    "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version\n",
])
def test_an_error_that_says_the_driver_is_behind_outweighs_the_logs_version_lines(explain_text, error):
    """1b. Error 222 or 35 is the driver saying it is behind whatever built the failing code (Triton's ptxas, an
    extension), which the version lines may not show: D9 stays first and uncut (a review found the cut turned the
    clearest D9 logs into "unknown")."""
    proc, data = explain_text("PyTorch version: 2.3.0+cu121\n| NVIDIA-SMI 535.54.03   Driver Version: 535.54.03   "
                              "CUDA Version: 12.2 |\n" + error)
    assert proc.returncode == 1, proc.stderr
    assert_top(data, "D9")
    d9 = data["causes"][0]
    assert all(a["factor"] == 1 for a in d9["adjustments"]), d9["adjustments"]


def test_a_log_naming_two_drivers_is_cleared_only_by_the_older(explain_text):
    """1c. Two hosts pasted, one driver behind: the least capable driver decides whether D9 is cleared."""
    proc, data = explain_text(NCCL_FAILS + "  CUDA Driver Version / Runtime Version          12.4 / 12.4\n"
                              "  CUDA Driver Version / Runtime Version          11.8 / 12.4\n")
    d9 = [c for c in data["causes"] if c["id"] == "D9"]
    assert d9 and all(a["factor"] == 1 for a in d9[0]["adjustments"]), d9
