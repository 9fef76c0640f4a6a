"""A learned fallback ranker: a linear text classifier over what the reporter pasted, scored in pure Python.

Why: hand-written signatures name a cause only when a line matches one of them, and five rounds of them moved
the texts they were written from but not the next blind slice. A linear model over the words and word pairs of
the log (and over which signatures fired) generalises differently: it weighs the vocabulary of a whole class of
reports ("hang", "PCIe", "vllm 0.6", "watchdog") learned from every labelled thread at once. It only *adds* to
causes once the log shows a failure (a healthy run never reaches it), its contribution is an adjustment of origin
"model" that goes through the same calibration as everything else, and it never counts as evidence that names a
cause by itself (so it cannot make an answer "high" alone).

The weights are trained by benchmarks/train_ranker.py (scikit-learn's logistic regression, a benchmark-time
dependency only) and shipped as JSON (envbuild/knowledge/ranker.json): the vocabulary, one intercept per cause and,
per feature, its non-negligible weights. Scoring is a sum of weights and a softmax: no import beyond the stdlib.
How strongly it is used (`use.weight`, `use.p_min`) was chosen from the leave-one-repository-out numbers, with the
model retrained without each held-out repository (benchmarks/bench_explain.py), never from the shipped model
scoring its own training logs.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from envbuild.explain.rank import Adjustment, counted_hits, failing
from envbuild.explain.scan import ScanResult

MODEL_FILE = Path(__file__).resolve().parent.parent / "knowledge" / "ranker.json"
FORMAT = "envbuild.explain.ranker"
TOKENIZER = 2  # bump when features() changes: a model trained on other features must be retrained
MAX_TOKEN = 40  # longer runs of letters are hashes, base64 or paths glued together: not words
SHOWN_FEATURES = 3  # the strongest features named in an adjustment's reason

_WORD = re.compile(r"[a-z0-9_]+(?:[.\-][a-z0-9_]+)*|[\u3400-\u9fff]")
_HEXISH = re.compile(r"^(?:0x)?[0-9a-f]*\d[0-9a-f]*$")


def _keep(tok: str) -> bool:
    """A token worth a feature: not a long number (pids, times, addresses), not a hex id, not a glued blob.
    Short numbers stay: CUDA error 999, Xid 79, `cu128`, version parts such as 2.27."""
    if len(tok) > MAX_TOKEN:
        return False
    if tok.isdigit():
        return len(tok) <= 4
    if "." not in tok and "-" not in tok and len(tok) > 6 and _HEXISH.match(tok):
        return False
    return True


def line_tokens(line: str) -> List[str]:
    return [t for t in _WORD.findall(line.lower()) if _keep(t)]


def text_features(text: str, out: Set[str]) -> None:
    """Words and adjacent word pairs of each line (pairs never cross a line: two lines are two statements).
    NCCL's INFO lines are skipped: every healthy NCCL run prints them, so a cause must not be learned from their
    words (the house rule for signatures, tests/explain/fixtures/healthy-lines.txt); the signatures read them."""
    for line in text.splitlines():
        if " NCCL INFO " in line:
            continue
        toks = line_tokens(line)
        out.update(toks)
        out.update(f"{a} {b}" for a, b in zip(toks, toks[1:]))


def features(scan: ScanResult) -> Set[str]:
    """What the model reads: the start of the input (scan.head, 64 KiB), the lines signatures fired on anywhere in
    it (a 1 GiB log's failure lies past its head), the signatures that fired (`sig:` id) and which facts were
    stated (`fact:` id; the framework by name)."""
    out: Set[str] = set()
    text_features(scan.head, out)
    hits = counted_hits(scan)
    for sid, hit in hits.items():
        out.add(f"sig:{sid}")
        for loc in hit.locations:
            text_features(loc.text, out)
    for fid, values in scan.facts.items():
        out.add(f"fact:{fid}")
        if fid == "framework":
            out.update(f"fact:framework={v.lower()}" for v in values)
    return out


@dataclass
class Use:
    weight: float = 0.0  # an adjustment's delta is weight * p (0: the model is not used)
    p_min: float = 1.0  # causes the model gives less than this get nothing
    top: int = 2  # at most this many causes get an adjustment
    gate: float = 1e9  # not used when the signatures already give one cause at least this score (they name it)


@dataclass
class HealthyCheck:
    """The model's second head: how likely a log the signatures read as failing is a run that went on (its scary
    lines were warnings, retries, a handled error), learned from the corpus's healthy logs against its failures.

    Why: on every unseen set of healthy logs, a few had a line that some signature reads as a failure and nothing
    after it that closes it; each was mended by a signature once read, and the next set had others. A linear model
    over the words of healthy reports ("warning", "can be ignored", a results table, a question) catches part of
    that class without a signature per message. It never changes which cause is named or the verdict: from
    `threshold` on, the answer's label is held at "low" (explain.held_by). Its features leave out which signatures
    fired (`sig:`): those were amended after each healthy log was read, so on the corpus they say what was tuned,
    not what an unseen healthy log shows."""

    intercept: float
    weights: Dict[str, float]
    threshold: float

    def probability(self, feats: Iterable[str]) -> float:
        z = self.intercept + sum(self.weights.get(f, 0.0) for f in feats)
        return 1.0 / (1.0 + math.exp(-max(min(z, 30.0), -30.0)))

    def to_dict(self) -> Dict[str, object]:
        return {"intercept": round(self.intercept, 4), "threshold": self.threshold,
                "weights": {f: round(x, 4) for f, x in sorted(self.weights.items())}}

    @classmethod
    def from_dict(cls, d: Dict[str, object]) -> "HealthyCheck":
        return cls(float(d["intercept"]), {f: float(x) for f, x in d["weights"].items()},  # type: ignore[union-attr,arg-type]
                   float(d["threshold"]))  # type: ignore[arg-type]


def text_only(feats: Iterable[str]) -> Set[str]:
    """The features that come from the log's words and stated facts, not from which signatures fired."""
    return {f for f in feats if not f.startswith("sig:")}


@dataclass
class Model:
    classes: List[str]
    intercept: List[float]
    weights: Dict[str, List[Tuple[int, float]]]  # feature -> [(class index, weight)], small weights pruned
    use: Use = field(default_factory=Use)
    trained_on: Dict[str, object] = field(default_factory=dict)
    healthy: Optional[HealthyCheck] = None  # absent from a file trained before the head existed

    @classmethod
    def from_dict(cls, d: Dict[str, object]) -> "Model":
        if d.get("format") != FORMAT or d.get("tokenizer") != TOKENIZER:
            raise ValueError(f"not a {FORMAT} model for tokenizer {TOKENIZER}")
        w = {f: [(int(i), float(x)) for i, x in pairs] for f, pairs in d["weights"].items()}  # type: ignore[union-attr]
        healthy = HealthyCheck.from_dict(d["healthy"]) if d.get("healthy") else None  # type: ignore[arg-type]
        return cls(list(d["classes"]), [float(x) for x in d["intercept"]], w,  # type: ignore[arg-type]
                   Use(**d.get("use", {})), dict(d.get("trained_on", {})), healthy)  # type: ignore[arg-type]

    def to_dict(self) -> Dict[str, object]:
        return {"format": FORMAT, "tokenizer": TOKENIZER, "classes": self.classes,
                "intercept": [round(x, 4) for x in self.intercept],
                "use": {"weight": self.use.weight, "p_min": self.use.p_min, "top": self.use.top,
                        "gate": self.use.gate},
                "trained_on": self.trained_on,
                "healthy": self.healthy.to_dict() if self.healthy else None,
                "weights": {f: [[i, round(x, 4)] for i, x in pairs] for f, pairs in sorted(self.weights.items())}}

    def probabilities(self, feats: Iterable[str]) -> Dict[str, float]:
        """Softmax over the causes of intercept + the weights of the features present (binary features)."""
        z = list(self.intercept)
        for f in feats:
            for i, x in self.weights.get(f, ()):
                z[i] += x
        m = max(z)
        e = [math.exp(v - m) for v in z]
        total = sum(e)
        return {c: v / total for c, v in zip(self.classes, e)}

    def reasons(self, feats: Set[str], cause: str, n: int = SHOWN_FEATURES) -> List[str]:
        """The features present that pushed hardest toward `cause`: what the reason line names."""
        ci = self.classes.index(cause)
        scored = [(x, f) for f in feats for i, x in self.weights.get(f, ()) if i == ci and x > 0]
        return [f for _, f in sorted(scored, reverse=True)[:n]]


@lru_cache(maxsize=None)
def load_model(path: Path = MODEL_FILE) -> Optional[Model]:
    """The shipped model, or None when the file is absent (explain then ranks by signatures alone)."""
    if not path.is_file():
        return None
    return Model.from_dict(json.loads(path.read_text(encoding="utf-8")))


@dataclass(frozen=True)
class Reading:
    """The model and what it reads of one failing log, built once for both heads (the ranker's adjustments and
    the healthy check): the features walk the head and every fired line, and the model file is some 300 KiB of JSON."""

    model: Model
    feats: Set[str]
    hits: Dict[str, object]


def read(scan: ScanResult, model: Optional[Model] = None) -> Optional[Reading]:
    """The model's reading of `scan`, or None when the log shows no failure (the model says which cause a failure
    is, never whether there is one, so a healthy log never pays for reading the model) or no model file ships.
    `model`: the shipped one when None."""
    if not failing(scan):
        return None
    model = model if model is not None else load_model()
    if model is None:
        return None
    return Reading(model, features(scan), counted_hits(scan))


def adjustments(reading: Optional[Reading]) -> List[Adjustment]:
    """Score adjustments (origin "model") for the causes the model ranks highest, unless the signatures already
    name one cause strongly enough (the gate)."""
    if reading is None or reading.model.use.weight <= 0 or signature_best(reading.hits) >= reading.model.use.gate:
        return []
    model, feats = reading.model, reading.feats
    probs = model.probabilities(feats)
    best = sorted(probs.items(), key=lambda kv: (-kv[1], kv[0]))[: model.use.top]
    out = []
    for cause, p in best:
        if p < model.use.p_min:
            continue
        words = ", ".join(repr(f) for f in model.reasons(feats, cause))
        out.append(Adjustment(cause, delta=round(model.use.weight * p, 3),
                              reason=f"learned ranker: p={p:.2f} from the text ({words})", origin="model"))
    return out


def looks_healthy(reading: Optional[Reading]) -> Optional[Tuple[float, float]]:
    """The healthy check's probability that this failing log is a run that went on (HealthyCheck) and the threshold
    it holds a label from, or None without a reading or when the model has no check."""
    if reading is None or reading.model.healthy is None:
        return None
    return reading.model.healthy.probability(text_only(reading.feats)), reading.model.healthy.threshold


def signature_best(hits: Dict[str, object]) -> float:
    """The best cause's score from the signatures alone (their weights summed, as rank.rank adds them)."""
    scores: Dict[str, float] = {}
    for h in hits.values():
        for cid, w in h.signature.supports.items():  # type: ignore[attr-defined]
            scores[cid] = scores.get(cid, 0.0) + w
    return max(scores.values(), default=0.0)


def top_causes(model: Model, feats: Set[str], n: int = 3) -> Sequence[Tuple[str, float]]:
    return sorted(model.probabilities(feats).items(), key=lambda kv: (-kv[1], kv[0]))[:n]
