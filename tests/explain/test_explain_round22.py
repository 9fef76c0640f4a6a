"""Round 22 readings (session 22), written after the fourth GPU slice and slice 41 were first scored.

- An out-of-memory error the reporter says would happen under another setting ("because if I do not do that, it
  will reply an error 'CUDA out of memory'": kenziyuliu/MS-G3D #9, an amp run that went on) is not this run's
  failure; it read U3 at high.
- A Python warning line (`UserWarning: ...`) is not the reporter's word for a failure, even when its text says
  "Failure to do this will result in ..." (PyTorch's lr_scheduler order warning; a healthy GPU run read U4).
"""
import pytest

from explain_helpers import fires


@pytest.mark.parametrize("line, sid, expected", [
    ("I set '--amp_opt_level 2 --half', because if I do not do that, it will reply an error ' CUDA out of memory'",
     "cuda.oom", False),
    ("otherwise it would stop with CUDA out of memory", "cuda.oom", False),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "cuda.oom", True),
    ("if I do not lower the batch: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", "cuda.oom", True),
    ("train.py:22: UserWarning: Detected call of `lr_scheduler.step()` before `optimizer.step()`.  Failure to do this "
     "will result in PyTorch skipping the first value of the learning rate schedule.", "prose.failure", False),
    ("train.py:22: FutureWarning: this loader is incompatible with the new format", "prose.failure_words", False),
    ("the loader fails on the new format", "prose.failure", True),
])
def test_what_did_not_happen_in_this_run_is_no_failure(line, sid, expected):
    assert fires(sid, line) is expected


@pytest.mark.parametrize("line, expected", [
    ("RuntimeError: reward worker pid 1570 exited with code -9 (0 of 0 respawns used)", True),
    ("<Process name='reward-0' pid=12 parent=1 stopped exitcode=-SIGKILL>", True),
    ("exited with code -90", False),
])
def test_a_child_killed_by_sigkill_as_multiprocessing_reports_it(line, expected):
    # slice 42's reward helper SIGKILLed from outside read U4 at low: the program printed Process.exitcode
    assert fires("torch.sigkill", line) is expected


@pytest.mark.parametrize("sid, line, expected", [
    # torch's store shutting down at a clean exit, logged at glog INFO level (slice 43's DDP join run read U4 medium)
    ("torch.store_timeout", "[I1206 20:20:39.284174764 TCPStoreLibUvBackend.cpp:130] [c10d - debug] Remote peer closed "
     "the connection.", False),
    ("prose.failure", "[I1206 20:20:39.786717224 TCPStoreLibUvBackend.cpp:1321] [c10d] uv_loop_close failed with:-16 "
     "errn:EBUSY desc:resource busy or locked", False),
    ("torch.store_timeout", "[E1206 17:21:02.705037722 TCPStore.cpp:328] [c10d] TCP client failed to connect/validate to "
     "host 127.0.0.1:41453 - timed out (try=1, timeout=2000ms)", True),
    # c10d's retry notice while the store's server comes up (slice 44's pytorch #71864 read U4 medium)
    ("nccl.net_socket", "[W socket.cpp:634] The server socket on [localhost]:29501 is not yet listening (errno: 111 - "
     "Connection refused).", False),
    ("nccl.net_socket", "socketStartConnect: Connect to 10.0.0.2<43211> failed : Connection refused", True),
    # a tqdm bar with a loss, and a saved model: the run went on (slice 43's optional-kernels run read U5 high)
    ("run.training_progress", "train:   3%|#         | 1/30 [00:00<12s, 2.27it/s, loss=10.541]", True),
    ("run.training_progress", "train:   3%|#         | 1/30 [00:00<12s, 2.27it/s, loss=nan]", False),
    ("run.model_saved", "Saved model to out/tiny-lm (90.7M parameters)", True),
    ("run.model_saved", "[INFO] successfully saved checkpoint from iteration 30 to ckpt", True),
])
def test_round22_readings_of_slices_43_and_44(sid, line, expected):
    assert fires(sid, line) is expected
