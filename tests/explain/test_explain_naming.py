"""When explain names a cause, and when the reporter's words say something failed.

- The verdict names the best cause once it outscores "none of these" (the unexplained score, 1.0, beside which the
  shares are computed), with the label its measured precision gives it; below that the verdict stays `unknown`.
  Until session 20 the floor was 1.5, and answers between the two were `unknown` with the right cause often first.
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


@pytest.mark.parametrize("score, verdict", [(0.99, "unknown"), (1.0, "explained"), (1.4, "explained"),
                                            (1.5, "explained")])
def test_the_verdict_names_a_cause_from_the_unexplained_score_up(score, verdict):
    failed = _scan("RuntimeError: CUDA error: unknown error\n")  # a failure line, whatever its causes weigh
    assert rank.verdict(failed, [rank.RankedCause("U2", "", score, 0.0)]) == verdict
    assert rank.verdict(_scan("step 20 loss 0.41\n"), [rank.RankedCause("U2", "", score, 0.0)]) == "ok"


def test_a_failure_with_no_cause_above_the_floor_stays_unknown(explain_text):
    proc, data = explain_text("the job fails\n")
    assert proc.returncode == 1 and data["verdict"] == "unknown" and data["top"] is None
    assert all(c["score"] < rank.UNEXPLAINED for c in data["causes"])


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
