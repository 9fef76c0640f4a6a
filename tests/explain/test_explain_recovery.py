"""Failures a run got past: a completion line after them in the same log (knowledge/signatures/endings.toml).

Healthy runs print failures they handle: a batch-size finder catches out-of-memory errors and halves its batch, a
rank retries its store connect until the master is up, an fp16 run skips overflowing steps. The third GPU slice's
healthy runs (gpu-s22-01..03) read as failures (U3 at high, U4 at medium) before this. A failure whose last line a
completion follows is recovered from; one printed after the last completion, in another log, on the log's first line
(a report's title), or of a kind the completion does not close still makes the log a failure. Training that goes on (a step with a finite loss) is a
completion too: the fourth GPU slice's healthy runs (gpu-s23-01..10) end in their own ways, and only one of the ten
was `ok` with run ends alone.
"""
import json

import jsonschema
import pytest

from envbuild.errors import InputFileError
from envbuild.explain.explain import new_scanner
from envbuild.knowledge.signatures import load_signature_file, load_signatures
from explain_helpers import CORPUS
from test_explain_cli import SCHEMA

# Each failure comes after a first line of the run's own: a report's first line is its title, never closed
OOM = ("torch 2.11.0+cu130 on NVIDIA H100 80GB HBM3\n"
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 GiB. GPU 0 has a total capacity of "
       "79.18 GiB of which 14.54 GiB is free.\n")
STORE = ("torch 2.11.0+cu130\n[E1206 17:21:00.045415329 socket.cpp:1028] [c10d] The client socket has timed out after 2000ms while trying "
         "to connect to (127.0.0.1, 41453).\n")
INIT = ("vm:536:536 [0] NCCL INFO ncclCommInitRankConfig comm 0x245c78c0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 "
        "commId 0x86a12c5bf7b34927 - Init COMPLETE\n")
STEPS = "".join(f"step {i} done\n" for i in range(5))  # no loss printed: not progress by itself


def _scan(*texts: str):
    scanner = new_scanner()
    for i, text in enumerate(texts):
        scanner.feed_source(f"{i}.log", [text.encode()])
    return scanner.result()


@pytest.mark.parametrize("end", [
    "training done\n",
    "Training completed. Do not forget to share your model on huggingface.co/models =)\n",
    "{'train_runtime': 160.7356, 'train_samples_per_second': 7.758, 'train_steps_per_second': 1.941, 'epoch': 3.0}\n",
    "`Trainer.fit` stopped: `max_epochs=20` reached.\n",
    "INFO:torch.distributed.elastic.agent.server.api:[default] worker group successfully finished. Waiting 300 "
    "seconds for other agents to finish.\n",
    "[INFO] [launch.py:351:main] Process 12345 exits successfully.\n",
])
def test_a_caught_oom_before_the_end_of_training_is_no_failure(explain_text, end):
    proc, data = explain_text(OOM * 3 + "batch 4096 fits\n" + STEPS + end)
    assert proc.returncode == 0 and data["verdict"] == "ok" and data["causes"] == []
    shown = {r["signature"]: r for r in data["recovered"]["shown"]}
    assert shown["cuda.oom"]["failure"]["line"] == 2 and shown["cuda.oom"]["last_line"] == 6
    jsonschema.validate(data, SCHEMA)


def test_without_the_end_the_same_oom_is_the_failure(explain_text):
    proc, data = explain_text(OOM * 3 + "batch 4096 fits\n" + STEPS)
    assert proc.returncode == 1 and data["top"] == "U3" and data["recovered"]["failures"] == 0


@pytest.mark.parametrize("text", [
    "training done\n" + OOM,  # printed after the end: what failed came later
    "Crash after training finished\n" + OOM,  # a title that names a completion names no recovery
    "completed training step 3\n" + OOM,  # a step, not the run's end
    OOM + "training finished with errors\n",
])
def test_a_failure_after_the_last_completion_still_counts(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 1 and data["verdict"] != "ok"


def test_a_failure_repeated_after_the_end_is_seen_again():
    # The scanner stops looking at byte-identical lines once they can only add counts; a completion must make it
    # look again, or the OOM after "training done" would pass as the one recovered from before it.
    scan = _scan(OOM * 40 + "training done\n" + OOM * 40)
    assert "cuda.oom" in scan.open_failures
    assert "cuda.oom" not in _scan(OOM * 40 + "training done\n").open_failures


def test_a_store_connect_retried_until_nccl_is_up_is_no_failure(explain_text):
    tries = (STORE + "Exception raised from throwTimeoutError at socket.cpp:1030 (most recent call first):\n"
             "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d\n" + "\n" * 20) * 3
    proc, data = explain_text(tries + INIT + "all_reduce ok 1.0\n")
    assert proc.returncode == 0 and data["verdict"] == "ok" and data["recovered"]["failures"] >= 1
    assert {r["completion_signature"] for r in data["recovered"]["shown"]} == {"nccl.comm_init_complete"}


def test_a_communicator_set_up_closes_only_the_connect_it_proves(explain_text):
    proc, data = explain_text(OOM + "\n" * 20 + INIT)  # NCCL's set-up says nothing of memory
    assert proc.returncode == 1 and data["top"] == "U3"
    proc, data = explain_text(STORE + INIT + "NCCL WARN NET/Socket : socket progress error: Connection reset by peer\n")
    assert proc.returncode == 1 and data["verdict"] == "explained"


def test_a_completion_in_another_log_does_not_close_a_failure():
    scan = _scan(OOM, "training done\n")
    assert "cuda.oom" in scan.open_failures and scan.recovered == 0
    assert not _scan(OOM + "training done\n", "training done\n").open_failures


def test_the_terminal_says_what_was_got_past(explain, tmp_path):
    log = tmp_path / "finder.log"
    log.write_text(OOM + STEPS + "training done\n")
    proc = explain(str(log))
    out = proc.stdout.decode()
    assert proc.returncode == 0
    assert "verdict: no failure left — the run got past each failure it printed" in out
    assert f"  - cuda.oom  [{log}:2]: torch.OutOfMemoryError: CUDA out of memory." in out
    assert f"then run.training_finished  [{log}:8]: training done" in out


@pytest.mark.parametrize("progress", [
    "step 30 loss 4.6022\n",
    "iter 6 mean reward -0.3867 loss 0.0050\n",
    "{'loss': 0.4123, 'grad_norm': 1.2, 'learning_rate': 2e-05, 'epoch': 0.5}\n",
    "Epoch 19: 100%|##########| 782/782 [00:05<00:00, 152.93it/s, val_loss=1.080, train_loss=0.452]\n",
    " iteration      100/  500000 | elapsed time per iteration (ms): 512.3 | lm loss: 7.123456E+00 |\n",
])
def test_training_that_goes_on_after_a_failure_got_past_it(explain_text, progress):
    proc, data = explain_text(OOM + "halving the batch\n" + progress)
    assert proc.returncode == 0 and data["verdict"] == "ok"
    assert {r["completion_signature"] for r in data["recovered"]["shown"]} == {"run.training_progress"}


@pytest.mark.parametrize("after", ["step 11 loss nan\n", "WARNING step 29: non-finite loss nan; batch skipped\n",
                                   "epoch 1 done: 40 steps\n", "step 5: loss spikes to 100%\n"])
def test_a_nan_loss_or_a_step_without_a_loss_is_no_progress(explain_text, after):
    proc, data = explain_text(OOM + after)
    assert proc.returncode == 1 and data["top"] == "U3"


def test_a_warning_that_something_can_hang_is_no_hang(explain_text):
    proc, data = explain_text("[rank0]:[W1206 19:39:31.554003320 ProcessGroupNCCL.cpp:5188] Guessing device ID based on "
                              "global rank. This can cause a hang if rank to GPU mapping is heterogeneous.\n")
    assert proc.returncode == 0 and data["verdict"] == "ok"
    proc, data = explain_text("the job hangs after step 3\n")
    assert proc.returncode == 1


@pytest.mark.parametrize("name", ["gpu-s22-01.log", "gpu-s22-02.log", "gpu-s22-03.log"])
def test_the_third_gpu_slices_healthy_runs_come_out_clean(explain, name):
    proc = explain(str(CORPUS / name), "--json", "-")
    data = json.loads(proc.stdout)
    assert proc.returncode == 0 and data["verdict"] == "ok" and data["recovered"]["failures"] >= 1


@pytest.mark.parametrize("body, words", [
    ('kind = "completion"\nsupports = { U3 = 1.0 }\n', "supports and rules out nothing"),
    ('kind = "failure"\ncloses = ["cuda.oom"]\n', "only a completion closes"),
])
def test_a_completion_entry_that_scores_or_a_failure_that_closes_is_refused(tmp_path, body, words):
    p = tmp_path / "bad.toml"
    p.write_text('[[signature]]\nid = "x.y"\npattern = "foo"\nkey = "foo"\nmeans = "m"\nsource = "s"\n'
                 'example = "foo"\n' + body)
    with pytest.raises(InputFileError) as exc:
        load_signature_file(p)
    assert words in str(exc.value) and f"{p}:1" in str(exc.value)


def test_a_completion_that_closes_no_failure_signature_is_refused(tmp_path):
    (tmp_path / "a.toml").write_text('[[signature]]\nid = "x.ctx"\npattern = "bar"\nkey = "bar"\nkind = "context"\n'
                                     'means = "m"\nsource = "s"\nexample = "bar"\n\n'
                                     '[[signature]]\nid = "x.end"\npattern = "foo"\nkey = "foo"\nkind = "completion"\n'
                                     'closes = ["x.ctx"]\nmeans = "m"\nsource = "s"\nexample = "foo"\n')
    with pytest.raises(InputFileError, match="closes 'x.ctx', which is no failure signature"):
        load_signatures(tmp_path)


def test_a_title_that_names_the_failure_is_not_undone_by_the_run_it_introduces(explain_text):
    # axolotl #592's report: the title says the run hung; the progress lines after it are the run before the hang
    title = "axolotl hanging during training on custom dataset (ran for 30 minutes before timing out)\n"
    progress = "{'loss': 1.0132, 'learning_rate': 0.000139, 'epoch': 0.94}\n"
    proc, data = explain_text(title + progress * 3)
    assert proc.returncode == 1 and data["verdict"] != "ok"
    proc, data = explain_text("starting\n" + title + progress)  # the same words inside a log are got past
    assert proc.returncode == 0 and data["verdict"] == "ok"
