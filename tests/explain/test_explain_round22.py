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
