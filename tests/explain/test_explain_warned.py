"""A failure a run printed only as a warning or info line: the cause is named, but never above "low".

A run that logs a failure at a warning level (a retried step's OOM logged by the trainer, c10d's connect retries)
says it went on from it; on unseen healthy runs such lines were named at medium and high (docs/explain-slice43-
and 44-before.md). The same text printed as an error, or a warning followed by an error, keeps its calibrated label.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envbuild.explain.scan import _soft

OOM = "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity; 75.10 GiB already allocated)"


def explain(tmp_path: Path, lines: list, *extra: str) -> subprocess.CompletedProcess:
    log = tmp_path / "run.log"
    log.write_text("\n".join(lines) + "\n")
    return subprocess.run([sys.executable, "-m", "envbuild", "explain", str(log), *extra],
                          capture_output=True, text=True, timeout=120)


def result(tmp_path: Path, lines: list) -> dict:
    proc = explain(tmp_path, lines, "--json", "-")
    assert proc.returncode == 1, proc.stderr
    return json.loads(proc.stdout)


def test_a_failure_logged_as_a_warning_is_named_at_low_and_says_why(tmp_path: Path) -> None:
    lines = [f"2024-05-01 10:00:00,000 - WARNING - trainer - step 3 failed: {OOM}",
             "2024-05-01 10:00:01,000 - INFO - trainer - retrying step 3 with micro batch 2"]
    data = result(tmp_path, lines)
    assert data["warned_only"] is True
    assert data["verdict"] == "explained" and data["causes"][0]["id"] == "U3"
    assert data["causes"][0]["label"] == "low"
    text = explain(tmp_path, lines).stdout
    assert "a guess, check it first: U3" in text
    assert "every failure it printed was a warning or info line" in text


def test_the_same_failure_as_an_error_keeps_its_label(tmp_path: Path) -> None:
    data = result(tmp_path, [f"torch.OutOfMemoryError: {OOM}"])
    assert data["warned_only"] is False
    assert data["causes"][0]["id"] == "U3" and data["causes"][0]["label"] == "high"
    assert "warning or info line" not in explain(tmp_path, [f"torch.OutOfMemoryError: {OOM}"]).stdout


def test_a_warning_then_the_error_it_became_is_no_warning(tmp_path: Path) -> None:
    data = result(tmp_path, [f"2024-05-01 10:00:00,000 - WARNING - trainer - step 3 failed: {OOM}",
                             f"torch.OutOfMemoryError: {OOM}"])
    # not held for being a warning; the healthy check may still hold two lines this short (0.503 against 0.5 since
    # session 27's retraining, whose new healthy logs catch out-of-memory errors)
    assert data["warned_only"] is False and data["causes"][0]["held"] != "warned"
    assert data["causes"][0]["label"] == "high" or data["causes"][0]["held"] == "looks_healthy"


def test_a_failure_in_two_files_one_loud_is_no_warning(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text(f"W0501 10:00:00.000000 123 trainer.py:88] step 3 failed: {OOM}\n")
    (tmp_path / "b.log").write_text(f"RuntimeError: {OOM}\n")
    proc = subprocess.run([sys.executable, "-m", "envbuild", "explain", str(tmp_path / "a.log"),
                           str(tmp_path / "b.log"), "--json", "-"], capture_output=True, text=True, timeout=120)
    data = json.loads(proc.stdout)
    assert data["warned_only"] is False and data["causes"][0]["label"] != "low"


def test_a_healthy_log_carries_no_warned_flag(tmp_path: Path) -> None:
    log = tmp_path / "ok.log"
    log.write_text("2024-05-01 10:00:00,000 - WARNING - trainer - TF32 is disabled\nstep 1 loss 2.31\n")
    proc = subprocess.run([sys.executable, "-m", "envbuild", "explain", str(log), "--json", "-"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert data["verdict"] == "ok" and data["warned_only"] is False


@pytest.mark.parametrize("line", [
    "[W socket.cpp:634] The server socket on [localhost]:29501 is not yet listening (errno: 111 - Connection refused).",
    "[rank0]:[W1206 19:39:31.179459790 ProcessGroupNCCL.cpp:1575] Warning: WARNING: destroy_process_group() was not called",
    "[I1206 20:20:39.787178616 TCPStoreLibUvBackend.cpp:1321] [c10d] uv_loop_close failed with:-16 errn:EBUSY",
    "W0501 10:00:00.000000 123 trainer.py:88] step 3 failed",
    "2026-12-06 20:20:15,728 - WARNING - train_lm - apex is not installed (ModuleNotFoundError: No module named 'apex')",
    "2026-12-06 19:39:41,903 WARNING trainer.eval: eval chunk of 262144 tokens still out of memory; halving",
    "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 123 closing signal SIGTERM",
    "WARNING 03-05 00:25:45 [scheduler.py:1234] Sequence group 0 is preempted by PreemptionMode.RECOMPUTE",
    "[2023-01-01 12:00:00,123] [WARNING] [stage3.py:1850:step] 4 pytorch allocator cache flushes since last step",
    "[INFO|trainer.py:2012] 2024-01-01 12:00:00,000 >> retrying after a failed save",
    "2024-01-01 12:00:00,12\tWARNING worker.py:1 -- A worker died or was killed while executing a task",
    "[1,0]<stdout>:[W socket.cpp:1] connect failed, retrying",
    "0: 2024-01-01 12:00:00 INFO worker died: CUDA error",
])
def test_lines_at_a_warning_or_info_level_are_soft(line: str) -> None:
    assert _soft(line)


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "[E1206 19:39:31.179459790 ProcessGroupNCCL.cpp:1575] Watchdog caught collective operation timeout",
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0",
    "2024-01-01 12:00:00.123 | ERROR    | mod:fn:12 - CUDA out of memory",
    # NCCL's WARN is its error level; its INFO lines carry failures' detail
    "vm:739:770 [0] include/alloc.h:112 NCCL WARN Cuda failure 999 'unknown error'",
    "localhost:11344:11344 [1] NCCL INFO ncclMaxSharedMem 82240 exceeds device/fn maxSharedMem 79856",
    '"WARN Connection closed by remote peer " and freeze',
    # torch's CUDA initialization warning means the run has no GPU
    "/opt/conda/lib/python3.8/site-packages/torch/cuda/__init__.py:52: UserWarning: CUDA initialization: "
    "Unexpected error from cudaGetDeviceCount()",
    # a harness echoing a program's output at its own level
    "2023-06-27 06:27:41.764[18188][DEBUG] lisa.env.node[0].cmd[384].stdout RuntimeError: CUDA error",
    "Error: WARNING something broke",
    "0: [rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970",
])
def test_lines_without_a_soft_level_are_not(line: str) -> None:
    assert not _soft(line)


def test_a_question_whether_a_message_matters_is_no_failure_title(tmp_path: Path) -> None:
    """nccl-fastsocket #4: the title asks what a plugin's WARN means; the run's retried connects then worked."""
    log = tmp_path / "q.log"
    log.write_text("\n".join([
        'What does "NCCL WARN Cannot get incoming CPU" mean?',
        "I see those warnings in the logs. Does that mean something specific or can it be safely ignored?",
        "n1:4024:4048 [0] net_fastsocket.cc:765 NCCL WARN Cannot get incoming CPU.",
        "n0:4300:4325 [0] net_fastsocket.cc:785 NCCL WARN Maximum retry reached for accept 3.",
        "n0:4300:4325 [0] NCCL INFO NET/FastSocket : Connected after 1000 retries.",
    ]) + "\n")
    proc = subprocess.run([sys.executable, "-m", "envbuild", "explain", str(log)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout
    assert "the run got past each failure it printed" in proc.stdout
    # the same log without the line that proves the retries worked still fails
    log.write_text("\n".join(log.read_text().splitlines()[:4]) + "\n")
    assert subprocess.run([sys.executable, "-m", "envbuild", "explain", str(log)], capture_output=True,
                          timeout=120).returncode == 1


def test_a_title_stating_the_failure_still_never_closes(tmp_path: Path) -> None:
    log = tmp_path / "t.log"
    log.write_text("NCCL WARN Cannot get incoming CPU and the job hangs\n"
                   "n0:4300:4325 [0] NCCL INFO NET/FastSocket : Connected after 1000 retries.\n")
    assert subprocess.run([sys.executable, "-m", "envbuild", "explain", str(log)], capture_output=True,
                          timeout=120).returncode == 1


@pytest.mark.parametrize("line", [
    # an issue template's headings
    "Error message or erroneous outcome",
    "Code snippet triggering the error",
    "Error logs:",
    # a warning that says what it prevents
    "huggingface/tokenizers: The current process just got forked, after parallelism has already been used. "
    "Disabling parallelism to avoid deadlocks...",
])
def test_lines_healthy_runs_and_templates_print_are_no_failure(tmp_path: Path, line: str) -> None:
    log = tmp_path / "h.log"
    log.write_text(line + "\n")
    proc = subprocess.run([sys.executable, "-m", "envbuild", "explain", str(log)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("line", [
    "test_daso (heat.optim.tests.test_dp_optimizer.TestDASO) ... [W socket.cpp:401] [c10d] The server socket cannot "
    "be initialized on [::]:29500 (errno: 97 - Address family not supported by protocol).",
    'What does "NCCL WARN Cannot get incoming CPU" mean?',
    "Is this warning harmful? ProcessGroupNCCL destroy warning at exit",
    "I see these warnings every step, can they be safely ignored?",
])
def test_markers_inside_the_line_and_questions_are_soft(line: str) -> None:
    assert _soft(line)


def test_a_stated_failure_is_no_question() -> None:
    assert not _soft("The job hangs after NCCL WARN Cannot get incoming CPU, what can I do?")


def test_a_report_titled_as_a_question_holds_its_answer_low(tmp_path: Path) -> None:
    """A report that asks whether a message matters quotes it; it does not say the run failed."""
    lines = ['What does "NCCL WARN Maximum retry reached for accept 3" mean?',
             "n0:4300:4325 [0] net_fastsocket.cc:785 NCCL WARN Maximum retry reached for accept 3.",
             "n0:4300:4325 [0] misc/socket.cc:538 NCCL WARN socketStartConnect: Connect to 10.0.0.2<35125> failed"]
    data = result(tmp_path, lines)
    assert data["warned_only"] is True and data["causes"][0]["label"] == "low"
    data = result(tmp_path, ["NCCL WARN Maximum retry reached and then the job hangs"] + lines[1:])
    assert data["warned_only"] is False


def test_a_dataloader_worker_killed_by_sigkill_is_one_process_killed_first(tmp_path: Path) -> None:
    """torch's DataLoader names the signal that ended a worker: `Killed` is SIGKILL (the host's OOM killer most
    often: open-mmlab/mmrotate #501), `Bus error` a /dev/shm too small."""
    data = result(tmp_path, ["RuntimeError: DataLoader worker (pid 1446) is killed by signal: Killed. "])
    assert data["causes"][0]["id"] == "U6"
    data = result(tmp_path, ["RuntimeError: DataLoader worker (pid 572) is killed by signal: Bus error. It is possible "
                             "that dataloader's workers are out of shared memory. Please try to raise your shared "
                             "memory limit."])
    assert data["causes"][0]["id"] == "O1"
