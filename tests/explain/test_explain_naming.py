"""When explain names a cause, and when the reporter's words say something failed.

- The verdict names a failure's best cause from any positive score, with the label its measured precision gives
  it (a "low" answer is worded as a guess); it stays `unknown` only when nothing points at a cause, or when the best
  is a weak remainder of a cause the log argues against. The floor was 1.5 until session 20 and 1.0 until session
  21; answers under it were `unknown` with the right cause often first.
- prose.failure_symptoms: a timeout or a stall that happened, NaN losses, a [Bug] tag, an insufficient resource, a
  wrong result, memory not released, said in the reporter's words, is a failure (each was `ok` before); a timeout
  being set, nccl-tests' `#wrong` column, "no wrong results", zero counters and "not found" (healthy runs print it:
  tests/explain/fixtures/healthy-lines.txt) are not.
"""
import pytest

from envbuild.explain import rank
from envbuild.explain.explain import new_scanner
from explain_helpers import fires


def _scan(text: str):
    scanner = new_scanner()
    scanner.feed_source("x.log", [text.encode()])
    return scanner.result()


@pytest.mark.parametrize("score", [0.05, 0.5, 0.99, 1.0, 1.5])
def test_the_verdict_names_a_failures_best_cause_from_any_score(score):
    failed = _scan("RuntimeError: CUDA error: unknown error\n")  # a failure line, whatever its causes weigh
    assert rank.verdict(failed, [rank.RankedCause("U2", "", score, 0.0)]) == "explained"
    assert rank.verdict(failed, []) == "unknown"
    assert rank.verdict(_scan("step 20 loss 0.41\n"), [rank.RankedCause("U2", "", score, 0.0)]) == "ok"


@pytest.mark.parametrize("score, verdict", [(0.6, "unknown"), (0.99, "unknown"), (1.0, "explained")])
def test_a_weak_remainder_of_a_cause_the_log_argues_against_is_not_named(score, verdict):
    failed = _scan("RuntimeError: CUDA error: unknown error\n")
    cut = rank.RankedCause("D9", "", score, 0.0, adjustments=[rank.Adjustment("D9", factor=0.25, reason="not behind")])
    ruled = rank.RankedCause("D9", "", score, 0.0, ruled_out_by=["x.rules_out_d9"])
    assert rank.verdict(failed, [cut]) == verdict and rank.verdict(failed, [ruled]) == verdict


def test_a_weak_answer_is_worded_as_a_guess(explain_text, explain, tmp_path):
    proc, data = explain_text("the job fails\n")
    assert proc.returncode == 1 and data["verdict"] == "explained"
    top = data["causes"][0]
    assert top["label"] == "low" and top["score"] < rank.UNEXPLAINED
    text = explain(str(tmp_path / "x.log"))  # the same log, as the terminal shows it
    assert text.returncode == 1 and f"verdict: a guess, check it first: {top['id']} " in text.stdout.decode()


@pytest.mark.parametrize("text", [
    "ALLREDUCE timeout\n\nIt still timeout after 106 epochs.\n",
    "Timed out receiving the shared seed from the distributed store on Rank 2\n",
    "SFT chunked NLL stalls under ZeRO-3 with unequal rank chunk counts\n",
    "mxfp8 params without dp comm overlap will cause NaN\n",
    "[Bug] illegal memory access encountered\n",
    "GPU memory is not released after training process is stopped\n",
    "Ray Train sets wrong interface on NCCL\n",
    "the loss goes to nan after 300 steps\n",
    "Prompt insufficient computing power on the 3090\n",
])
def test_the_reporters_words_for_a_failure_are_a_failure(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 1 and data["verdict"] != "ok", text
    assert fires("prose.failure_symptoms", text.splitlines()[0]), text


@pytest.mark.parametrize("text", [
    "NVIDIA GeForce RTX 4090 x8: no wrong results\n",
    "#  size  count  type  redop  root  time  algbw  busbw #wrong  time  algbw  busbw #wrong\n",
    "timeout: 1800\nNCCL_TIMEOUT=600\n",
    "we set timeout=3600 for the process group and the run finished\n",
    "step 20 loss 0.4121 grad_norm 1.02\ntraining done\n",
    "Key: timeout, Value: 1800\n{'rank': 0, 'timeout': 900}\n",
    "num wrong: 0\ninsufficient memory warnings: 0\nTraining done, no NaN encountered\n",
    "Bug tracker: https://github.com/pytorch/pytorch/issues\nlibfoo.so not found, falling back to the Python path\n",
])
def test_a_healthy_twin_is_not_a_failure(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 0 and data["verdict"] == "ok", [(c["id"], c["score"]) for c in data["causes"]]
