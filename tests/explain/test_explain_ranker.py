"""The learned fallback ranker (envbuild/explain/ranker.py): shipped weights that match the corpus they were
trained on, a guess only where signatures name nothing, never "high", never on a healthy run, and in the output
as an adjustment of origin "model" that says it is the ranker's."""
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from explain_helpers import ranker_only

from envbuild.explain import ranker

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"


@pytest.fixture(scope="module")
def trainer():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("train_ranker", BENCH / "train_ranker.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_shipped_model_was_trained_on_the_current_corpus(trainer):
    """A log added or relabelled in a trained collection, or a changed tokenizer, needs
    `python benchmarks/train_ranker.py` (the benchmark retrains its LORO folds itself, so only this file lags)."""
    model = ranker.load_model()
    assert model is not None and model.use.weight > 0
    entries = trainer.training_entries()
    assert model.trained_on["corpus_sha256"] == trainer.corpus_hash(entries)
    assert model.trained_on["logs"] == len(entries)
    # Only collections named for training: a blind slice added later is never learned from.
    assert set(model.trained_on["collections"]) == set(trainer.TRAIN_COLLECTIONS)
    # A numbered blind slice is learned from only once its untouched score is on record (docs/explain-slice<N>-before.md).
    scored = " ".join(p.read_text() for p in (REPO / "docs").glob("explain-slice*-before.md"))
    assert all(f'"{c}"' in scored or f"`{c}`" in scored for c in trainer.TRAIN_COLLECTIONS if re.search(r"-s\d+$", c))
    # 320 KiB since the healthy check joined the file (session 24); it is read only once a log shows a failure
    assert Path(ranker.MODEL_FILE).stat().st_size < 320 * 1024


def test_the_shipped_healthy_check_was_trained_on_the_current_corpus(trainer):
    """The healthy check learns from the same collections, healthy logs included; what it learned points the way
    the corpus does (a warning reads healthy, an error does not) and no word of one project alone is in it."""
    model = ranker.load_model()
    healthy = trainer.healthy_training_entries()
    assert model.healthy is not None and model.healthy.threshold == trainer.HEALTHY_AT
    assert model.trained_on["healthy_sha256"] == trainer.corpus_hash(healthy)
    assert model.trained_on["healthy_logs"] == len(healthy) > len(trainer.training_entries())
    assert model.healthy.weights["warning"] > 0 > model.healthy.weights["error"]
    assert not any(f.startswith("sig:") for f in model.healthy.weights)
    assert trainer.project("envbuild/gpu-s24") == trainer.project("envbuild/h200-s6") == "envbuild"
    assert trainer.project("NVIDIA/nccl") == "NVIDIA/nccl"


def test_features_skip_nccl_info_and_long_numbers():
    out = set()
    ranker.text_features("h:1:1 [0] NCCL INFO Channel 00/0 via P2P/CUMEM\nRuntimeError: Xid 79 at pid 1234567\n", out)
    assert "runtimeerror" in out and "79" in out and "xid 79" in out
    assert "1234567" not in out and "channel" not in out


def test_a_failure_no_signature_names_gets_the_rankers_guess(explain_text):
    proc, data = explain_text("Segmentation fault (core dumped) in libnccl.so.2 after pip install nvidia-nccl-cu12 "
                              "while torch bundles another NCCL\n")
    assert proc.returncode == 1
    guessed = [c for c in data["causes"] if ranker_only(c)]
    assert guessed, data["causes"]
    for c in guessed:
        assert c["label"] != "high"
        assert all(a["origin"] == "model" and a["reason"].startswith("learned ranker: p=") for a in c["adjustments"])


def test_the_ranker_stays_out_where_a_signature_names_the_cause(explain_text):
    _, data = explain_text("RuntimeError: CUDA error: an illegal memory access was encountered\n"
                           "the job hangs over PCIe and the vllm worker died\n")
    assert not any(a["origin"] == "model" for c in data["causes"] for a in c["adjustments"])


def test_a_healthy_run_never_reaches_the_ranker(explain_text):
    # words the ranker weighs (PCIe, vllm, a GeForce) beside no failure: the ranker never runs
    proc, data = explain_text("torch 2.8.0+cu128\nvllm 0.10.2\n2x NVIDIA GeForce RTX 4090 over PCIe\n"
                              "h:1:1 [0] NCCL INFO Init COMPLETE\nstep 100 loss 1.23\n")
    assert proc.returncode == 0 and data["verdict"] == "ok" and data["causes"] == []


def test_model_round_trips_and_refuses_another_tokenizer():
    model = ranker.load_model()
    d = model.to_dict()
    again = ranker.Model.from_dict(d)
    feats = {"runtimeerror", "sig:py.code_error", "hang"}
    assert again.probabilities(feats) == pytest.approx(model.probabilities(feats), abs=1e-3)
    words = {"warning", "error", "loss"}
    assert again.healthy.probability(words) == pytest.approx(model.healthy.probability(words), abs=1e-3)
    with pytest.raises(ValueError):
        ranker.Model.from_dict({**d, "tokenizer": ranker.TOKENIZER + 1})
