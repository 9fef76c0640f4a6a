"""What the explain tests share besides fixtures: the corpus folders and the assertions on an answer. A plain module
(imported by name from this folder), not conftest.py: `from conftest import` gets whichever conftest Python imported
last, which depends on which test folders a run collects."""
from pathlib import Path

CORPUS = Path(__file__).parent / "corpus"
FIXTURES = Path(__file__).parent / "fixtures"


def beyond_the_ranker(data) -> list:
    """The causes of an answer backed by more than the learned ranker's guess (a signature, a log fact, the node):
    the house rule "no cause from lines every healthy run prints" is about evidence; the ranker (origin "model")
    may still guess from the words around a failure, always labelled as its guess."""
    return [(c["id"], c["score"]) for c in data["causes"]
            if c["evidence"] or any(a["origin"] != "model" for a in c["adjustments"])]


def ranker_only(cause) -> bool:
    return not cause["evidence"] and all(a["origin"] == "model" for a in cause["adjustments"])


def assert_top(data, cause: str) -> None:
    """The answer is `explained` with `cause` first; a miss shows every cause with its score."""
    assert data["verdict"] == "explained" and data["top"] == cause, [(c["id"], c["score"]) for c in data["causes"]]


def fires(sid: str, line: str) -> bool:
    """Whether signature `sid` matches `line` as explain reads a log: its literal keys first, then its pattern."""
    from envbuild.knowledge.signatures import load_signatures

    sig = {s.id: s for s in load_signatures()}[sid]
    return bool(sig.holds_key(line) and sig.pattern.search(line))
