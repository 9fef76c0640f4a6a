"""Issue 25, fourth round: classes of misses that left answers `unknown` or `ok` on fresh RL/NCCL text.

- symptoms of broken PCIe P2P said in prose (a hang, wrong or NaN results) on GPUs that talk over PCIe: N3, but
  only beside a hint of that topology, and never from a sentence that says the symptom did not happen;
- NCCL INFO/WARN lines that identify the failing mechanism: the kernels' shared-memory request a GPU cannot meet
  (an NCCL older than the GPU: D10), a /dev/shm attach with a garbage name or size 0 (cuMem host descriptors read as
  a path: M2, not a full /dev/shm);
- torch's refusal of CUDA IPC for expandable segments when pidfd_open is missing (M3).
Each case was `ok` or `unknown` (or O1 for the attach) before these entries."""
import pytest

from explain_helpers import assert_top, beyond_the_ranker


@pytest.mark.parametrize("text", [
    "all_reduce_perf hangs on our 2x GeForce RTX 3090 box\n",
    "Training gets stuck at the first all-reduce on 4x RTX A6000\nnothing else is printed\n",
    "the reduced values are wrong between GPUs that do not have NVLink\n",
    "loss becomes NaN after the first step on two A100 PCIe cards\n",
    "host1:12:12 [0] NCCL INFO Bootstrap : Using wlan0:192.168.0.7<0>\nthe job hangs after init\n",
])
def test_a_p2p_symptom_on_pcie_gpus_names_n3(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 1, proc.stderr
    assert_top(data, "N3")


@pytest.mark.parametrize("text", [
    # the same symptom with nothing about the topology: no cause named from the symptom alone
    "all_reduce_perf hangs on our box\n",
    # the symptom in code, not in words
    "values = worker.get_objects(refs, timeout=timeout)\nNVIDIA GeForce RTX 4090\n",
])
def test_the_symptom_alone_or_in_code_is_not_n3(explain_text, text):
    _, data = explain_text(text)
    assert "N3" not in [c for c, _ in beyond_the_ranker(data)], [(c["id"], c["score"]) for c in data["causes"]]


@pytest.mark.parametrize("text", [
    "NVIDIA GeForce RTX 4090 x8: no wrong results\n",
    "8x RTX 4090, PCIe only, without NVLink; the run went through\n",
])
def test_a_pcie_host_that_ran_through_is_ok(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 0 and data["verdict"] == "ok", [(c["id"], c["score"]) for c in data["causes"]]


def test_ncclmaxsharedmem_names_a_gpu_newer_than_nccl(explain_text):
    proc, data = explain_text(
        "h:1:2 [0] NCCL INFO NCCL version 2.25.1+cuda12.8\n"
        "h:1:3 [0] NCCL INFO ncclMaxSharedMem 82240 exceeds device/fn maxSharedMem 79856\n")
    assert proc.returncode == 1, proc.stderr
    assert_top(data, "D10")


def test_a_malformed_shm_attach_is_cumem_host_not_a_full_dev_shm(explain_text):
    _, data = explain_text(
        "h:1:2 [0] misc/shmutils.cc:129 NCCL WARN Error while attaching to shared "
        "memory segment /dev/shm/nccl-\u00d7 (size 0), error: No such file or directory (2)\n")
    assert data["top"] == "M2", [(c["id"], c["score"]) for c in data["causes"]]


def test_a_well_formed_shm_attach_stays_dev_shm(explain_text):
    _, data = explain_text(
        "h:1:2 [0] misc/shmutils.cc:129 NCCL WARN Error while attaching to shared "
        "memory segment /dev/shm/nccl-glnlGK (size 14156128), error: No such file or directory (2)\n")
    assert data["top"] == "O1", [(c["id"], c["score"]) for c in data["causes"]]


def test_pidfd_open_missing_for_expandable_segments_is_m3(explain_text):
    """The message cut before it names expandable segments (as titles and excerpts cut it) still names M3."""
    proc, data = explain_text(
        "RuntimeError: The kernel on this machine does not support the pidfd_open "
        "syscall\n")
    assert proc.returncode == 1
    assert_top(data, "M3")
