"""Readings from held-out slices 34 and 35, written after their untouched scores (docs/explain-slice34-before.md,
docs/explain-slice35-before.md); each with a twin that must not change.

- Python's resource tracker (multiprocessing's, or joblib loky's) printing a KeyError traceback while it unregisters
  a shared-memory name is a known bookkeeping error beside runs that finish: it is no evidence of a code bug (U2 was
  "medium" on vllm #5468, a healthy run).
- A zero error counter ("errors: 0", gpu_burn's progress line) is not a failure.
- Error 500 "named symbol not found" while CUDA initialises (cudaGetDeviceCount, cuInit) is the container's user-mode
  driver missing a piece of the host's (WSL2 driver 555+ without libnvdxgdmal.so.1): C1, not the missing NCCL kernel
  image that the same words mean when NCCL launches (D10).
"""
import pytest

from explain_helpers import CORPUS, assert_top, fires

TRACKER = ('Traceback (most recent call last):\n'
           '  File "/usr/lib/python3.10/multiprocessing/resource_tracker.py", line 209, in main\n'
           '    cache[rtype].remove(name)\n'
           "KeyError: '/psm_10b3d52e'\n")
USER_KEYERROR = ('Traceback (most recent call last):\n'
                 '  File "/work/train.py", line 88, in collate\n'
                 '    batch["input_ids"] = [s[key] for s in samples]\n'
                 "KeyError: 'input_ids'\n")


@pytest.mark.parametrize("text", [TRACKER, TRACKER.replace("multiprocessing/", "joblib/externals/loky/backend/")])
def test_the_resource_trackers_keyerror_is_no_code_bug(explain_text, text):
    proc, data = explain_text(text * 3)
    assert data["verdict"] != "explained" or data["top"] != "U2", [(c["id"], c["score"]) for c in data["causes"]]
    assert all(c["label"] == "low" for c in data["causes"][:1])


def test_the_healthy_vllm_run_with_the_tracker_noise_names_nothing_above_low(explain_text):
    proc, data = explain_text((CORPUS / "vllm-5468.log").read_text(encoding="utf-8"))
    assert data["verdict"] != "explained" or data["causes"][0]["label"] == "low", data["causes"][:2]


def test_a_keyerror_in_the_users_code_is_still_u2(explain_text):
    proc, data = explain_text(USER_KEYERROR)
    assert_top(data, "U2")


@pytest.mark.parametrize("line, failure", [
    ("50.0%  proc'd: 636 (2085 Gflop/s)   errors: 0   temps: 64 C", False),
    ("errors = 0, warnings = 2", False),
    ("100.0%  proc'd: 1908 (2273 Gflop/s)   errors: 12 (WARNING!)  temps: 66 C", True),
])
def test_a_zero_error_counter_is_no_failure(line, failure):
    assert fires("prose.failure", line) is failure


INIT_500 = ("/opt/conda/lib/python3.10/site-packages/torch/cuda/__init__.py:118: UserWarning: CUDA initialization: "
            "Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
            "NumCudaDevices() that might have already set an error? Error 500: named symbol not found\n")


@pytest.mark.parametrize("text", [INIT_500, "failed call to cuInit: CUDA_ERROR_NOT_FOUND: named symbol not found\n",
                                  "ggml_cuda_init: failed to initialize CUDA: named symbol not found\n" + INIT_500])
def test_named_symbol_at_cuda_initialisation_is_the_user_mode_driver(explain_text, text):
    proc, data = explain_text(text)
    assert_top(data, "C1")
    assert "D10" not in [c["id"] for c in data["causes"][:1]]


def test_named_symbol_from_an_nccl_launch_is_still_d10(explain_text):
    proc, data = explain_text("enqueue.cc:42 NCCL WARN Cuda failure 'named symbol not found'\n"
                              "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error\n")
    assert_top(data, "D10")
    assert not fires("cuda.init_symbol_not_found", "enqueue.cc:42 NCCL WARN Cuda failure 'named symbol not found'")


def test_an_uncaught_cpp_exception_with_invalid_device_ids_is_c11(explain_text):
    proc, data = explain_text("terminate called after throwing an instance of 'std::runtime_error'\n"
                              "  what():  Invalid device ids\n")
    assert proc.returncode == 1
    assert_top(data, "C11")
    assert fires("cpp.terminate", "terminate called after throwing an instance of 'c10::Error'")
    assert not fires("cuda.invalid_device_ids", "CUDA error: invalid device ordinal")


@pytest.mark.parametrize("line, oom", [
    ("When I use vllm 0.8.0, it will prompt that there is not enough memory, and the program will exit.", True),
    ("insufficient GPU memory to load the model", True),
    ("There is enough GPU memory for the KV cache on every rank", False),
    ("Memory profiling takes 5.1 seconds, not enough samples yet", False),
    ("insufficient memory warnings: 0", False),
])
def test_not_enough_memory_in_the_reporters_words_is_oom(line, oom):
    assert fires("prose.oom", line) is oom


def test_the_runtimes_out_of_memory_code_is_no_proof_of_a_full_gpu(explain_text):
    """cudaErrorMemoryAllocation on the first one-element tensor was `ulimit -v` (gpu-s21-06, made on purpose):
    U3 may lead, but no longer at "high"; the caching allocator's own message still names U3."""
    proc, data = explain_text((CORPUS / "gpu-s21-06.log").read_text(encoding="utf-8"))
    assert data["causes"][0]["label"] != "high" and "O2" in [c["id"] for c in data["causes"][:3]]
    proc, data = explain_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
                              "total capacity of 79.11 GiB of which 1.06 GiB is free.\n")
    assert_top(data, "U3")
    assert data["causes"][0]["named"]


@pytest.mark.parametrize("log", ["gpu-s21-08.log", "h200-s6-17.log"])
def test_a_sigkilled_worker_is_a_process_killed_first(explain_text, log):
    """torchrun's 'exitcode: -9' with the surviving rank's 'Connection reset by peer' after it: U6 (a rank SIGKILLed
    on purpose, docs/gpu-runs), not the network (U4) nor GPU memory (U3)."""
    proc, data = explain_text((CORPUS / log).read_text(encoding="utf-8"))
    assert_top(data, "U6")


def test_a_worker_ended_by_sigterm_is_not_read_as_sigkill():
    assert not fires("torch.sigkill", "failed (exitcode: -15) local_rank: 0 (pid: 4327) of binary: /usr/bin/python3")


@pytest.mark.parametrize("line, killed", [
    ("[launch.py:315:sigkill_handler] Killing subprocess 4023 ... exits with return code = -9", True),
    ("command terminated with exit code 137", True),
    ("Process 4023 exits with return code = 1", False),
    ("exit status 1370", False),
])
def test_other_launchers_reports_of_a_sigkill(line, killed):
    assert fires("torch.sigkill", line) is killed
