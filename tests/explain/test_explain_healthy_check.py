"""The learned healthy check (ranker.HealthyCheck) and the network lines of session 24's blind slices.

On each unseen set of healthy logs a few were read as failures, at medium or high, from a line no signature knew
to be harmless (docs/explain-slice43..49-before.md). The healthy check holds such an answer at "low" when the log's
words read like the corpus's healthy reports; it never changes the cause or the verdict, and a doctor, node or
recorded finding behind the cause lifts the hold. Beside it: a connection error that does not say whose (Python's
ConnectionResetError) is only a hint of the network between nodes, an HTTP client's is none, torch's warnings are
warnings also in months without a leading zero, and a C++ frame under a warning is no one's words for a failure.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from explain_helpers import fires

from envbuild.explain import explain, rank, ranker
from envbuild.explain.render import render
from envbuild.explain.scan import _soft

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)"
SCHEMA = Path(explain.__file__).with_name("schema.json")


def with_check(weights: dict, intercept: float = -3.0) -> ranker.Model:
    """The shipped model with a healthy check whose words are known, so the test does not depend on training."""
    return dataclasses.replace(ranker.load_model(), healthy=ranker.HealthyCheck(intercept, weights, 0.5))


def answer(tmp_path: Path, lines: list, model=None) -> dict:
    log = tmp_path / "run.log"
    log.write_text("\n".join(lines) + "\n")
    return explain.run(explain.ExplainOptions(paths=[str(log)], ranker=model))


def test_a_failing_log_that_reads_healthy_is_named_but_held_low(tmp_path: Path) -> None:
    data = answer(tmp_path, [OOM, "the zebra report from the nightly job"], with_check({"zebra": 6.0}))
    jsonschema.validate(data, json.loads(SCHEMA.read_text()))
    top = data["causes"][0]
    assert data["verdict"] == "explained" and top["id"] == "U3"
    assert top["label"] == "low" and top["held"] == "looks_healthy"
    assert data["looks_healthy"]["probability"] > 0.9 and data["looks_healthy"]["threshold"] == 0.5
    text = render(data)
    assert "a guess, check it first: U3" in text
    assert "reads like the reports of runs that went on" in text and "it may not have failed at all" in text


def test_the_same_failure_without_those_words_keeps_its_label(tmp_path: Path) -> None:
    data = answer(tmp_path, [OOM, "the nightly job"], with_check({"zebra": 6.0}))
    assert data["causes"][0]["label"] == "high" and data["causes"][0]["held"] is None
    assert data["looks_healthy"]["probability"] < 0.1
    assert "reads like the reports" not in render(data)


def test_a_model_without_the_check_holds_nothing(tmp_path: Path) -> None:
    data = answer(tmp_path, [OOM, "the zebra report"], dataclasses.replace(ranker.load_model(), healthy=None))
    assert data["looks_healthy"] is None and data["causes"][0]["label"] == "high"


def test_a_healthy_run_is_never_read_by_the_check(tmp_path: Path) -> None:
    data = answer(tmp_path, ["step 1 loss 2.31", "the zebra report"], with_check({"zebra": 6.0}))
    assert data["verdict"] == "ok" and data["looks_healthy"] is None and data["causes"] == []


def _cause(origin: str, delta: float) -> rank.RankedCause:
    """A cause backed by one adjustment of `origin` and no signature."""
    return rank.RankedCause("U3", "oom", 4.0, 0.9, [], [rank.Adjustment("U3", delta=delta, origin=origin)])


@pytest.mark.parametrize("origin,held", [("doctor", None), ("node", None), ("record", None), ("profile", "looks_healthy")])
def test_a_finding_from_outside_the_log_lifts_the_hold(origin: str, held) -> None:
    rc = _cause(origin, 4.0)
    assert explain.held_by(rc, warned=False, healthy=(0.8, 0.5)) == held
    assert explain.held_by(rc, warned=False, healthy=(0.3, 0.5)) is None
    assert explain.held_by(rc, warned=False, ignored=True) == (None if held is None else "ignored")


def test_why_a_label_is_held_names_one_reason_in_order() -> None:
    guessed = _cause("model", 1.0)
    assert explain.held_by(guessed, warned=True, healthy=(0.9, 0.5)) == "guessed"
    assert explain.held_by(_cause("log", 1.0), warned=True, ignored=True, healthy=(0.9, 0.5)) == "warned"
    assert explain.held_by(_cause("log", 1.0), warned=False, ignored=True, healthy=(0.9, 0.5)) == "ignored"
    assert explain.held_by(_cause("log", 1.0), warned=False, healthy=None) is None


def test_the_cli_writes_the_field_and_a_healthy_log_leaves_it_null(tmp_path: Path) -> None:
    log = tmp_path / "ok.log"
    log.write_text("step 1 loss 2.31\nstep 2 loss 2.10\n")
    proc = subprocess.run([sys.executable, "-m", "envbuild", "explain", str(log), "--json", "-"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and json.loads(proc.stdout)["looks_healthy"] is None
    log.write_text(OOM + "\n")
    proc = subprocess.run([sys.executable, "-m", "envbuild", "explain", str(log), "--json", "-"],
                          capture_output=True, text=True, timeout=120)
    data = json.loads(proc.stdout)
    assert proc.returncode == 1 and 0.0 <= data["looks_healthy"]["probability"] <= 1.0
    assert data["causes"][0]["held"] in (None, "looks_healthy")


# ---------------------------------------------------------------- network lines (slices 48-49, in-sample)

@pytest.mark.parametrize("line,sid", [
    ("ConnectionResetError: [Errno 104] Connection reset by peer", "net.connection_error"),
    ("ConnectionRefusedError: [Errno 111] Connection refused", "net.connection_error"),
    ("[rank1]: ConnectionResetError: [Errno 104] Connection reset by peer", "nccl.net_socket"),
    ("[W506 00:43:56.240378877 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=3): Connection reset by peer",
     "nccl.net_socket"),
    ("h:1:2 [0] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer 10.0.0.2<5122>", "nccl.net_socket"),
    ("RuntimeError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store "
     "by key '0', but store->get('0') got error: Connection reset by peer", "nccl.net_socket"),
])
def test_a_connection_error_counts_for_the_network_as_its_line_says_whose(line: str, sid: str) -> None:
    other = {"net.connection_error": "nccl.net_socket", "nccl.net_socket": "net.connection_error"}[sid]
    assert fires(sid, line) and not fires(other, line)


@pytest.mark.parametrize("line", [
    "Failed to establish a new connection:[Errno 111] connection refused",
    "requests.exceptions.ConnectionError: HTTPConnectionPool(host='localhost', port=8097): Max retries exceeded with "
    "url: /env/main (Caused by NewConnectionError('<urllib3.connection.HTTPConnection>: Failed to establish a new "
    "connection: [Errno 111] Connection refused'))",
])
def test_an_http_clients_connection_error_is_not_the_network_between_nodes(line: str) -> None:
    assert not fires("nccl.net_socket", line) and not fires("net.connection_error", line)


def test_a_bare_connection_error_alone_is_a_low_hint(tmp_path: Path) -> None:
    data = answer(tmp_path, ["ConnectionResetError: [Errno 104] Connection reset by peer"],
                  dataclasses.replace(ranker.load_model(), use=ranker.Use()))  # signatures alone
    assert data["causes"][0]["id"] == "U4" and data["causes"][0]["label"] == "low"


@pytest.mark.parametrize("line,soft", [
    ("[W506 00:43:56.240378877 TCPStore.cpp:125] [c10d] recvValue failed", True),  # torch: May 6, month unpadded
    ("[W1206 00:43:56.240378877 TCPStore.cpp:125] [c10d] recvValue failed", True),
    ("[W ... TCPStore.cpp:...] TCPStore.recvValue failed ... Connection reset by peer", True),  # as a reporter shortens it
    ("[E506 00:43:56.240378877 ProcessGroupNCCL.cpp:1800] [PG 0 Rank 1] Watchdog caught collective operation timeout",
     False),
    ("W506 is the name of a node that failed", False),
])
def test_torchs_warning_marker_is_read_in_every_month(line: str, soft: bool) -> None:
    assert _soft(line) is soft


def test_a_warning_with_its_cpp_stack_stays_a_warning(tmp_path: Path) -> None:
    lines = ["[W506 00:43:56.240378877 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=3, "
             "remote=[node0]:29500): Connection reset by peer",
             "Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:679 (most recent call first):",
             "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x80 (0x1468a2869c10 in libc10.so)",
             "frame #1: <unknown function> + 0x5ced701 (0x1468ae81e701 in libtorch_cpu.so)"]
    assert not fires("prose.failure", lines[2])
    data = answer(tmp_path, lines)
    assert data["warned_only"] is True
    assert data["causes"][0]["id"] == "U4" and data["causes"][0]["label"] == "low"
    assert data["causes"][0]["held"] == "warned"


# ---------------------------------------------------------------- exceptions Python reported and ignored

IGNORED_AT_EXIT = ["epoch 3 loss 1.2",
                   "Exception ignored in: <function NervanaGPU.__del__ at 0x7f1e2c3d4e50>",
                   "Traceback (most recent call last):",
                   '  File "/opt/neon/backends/nervanagpu.py", line 120, in __del__',
                   "    self.ctx.detach()",
                   "pycuda._driver.LogicError: context::detach failed: invalid device context"]


def test_an_exception_python_ignored_in_a_finalizer_is_held_low(tmp_path: Path) -> None:
    data = answer(tmp_path, IGNORED_AT_EXIT)
    assert data["verdict"] == "explained" and data["warned_only"] is True
    assert data["causes"][0]["label"] == "low" and data["causes"][0]["held"] == "warned"


def test_the_same_exception_raised_is_the_runs_failure(tmp_path: Path) -> None:
    raised = ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>', "    main()",
              IGNORED_AT_EXIT[-1]]
    data = answer(tmp_path, raised)
    assert data["warned_only"] is False and data["causes"][0]["label"] != "low"
    # an ignored one first does not soften the raised one after it
    data = answer(tmp_path, IGNORED_AT_EXIT + raised)
    assert data["warned_only"] is False and data["causes"][0]["label"] != "low"


def test_python2s_one_line_report_of_an_ignored_exception_is_soft(tmp_path: Path) -> None:
    report = ("Exception pycuda._driver.LogicError: 'context::detach failed' in <bound method "
              "NervanaGPU.__del__ of <neon.backends.nervanagpu.NervanaGPU object at 0x7f>> ignored")
    data = answer(tmp_path, ["epoch 3 loss 1.2", report])
    assert data["warned_only"] is True and data["causes"][0]["label"] == "low"
    data = answer(tmp_path, ["epoch 3 loss 1.2", "pycuda._driver.LogicError: context::detach failed: invalid device context"])
    assert data["warned_only"] is False


def test_an_ignored_report_whose_end_was_not_read_softens_only_the_lines_near_it(tmp_path: Path) -> None:
    from envbuild.explain.scan import IGNORED_SPAN

    unfinished = IGNORED_AT_EXIT[:2]  # the report's first line, its traceback cut off
    filler = [f"epoch {i} loss 1.0" for i in range(IGNORED_SPAN + 5)]
    no_check = dataclasses.replace(ranker.load_model(), healthy=None)  # its loss lines read healthy to the check
    data = answer(tmp_path, unfinished + filler + [IGNORED_AT_EXIT[-1]], no_check)
    assert data["warned_only"] is False and data["causes"][0]["label"] != "low"


def test_a_cause_named_only_by_a_line_python_ignored_is_held_low_beside_loud_prose(tmp_path: Path) -> None:
    """neon #99: the title and the reporter's words say it failed, but the one line that names a cause is Python 2's
    report of an exception it ignored in a finalizer at exit."""
    lines = ["image_caption.py: pycuda.driver.LogicError after multi-bleu",
             "After Epoch 9 and executing the multi-bleu perl script, it fails with an exception:",
             "> Exception pycuda._driver.LogicError: 'context::detach failed: invalid device context - cannot detach "
             "from invalid context' in <bound method NervanaGPU.__del__ of <neon.backends.nervanagpu.NervanaGPU>> ignored"]
    no_check = dataclasses.replace(ranker.load_model(), healthy=None)
    data = answer(tmp_path, lines, no_check)
    top = data["causes"][0]
    assert data["warned_only"] is False and top["id"] == "O4"
    assert top["label"] == "low" and top["held"] == "ignored"
    assert "the lines that name it are an exception the program went on past" in render(data)
    # the same line raised, not ignored: the label is the calibrated one
    data = answer(tmp_path, lines[:2] + ["pycuda._driver.LogicError: cuCtxCreate failed: invalid device context"], no_check)
    assert data["causes"][0]["id"] == "O4" and data["causes"][0]["held"] is None


def test_a_quoted_report_of_an_ignored_exception_opens_the_same_span(tmp_path: Path) -> None:
    """A reporter who quotes the report with `> ` quotes its traceback too: the exception line under it is still the
    one Python ignored, not the run's failure."""
    quoted = [IGNORED_AT_EXIT[0]] + ["> " + line for line in IGNORED_AT_EXIT[1:]]
    data = answer(tmp_path, quoted)
    assert data["causes"][0]["label"] == "low" and data["causes"][0]["held"] == "warned"
    raised = [IGNORED_AT_EXIT[0]] + ["> " + line for line in IGNORED_AT_EXIT[2:]]  # no report: raised
    data = answer(tmp_path, raised)
    assert data["warned_only"] is False and data["causes"][0]["label"] != "low"


def test_a_traceback_logged_under_a_record_that_says_it_falls_back_is_one_the_run_went_past(tmp_path: Path) -> None:
    """`logger.exception("...; rebuilding the loader with spawn")`: the traceback under the record, a DataLoader
    worker's own traceback after it, and the indented lines of its message are all the one handled exception."""
    handled = ["2026-12-07 06:05:00,546 ERROR data: DataLoader workers (fork) failed; rebuilding the loader with the "
               "spawn start method",
               "Traceback (most recent call last):",
               '  File "/opt/torch/lib/python3.12/site-packages/torch/_utils.py", line 785, in reraise',
               "RuntimeError: Caught RuntimeError in DataLoader worker process 0.",
               "Original Traceback (most recent call last):",
               '  File "/opt/torch/lib/python3.12/site-packages/torch/cuda/__init__.py", line 466, in _lazy_init',
               "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you "
               "must use the 'spawn' start method",
               "",
               "train: 64 steps, loss 2.3183 -> 2.2996, 5.7 s, 2 DataLoader workers (spawn)"]
    no_check = dataclasses.replace(ranker.load_model(), healthy=None)
    data = answer(tmp_path, handled, no_check)
    assert data["causes"][0]["label"] == "low", data["causes"][0]
    # the same traceback under a record that says nothing of going on is the run's failure
    data = answer(tmp_path, ["2026-12-07 06:05:00,546 ERROR data: DataLoader workers (fork) failed"] + handled[1:7],
                  no_check)
    assert data["causes"][0]["id"] == "O4" and data["causes"][0]["label"] != "low"
