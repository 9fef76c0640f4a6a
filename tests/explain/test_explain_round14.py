"""Issue 25, fourteenth round (having read held-out slice 18).

1. A driver the log shows running the software's CUDA clears D9. caffe #492 printed `CUDA version: 8000` and
   `CUDA driver version: 9000` beside NCCL's unhandled cuda error, and D9 ("driver older than the runtime") still came
   first, from the learned ranker's reading of the words "version" and "cuda". The integer versions Caffe prints and
   the "driver / runtime" line of CUDA's deviceQuery are now read, and a driver at or past every runtime the log names
   cuts D9 as a signature's rules_out does, the ranker's share included; one behind it still raises D9.
2. GPUs named by their bare number are PCIe GPUs too. "multiple 4090 gpus", "2 or 4 A6000", "4 L4 gpus" (DeepSpeed
   #4433, transformers #28280, verifiers #208) were not read as the PCIe-only hint the hang symptom needs, so a hang
   on them never reached N3. A bare number counts when it is counted or called a GPU or card, not as a port."""
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
])
def test_the_bare_number_hint_needs_a_count_or_the_word_gpu(line, hint):
    assert fires("topo.pcie_gpus", line) is hint


def test_a_hang_on_a_port_numbered_like_a_gpu_is_not_p2p(explain_text):
    proc, data = explain_text("MASTER_PORT=4090 torchrun --nproc_per_node 8 train.py\n"
                              "the job hangs at the first all_reduce\n")
    assert "N3" not in caused(data)[:1], [(c["id"], c["score"]) for c in data["causes"]]
