"""When explain names a cause, and when the reporter's words say something failed.

- The verdict names the best cause once it outscores "none of these" (the unexplained score, 1.0, beside which the
  shares are computed), with the label its measured precision gives it; below that the verdict stays `unknown`.
  Until session 20 the floor was 1.5, and answers between the two were `unknown` with the right cause often first.
- prose.failure_symptoms: a timeout, a stall, NaN losses, a [Bug] tag, an insufficient resource, a wrong result,
  something not found or not released, said in the reporter's words, is a failure (each was `ok` before); a
  timeout being set, nccl-tests' `#wrong` column and "no wrong results" are not.
"""
import pytest

from envbuild.explain import rank


def test_the_naming_floor_is_the_unexplained_score():
    assert rank.MIN_CAUSE_SCORE == rank.UNEXPLAINED


BETWEEN = [  # failure lines whose own weights stay below 1.5 (the ranker adds its share)
    "Cuda failure 'invalid argument'\n",
    "RuntimeError: CUDA error: unknown error\n",
    "ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task\n",
]


def test_a_best_cause_above_the_floor_is_named_and_labelled_low(explain_text):
    between = 0
    for text in BETWEEN:
        proc, data = explain_text(text)
        top = data["causes"][0]
        assert proc.returncode == 1 and (data["verdict"] == "explained") == (top["score"] >= rank.UNEXPLAINED), text
        if rank.UNEXPLAINED <= top["score"] < 1.5:
            between += 1
            assert data["top"] == top["id"] and top["label"] == "low", (text, top)
    assert between >= 2, "the texts no longer exercise the band between 1.0 and the old floor 1.5: pick others"


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
    "Required library version not found: libbitsandbytes_cuda124_nocublaslt.so\n",
    "GPU memory is not released after training process is stopped\n",
    "Ray Train sets wrong interface on NCCL\n",
    "the loss goes to nan after 300 steps\n",
    "Prompt insufficient computing power on the 3090\n",
])
def test_the_reporters_words_for_a_failure_are_a_failure(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 1 and data["verdict"] != "ok", text


@pytest.mark.parametrize("text", [
    "NVIDIA GeForce RTX 4090 x8: no wrong results\n",
    "#  size  count  type  redop  root  time  algbw  busbw #wrong  time  algbw  busbw #wrong\n",
    "timeout: 1800\nNCCL_TIMEOUT=600\n",
    "we set timeout=3600 for the process group and the run finished\n",
    "step 20 loss 0.4121 grad_norm 1.02\ntraining done\n",
])
def test_a_healthy_twin_is_not_a_failure(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 0 and data["verdict"] == "ok", [(c["id"], c["score"]) for c in data["causes"]]
