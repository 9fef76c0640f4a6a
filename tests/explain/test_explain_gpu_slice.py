"""Readings from the GPU slice (held-out slice 32, docs/gpu-runs/s20-explain-logs.sh), written after its untouched
score: each on the run's own log and on a second text, with a twin that must not fire.

- torch's OOM message lists every process on the GPU: another process holding several times what the failing one
  holds is memory taken before the run asked for it (D7 first, U3 halved);
- torch 2.11's "unable to allocate shared memory(shm)" from DataLoader workers is a full /dev/shm (O1);
- gloo's "Unable to find address for: <name>" is GLOO_SOCKET_IFNAME naming no interface (U4);
- torchrun failing to end a worker with SIGTERM ("Unable to shutdown process N via 15") is a rank that hung or
  stopped first (U6);
- TORCH_DISTRIBUTED_DEBUG=DETAIL's "Running collective: CollectiveFingerPrint(...)" at INFO is what every collective
  of a healthy run prints: no desync (it was U1 "high" on a healthy run).
"""
import pytest

from explain_helpers import CORPUS, assert_top, fires


def _corpus(name: str) -> str:
    return (CORPUS / name).read_text(encoding="utf-8")


OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.72 "
       "GiB of which 1.02 GiB is free. Process 4242 has {other} memory in use. Including non-PyTorch memory, this "
       "process has {own} memory in use. Of the allocated memory 2.1 GiB is allocated by PyTorch\n")


@pytest.mark.parametrize("text", [_corpus("gpu-s20-12.log"), OOM.format(other="120.10 GiB", own="15.20 GiB")])
def test_memory_held_by_another_process_is_d7(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 1
    assert_top(data, "D7")
    assert "U3" in [c["id"] for c in data["causes"]]  # still listed: the run may also need more than was left


@pytest.mark.parametrize("capacity, other, own", [("15.81 GiB", "456.00 MiB", "14.33 GiB"),
                                                  ("91.02 GiB", "30.00 GiB", "60.00 GiB"),
                                                  ("7.52 GiB", "6.00 GiB", "0.50 GiB")])
def test_an_oom_where_this_process_holds_the_memory_stays_u3(explain_text, capacity, other, own):
    # the capacity is what the processes hold plus the 1.02 GiB free, as in a real message: a capacity far above
    # that would say processes the message does not list (another container's) hold the rest
    _, data = explain_text(OOM.format(other=other, own=own).replace("139.72 GiB", capacity))
    assert_top(data, "U3")


@pytest.mark.parametrize("text", [
    _corpus("gpu-s20-10.log"),
    "RuntimeError: unable to allocate shared memory(shm) for file </torch_1234_567_0>: "
    "Resource temporarily unavailable (11)\n",
])
def test_a_shared_memory_segment_that_cannot_be_allocated_is_o1(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 1
    assert_top(data, "O1")


@pytest.mark.parametrize("text", [
    _corpus("gpu-s20-13.log"),
    "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:84] ifa != nullptr. "
    "Unable to find address for: ib0\n",
])
def test_gloo_finding_no_interface_is_u4(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 1
    assert_top(data, "U4")


def test_the_detail_wrapper_printing_a_fingerprint_is_healthy(explain_text):
    proc, data = explain_text(_corpus("gpu-s20-02.log"))
    assert proc.returncode == 0 and data["verdict"] == "ok", [(c["id"], c["score"]) for c in data["causes"]]
    line = ("[rank0]:[I1206 13:19:09.902617636 ProcessGroupWrapper.cpp:620] [Rank 0] Running collective: "
            "CollectiveFingerPrint(SequenceNumber=7, OpType=BROADCAST, TensorShape=[4], TensorDtypes=Long)")
    assert not fires("torch.collective_mismatch", line)
    assert fires("torch.collective_mismatch", "Detected mismatch between collectives on ranks. Rank 0 is running "
                 "collective: CollectiveFingerPrint(SequenceNumber=10, OpType=ALLREDUCE), but Rank 1 is running "
                 "collective: CollectiveFingerPrint(SequenceNumber=10, OpType=BROADCAST).")


@pytest.mark.parametrize("text", [
    _corpus("gpu-s20-14.log"),
    "[rank0]: RuntimeError: Timed out waiting 1800000ms for recv operation to complete\n"
    "W0101 torch/distributed/elastic/multiprocessing/api.py:1031] Unable to shutdown process 4411 via 15, "
    "forcefully exiting via 9\n",
])
def test_a_worker_that_outlives_sigterm_is_u6(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 1
    assert_top(data, "U6")


def test_a_worker_that_ends_on_sigterm_is_no_u6(explain_text):
    _, data = explain_text("[rank0]: RuntimeError: Timed out waiting 1800000ms for recv operation to complete\n"
                           "W0101 torch/distributed/elastic/multiprocessing/api.py:1012] Sending process 4411 closing "
                           "signal SIGTERM\n")
    assert "U6" not in [c["id"] for c in data["causes"]]


@pytest.mark.parametrize("text", [
    # a colocated rollout engine's share is the run's own memory
    "vllm 0.8.5\n" + OOM.format(other="60.00 GiB", own="10.00 GiB"),
    # two other processes: a shared GPU, not one holder
    OOM.format(other="60.00 GiB", own="10.00 GiB").replace(
        "Including", "Process 77 has 20.00 GiB memory in use. Including"),
])
def test_memory_elsewhere_only_with_one_holder_and_no_engine(explain_text, text):
    _, data = explain_text(text)
    assert_top(data, "U3")
