"""From a cause's score to a confidence that means something: the measured chance that it is the right cause.

Scores add the weights of the evidence; they are not probabilities. A logistic map, fitted by
benchmarks/bench_explain.py on the corpus scored leave-one-repository-out, turns a cause's score and its lead
over the next cause into the probability that it is the cause the thread established. The words follow the
measured precision on repositories the signatures were not written from: "high" only where answers at that
confidence were right at least 90 % of the time, "medium" at least 60 %, "low" below. The numbers live in
envbuild/knowledge/calibration.toml, with the run that measured them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from envbuild.errors import InputFileError, parse_input_toml, read_input_text

CALIBRATION_FILE = Path(__file__).resolve().parent.parent / "knowledge" / "calibration.toml"
TIE_MARGIN = 0.5  # two causes whose scores differ by less than this fit the evidence equally
_KEYS = ("intercept", "score", "lead", "high", "medium")


@dataclass(frozen=True)
class Calibration:
    intercept: float
    score: float  # weight of the cause's own score
    lead: float  # weight of its lead over the best other cause (negative for every cause but the first)
    high: float  # the confidence from which answers were right >= 90 % of the time
    medium: float  # ... >= 60 %

    def probability(self, score: float, lead: float) -> float:
        z = self.intercept + self.score * min(score, 20.0) + self.lead * max(min(lead, 20.0), -20.0)
        return 1.0 / (1.0 + math.exp(-z))

    def label(self, p: float) -> str:
        return "high" if p >= self.high else "medium" if p >= self.medium else "low"


@lru_cache(maxsize=None)
def load_calibration(path: Path = CALIBRATION_FILE) -> Calibration:
    data = parse_input_toml(path, read_input_text(path, "the calibration file"))
    fit = data.get("fit", {})
    missing = [k for k in _KEYS if not isinstance(fit.get(k), (int, float))]
    if missing:
        raise InputFileError(path, f"[fit] lacks numbers for {', '.join(missing)}")
    return Calibration(*(float(fit[k]) for k in _KEYS))


def leads(scores: Sequence[float]) -> List[float]:
    """Each score's lead over the best of the others (the first cause's over the second; 0 for the only one
    is its lead over nothing: its own score)."""
    out = []
    for i, s in enumerate(scores):
        others = [t for j, t in enumerate(scores) if j != i]
        out.append(s - (max(others) if others else 0.0))
    return out


def confidences(scores: Sequence[float], cal: Calibration) -> List[float]:
    """Calibrated probability per cause (scores best first). The first is exactly what the benchmark measured;
    the others are scaled down together when they would leave less than nothing beside it."""
    ps = [cal.probability(s, lead) for s, lead in zip(scores, leads(scores))]
    if len(ps) > 1:
        rest = sum(ps[1:])
        room = max(0.0, 1.0 - ps[0])
        if rest > room:
            ps = ps[:1] + [p * room / rest for p in ps[1:]]
    return ps


def tied(ranked: Sequence[Tuple[str, float]]) -> List[str]:
    """The causes whose scores are within TIE_MARGIN of the best: more than one means the evidence does not
    tell them apart."""
    if not ranked:
        return []
    best = ranked[0][1]
    group = [cid for cid, s in ranked if best - s < TIE_MARGIN]
    return group if len(group) > 1 else []


def fit(points: Sequence[Tuple[float, float, int]], iterations: int = 25, l2: float = 0.05) -> Dict[str, float]:
    """Logistic regression of right (0/1) on (score, lead) by Newton's method (three weights: a 3x3 solve per
    step, no library). A light L2 penalty on the two slopes keeps them finite when the classes separate."""
    w = [0.0, 0.0, 0.0]
    rows = [((1.0, min(s, 20.0), max(min(lead, 20.0), -20.0)), y) for s, lead, y in points]
    for _ in range(iterations):
        g = [0.0, 0.0, 0.0]
        h = [[0.0] * 3 for _ in range(3)]
        for x, y in rows:
            z = max(min(sum(wi * xi for wi, xi in zip(w, x)), 40.0), -40.0)
            p = 1.0 / (1.0 + math.exp(-z))
            for i in range(3):
                g[i] += (p - y) * x[i]
                for j in range(3):
                    h[i][j] += p * (1 - p) * x[i] * x[j]
        for i in (1, 2):
            g[i] += l2 * w[i]
            h[i][i] += l2
        step = _solve3(h, g)
        w = [wi - si for wi, si in zip(w, step)]
        if max(abs(si) for si in step) < 1e-6:
            break
    return {"intercept": w[0], "score": w[1], "lead": w[2]}


def _solve3(a: List[List[float]], b: List[float]) -> List[float]:
    """x with a x = b for a 3x3 system (Cramer's rule); zeros when a is singular."""
    def det(m: List[List[float]]) -> float:
        return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
                + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))

    d = det(a)
    if abs(d) < 1e-12:
        return [0.0, 0.0, 0.0]
    out = []
    for k in range(3):
        m = [row[:] for row in a]
        for i in range(3):
            m[i][k] = b[i]
        out.append(det(m) / d)
    return out


def expected_calibration_error(pairs: Sequence[Tuple[float, int]], bins: int = 10) -> float:
    """Sum over equal-width confidence bins of |accuracy - mean confidence|, weighted by the bin's share."""
    if not pairs:
        return 0.0
    total = 0.0
    for lo, hi, members in reliability(pairs, bins):
        if members:
            acc = sum(y for _, y in members) / len(members)
            conf = sum(p for p, _ in members) / len(members)
            total += len(members) / len(pairs) * abs(acc - conf)
    return total


def reliability(pairs: Sequence[Tuple[float, int]], bins: int = 10) -> List[Tuple[float, float, List[Tuple[float, int]]]]:
    out = []
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        members = [(p, y) for p, y in pairs if lo <= p < hi or (b == bins - 1 and p == 1.0)]
        out.append((lo, hi, members))
    return out
