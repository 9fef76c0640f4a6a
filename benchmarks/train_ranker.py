"""train_ranker: fit explain's learned fallback ranker (envbuild/explain/ranker.py) on the labelled corpus and
write its weights as JSON (envbuild/knowledge/ranker.json).

Why a script and not the runtime: scikit-learn's logistic regression is well kept and fits a few hundred logs in
well under a second, but `envbuild explain` must stay fast and import nothing heavy, so the fit happens here and
the runtime only sums weights. benchmarks/bench_explain.py imports `train` from here to retrain the model without
each held-out repository (its leave-one-repository-out folds), so the headline never credits the model on logs it
was trained on.

Training data: every labelled log (a cause, not `none` or `unknown`) of the collections in TRAIN_COLLECTIONS: the
main corpus and held-out slices 1-82, each learned from only after its untouched score was written down
(docs/explain-slice<N>-before.md for slices 4-82); the healthy check learns from the same collections' healthy
logs too. A collection is trained on only once it is named
here, so a blind slice added to the manifest later is never learned from by accident. Each log's features come
from its leave-one-repository-out scan (the signatures written only from its own repository left out): what the
signatures say on text they were not written from, which is what the model meets on a new report.

    PYTHONPATH=$PWD python benchmarks/train_ranker.py [--weight W] [--p-min P] [--c C]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "explain" / "corpus"
sys.path.insert(0, str(REPO))

TRAIN_COLLECTIONS = frozenset({
    "", "fourth-read", "held-out-2026-12-04", "held-out-2026-12-05", "held-out-2026-12-05-after-edits",
    "held-out-2026-12-05-s4", "held-out-2026-12-05-s5", "held-out-2026-12-05-s6", "held-out-2026-12-06-s7",
    "held-out-2026-12-06-s8", "held-out-2026-12-06-s9", "held-out-2026-12-07-s10",
    "held-out-2026-12-07-s11", "held-out-2026-12-07-s12", "held-out-2026-12-07-s13", "held-out-2026-12-08-s14",
    "held-out-2026-12-08-s15", "held-out-2026-12-06-s16", "held-out-2026-12-06-s17", "held-out-2026-12-06-s18",
    "held-out-2026-12-06-s19", "held-out-2026-12-06-s20", "held-out-2026-12-06-s21",
    "held-out-2026-12-06-s22", "held-out-2026-12-06-s23", "held-out-2026-12-06-s24", "held-out-2026-12-06-s25",
    "held-out-2026-12-06-s26", "held-out-2026-12-06-s27", "held-out-2026-12-06-s28", "held-out-2026-12-06-s29",
    "held-out-2026-12-06-s30", "held-out-2026-12-06-s31", "held-out-2026-12-06-s32", "held-out-2026-12-06-s33",
    "held-out-2026-12-06-s34", "held-out-2026-12-06-s35", "held-out-2026-12-06-s36", "held-out-2026-12-06-s37",
    "held-out-2026-12-06-s38", "held-out-2026-12-06-s39", "held-out-2026-12-06-s40", "held-out-2026-12-06-s41",
    "held-out-2026-12-06-s42", "held-out-2026-12-06-s43", "held-out-2026-12-06-s44", "held-out-2026-12-06-s45",
    "held-out-2026-12-06-s46", "held-out-2026-12-07-s48", "held-out-2026-12-07-s49", "held-out-2026-12-07-s50",
    "held-out-2026-12-07-s51", "held-out-2026-12-07-s52", "held-out-2026-12-07-s53", "held-out-2026-12-07-s54",
    "held-out-2026-12-07-s55", "held-out-2026-12-07-s56", "held-out-2026-12-07-s57", "held-out-2026-12-07-s58",
    "held-out-2026-12-07-s59", "held-out-2026-12-07-s60", "held-out-2026-12-07-s61", "held-out-2026-12-07-s62",
    "held-out-2026-12-07-s63", "held-out-2026-12-07-s64", "held-out-2026-12-07-s65", "held-out-2026-12-07-s66",
    "held-out-2026-12-07-s67", "held-out-2026-12-07-s47", "held-out-2026-12-07-s69", "held-out-2026-12-07-s70",
    "held-out-2026-12-07-s71", "held-out-2026-12-07-s72", "held-out-2026-12-07-s68", "held-out-2026-12-07-s73",
    "held-out-2026-12-07-s74", "held-out-2026-12-07-s75", "held-out-2026-12-07-s76", "held-out-2026-12-07-s78",
    "held-out-2026-12-07-s77", "held-out-2026-12-07-s79", "held-out-2026-12-07-s80", "held-out-2026-12-07-s81",
    "held-out-2026-12-07-s82",
})
C = 4.0  # inverse L2 strength: chosen by LORO (docs/explain.md, "learned ranker")
MIN_DF = 2  # a feature seen in fewer training logs than this is not learned (a single thread's words)
PRUNE = 0.08  # weights smaller than this are not shipped (0.05 until 729 logs, 0.06 until 843, 0.07 until 1012, each time the file outgrew its 300 KiB test)
USE = {"weight": 3.0, "p_min": 0.1, "top": 3, "gate": 1.5}  # chosen by LORO (docs/explain.md); bench --ranker-weight sweeps it
# The healthy check (ranker.HealthyCheck): its L2 strength and the probability from which it holds a label at "low".
# Chosen on the corpus with the logs' projects held out (20 folds grouped by project(), words seen in three projects;
# docs/explain.md, session 24): at 0.5, 78 of 127 healthy logs and 21 of 966 failure logs reach it (AUC 0.94).
HEALTHY_C = 1.0
HEALTHY_AT = 0.5
HEALTHY_MIN_PROJECTS = 3  # a word the check learns from must appear in the logs of this many projects (project())
HEALTHY_PRUNE = 0.15  # its weights smaller than this are not shipped (0.07 and 0.1 made ranker.json 330 and 318 KiB)


@lru_cache(maxsize=None)
def _manifest_logs() -> Tuple[Dict[str, Any], ...]:
    """The manifest's `[[log]]` entries, parsed once per process. Why: every leave-one-repository-out fold asks for
    its training logs twice, and parsing the ~1,700-entry TOML was 0.2 s of a fold's ~3.5 s."""
    from envbuild.tomlcompat import toml

    return tuple(toml.loads((CORPUS / "manifest.toml").read_text())["log"])


def training_entries() -> List[Dict[str, Any]]:
    """The manifest's labelled logs of the collections named in TRAIN_COLLECTIONS (read from the manifest only:
    no other collection's log file is opened)."""
    return [e for e in _manifest_logs() if str(e.get("collection", "")) in TRAIN_COLLECTIONS
            and e["cause"] not in ("none", "unknown")]


def healthy_training_entries() -> List[Dict[str, Any]]:
    """What the healthy check learns from: the same collections' healthy logs (`none`) and failures (`unknown`
    left out: a failure nobody explained may still be a run that went on)."""
    return [e for e in _manifest_logs() if str(e.get("collection", "")) in TRAIN_COLLECTIONS
            and e["cause"] != "unknown"]


@lru_cache(maxsize=None)
def doc_features(file: str, repository: str) -> FrozenSet[str]:
    """The ranker's features of one corpus log, from its leave-one-repository-out scan."""
    from envbuild.explain.explain import scan_paths
    from envbuild.explain.ranker import features

    scan, _ = scan_paths([str(CORPUS / file)], held_out=repository)
    return frozenset(features(scan))


@lru_cache(maxsize=None)
def text_doc_features(file: str, repository: str) -> FrozenSet[str]:
    """What the healthy check reads of one corpus log: its features without the `sig:` ids (ranker.text_only),
    cached like doc_features since every fold reads the same logs (0.1 s a fold otherwise)."""
    from envbuild.explain.ranker import text_only

    return frozenset(text_only(doc_features(file, repository)))


def corpus_hash(entries: Sequence[Dict[str, Any]]) -> str:
    """What the model was trained on: each training log's file, label and bytes (tests/explain holds the shipped
    model to the current corpus with it)."""
    h = hashlib.sha256()
    for e in sorted(entries, key=lambda e: e["file"]):
        h.update(f"{e['file']}\0{e['repository']}\0{e['cause']}\0".encode())
        h.update(hashlib.sha256((CORPUS / e["file"]).read_bytes()).digest())
    return h.hexdigest()


def document_frequency(docs: Sequence[FrozenSet[str]]) -> Dict[str, int]:
    """In how many of `docs` each feature appears."""
    df: Dict[str, int] = {}
    for d in docs:
        for f in d:
            df[f] = df.get(f, 0) + 1
    return df


def vocabulary(df: Dict[str, int]) -> Dict[str, int]:
    """The features seen in at least MIN_DF logs, each with its column."""
    return {f: i for i, f in enumerate(sorted(f for f, n in df.items() if n >= MIN_DF))}


def design_matrix(docs: Sequence[FrozenSet[str]], index: Dict[str, int],
                  value: Optional[Dict[str, float]] = None) -> Any:
    """One row per log over `index`'s features: 1.0 where present, or `value[feature]` when given."""
    from scipy.sparse import csr_matrix

    rows, cols, vals = [], [], []
    for r, d in enumerate(docs):
        for f in d:
            if f in index:
                rows.append(r)
                cols.append(index[f])
                vals.append(value[f] if value else 1.0)
    return csr_matrix((vals, (rows, cols)), shape=(len(docs), len(index)))


def project(repository: str) -> str:
    """Who wrote a log, for counting how widely a word is seen: the repository, except that the GPU runs made here
    (envbuild/gpu-s20, envbuild/h200-s6, ...) are one project. They share one software stack, so "torch 2.11.0"
    would otherwise look seen in six places and mark a run as healthy because this project's runs often were."""
    return repository.split("/")[0] if repository.startswith("envbuild/") else repository


def train_healthy(entries: Sequence[Dict[str, Any]], c: float = HEALTHY_C) -> Any:
    """The healthy check fitted on `entries` (binary logistic regression, `none` against the rest, classes weighed
    equally since healthy logs are one in eight; features without the `sig:` ids, ranker.text_only, and only those
    seen in the logs of HEALTHY_MIN_PROJECTS projects: one thread's words say who wrote it, not how runs go)."""
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    from envbuild.explain.ranker import HealthyCheck

    docs = [text_doc_features(e["file"], e["repository"]) for e in entries]
    seen_in: Dict[str, set] = {}
    for d, e in zip(docs, entries):
        who = project(e["repository"])
        for f in d:
            seen_in.setdefault(f, set()).add(who)
    index = {f: i for i, f in enumerate(sorted(f for f, ps in seen_in.items() if len(ps) >= HEALTHY_MIN_PROJECTS))}
    clf = LogisticRegression(C=c, solver="newton-cg", max_iter=200, class_weight="balanced")
    with threadpool_limits(1):
        clf.fit(design_matrix(docs, index), [e["cause"] == "none" for e in entries])
    coef = clf.coef_[0]
    weights = {f: float(coef[j]) for f, j in index.items() if abs(coef[j]) >= HEALTHY_PRUNE}
    return HealthyCheck(float(clf.intercept_[0]), weights, HEALTHY_AT)


def train(entries: Sequence[Dict[str, Any]], c: float = C, use: Optional[Dict[str, float]] = None,
          healthy: Optional[Sequence[Dict[str, Any]]] = None) -> Any:
    """A ranker.Model fitted on `entries` (multinomial logistic regression, L2, binary features seen in at least
    MIN_DF logs), with the healthy check fitted on `healthy` when given; weights below PRUNE are dropped, as in the
    shipped file, so a fold scores what would ship."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    from envbuild.explain.ranker import Model, Use

    docs = [doc_features(e["file"], e["repository"]) for e in entries]
    labels = [e["cause"] for e in entries]
    index = vocabulary(document_frequency(docs))
    x = design_matrix(docs, index)
    from threadpoolctl import threadpool_limits

    clf = LogisticRegression(C=c, solver="newton-cg", max_iter=200)
    with threadpool_limits(1):  # a few hundred rows: BLAS threads only contend (measured 3x slower on 2 CPUs)
        clf.fit(x, labels)
    classes = [str(k) for k in clf.classes_]
    coef = clf.coef_.tolist()
    if len(classes) == 2:  # sklearn keeps one row for two classes; the runtime wants one per class
        coef = [[-v / 2 for v in coef[0]], [v / 2 for v in coef[0]]]
        intercept = [-float(clf.intercept_[0]) / 2, float(clf.intercept_[0]) / 2]
    else:
        intercept = [float(v) for v in clf.intercept_]
    # The weights kept, found with numpy rather than by testing every (feature, cause) in Python (half a million a
    # fold); the same floats, in the same order (features by column, causes by index).
    kept = np.abs(np.asarray(coef)) >= PRUNE
    weights: Dict[str, List[Tuple[int, float]]] = {}
    for f, j in index.items():
        cis = np.flatnonzero(kept[:, j])
        if cis.size:
            weights[f] = [(int(ci), float(coef[ci][j])) for ci in cis]
    trained_on: Dict[str, object] = {
        "logs": len(entries), "repositories": len({e["repository"] for e in entries}),
        "collections": sorted(TRAIN_COLLECTIONS), "c": c, "min_df": MIN_DF, "prune": PRUNE,
        "corpus_sha256": corpus_hash(entries)}
    check = None
    if healthy is not None:
        check = train_healthy(healthy)
        trained_on.update({"healthy_logs": len(healthy), "healthy_c": HEALTHY_C, "healthy_prune": HEALTHY_PRUNE,
                           "healthy_sha256": corpus_hash(healthy)})
    return Model(classes, intercept, weights, Use(**(use or USE)), trained_on, check)


def fit_without(repository: Optional[str]) -> Any:
    """The model of a leave-one-repository-out fold: trained on every training log but `repository`'s, its healthy
    check too (a module-level function so benchmarks/bench_explain.py can fit folds in worker processes)."""
    return train([e for e in training_entries() if e["repository"] != repository],
                 healthy=[e for e in healthy_training_entries() if e["repository"] != repository])


def main() -> int:
    from envbuild.explain.ranker import MODEL_FILE

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weight", type=float, default=USE["weight"])
    ap.add_argument("--p-min", type=float, default=USE["p_min"])
    ap.add_argument("--gate", type=float, default=USE["gate"])
    ap.add_argument("--top", type=int, default=USE["top"])
    ap.add_argument("--c", type=float, default=C)
    ap.add_argument("--out", default=str(MODEL_FILE))
    args = ap.parse_args()
    entries = training_entries()
    model = train(entries, args.c, {"weight": args.weight, "p_min": args.p_min, "top": args.top,
                                          "gate": args.gate}, healthy_training_entries())
    Path(args.out).write_text(json.dumps(model.to_dict(), separators=(",", ":"), sort_keys=False) + "\n")
    print(f"trained on {len(entries)} logs from {model.trained_on['repositories']} repositories: "
          f"{len(model.classes)} causes, {len(model.weights)} features kept; healthy check on "
          f"{model.trained_on['healthy_logs']} logs, {len(model.healthy.weights)} features kept; wrote {args.out} "
          f"({Path(args.out).stat().st_size // 1024} KiB)")
    return 0


def guarded(entry: Callable[[], int]) -> int:
    """Run a ranker script's `entry` the way a user expects of a command: scikit-learn missing is one line with the
    install that brings it (the `test` extra), Ctrl-C ends with 130 and no traceback."""
    try:  # Ctrl-C while scikit-learn imports (a second or more) ends the same way as during the work
        try:
            import sklearn  # noqa: F401  (only to say what is missing before any work)
        except ImportError:
            print(f"{Path(sys.argv[0]).name}: needs scikit-learn; install it with: pip install -e '.[test]'",
                  file=sys.stderr)
            return 2
        return entry()
    except KeyboardInterrupt:
        print(f"{Path(sys.argv[0]).name}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(guarded(main))
