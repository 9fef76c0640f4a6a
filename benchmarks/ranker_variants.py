"""ranker_variants: score other linear text models in the place of explain's learned ranker, each by its own
leave-one-repository-out cross-validation on the ranker's training logs (a repository's logs scored by a model
fitted without them), beside the shipped recipe measured the same way.

Why: the shipped recipe (benchmarks/train_ranker.py: binary features, L2 logistic regression, C = 4) was chosen by
a small sweep; this says whether another well-known recipe (balanced classes, rows scaled to unit length, TF-IDF,
naive Bayes) reads the training logs better before anyone builds it into the runtime. The model alone, not explain
whole: a gain here still has to survive `benchmarks/bench_explain.py` (docs/explain.md, session 15: the best one
here did not). Features are those the runtime reads (train_ranker.doc_features); vocabularies are built per fold.

    PYTHONPATH=$PWD python benchmarks/ranker_variants.py [NAME ...]
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, FrozenSet, List, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_ranker import (C, design_matrix, doc_features, document_frequency, guarded, training_entries,  # noqa: E402
                          vocabulary)


def _matrix(train_docs: Sequence[FrozenSet[str]], docs: Sequence[FrozenSet[str]], idf: bool) -> Any:
    """Rows over the features seen in at least MIN_DF training logs, as train_ranker builds them; idf-weighted when
    asked."""
    df = document_frequency(train_docs)
    index = vocabulary(df)
    weight = {f: math.log((1 + len(train_docs)) / (1 + df[f])) + 1 for f in index} if idf else None
    return design_matrix(docs, index, weight)


def _lr(c: float, balanced: bool = False) -> Callable[[], Any]:
    def make() -> Any:
        from sklearn.linear_model import LogisticRegression

        return LogisticRegression(C=c, solver="newton-cg", max_iter=300, class_weight="balanced" if balanced else None)

    return make


def _cnb() -> Any:
    from sklearn.naive_bayes import ComplementNB

    return ComplementNB(alpha=0.3)


# name -> (model factory, idf weighting, rows scaled to unit length)
VARIANTS: Dict[str, tuple] = {
    "shipped": (_lr(C), False, False),
    "c1": (_lr(1.0), False, False),
    "c16": (_lr(16.0), False, False),
    "balanced": (_lr(C, True), False, False),
    "l2rows-c64": (_lr(64.0), False, True),
    "tfidf-c64-balanced": (_lr(64.0, True), True, True),
    "complement-nb": (_cnb, False, False),
}


def score(name: str, docs: List[FrozenSet[str]], labels: List[str], groups: List[str]) -> Dict[str, float]:
    import numpy as np
    from sklearn.preprocessing import normalize
    from threadpoolctl import threadpool_limits

    make, idf, unit = VARIANTS[name]
    top1 = top3 = 0
    with threadpool_limits(1):  # a few hundred rows: BLAS threads only contend
        for repo in sorted(set(groups)):
            train = [i for i, g in enumerate(groups) if g != repo]
            test = [i for i, g in enumerate(groups) if g == repo]
            x = _matrix([docs[i] for i in train], docs, idf)
            if unit:
                x = normalize(x)
            model = make() if callable(make) else make
            model.fit(x[train], [labels[i] for i in train])
            for row, i in zip(model.predict_proba(x[test]), test):
                ranked = [model.classes_[j] for j in np.argsort(-row)]
                top1 += ranked[0] == labels[i]
                top3 += labels[i] in ranked[:3]
    return {"top1": top1 / len(docs), "top3": top3 / len(docs)}


def main(argv: List[str]) -> int:
    names = argv or list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        print(f"ranker_variants: unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    entries = training_entries()
    docs = [doc_features(e["file"], e["repository"]) for e in entries]
    labels = [e["cause"] for e in entries]
    groups = [e["repository"] for e in entries]
    print(f"{len(entries)} training logs from {len(set(groups))} repositories; each model scored by "
          f"leave-one-repository-out (the model alone, not explain whole)")
    base = None
    for name in names:
        t0 = time.monotonic()
        r = score(name, docs, labels, groups)
        base = r if name == "shipped" else base
        vs = f"  ({r['top1'] - base['top1']:+.1%} / {r['top3'] - base['top3']:+.1%} against shipped)" if base and name != "shipped" else ""
        print(f"  {name:<20} top-1 {r['top1']:.1%}  top-3 {r['top3']:.1%}{vs}  [{time.monotonic() - t0:.0f} s]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(guarded(lambda: main(sys.argv[1:])))
