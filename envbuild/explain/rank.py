"""From what the scan found (and what the doctor or the profile know) to causes ranked with a confidence.

Each signature seen adds its weights to the causes it supports, once per run however often it repeats (a
line printed by 64 ranks is one piece of evidence); a signature that rules a cause out divides that cause's
score by four; doctor results and profile comparisons add or divide the same way, each with its reason.
A cause's share is a softmax over the scores with an "unexplained" score of 1.0 beside them; its confidence is
the calibrated probability that it is the right cause (explain/calibrate.py: fitted on the corpus scored
leave-one-repository-out), and its label says how often answers at that confidence were right. No failure
signature at all, or only failures the run got past (a completion after them), means nothing is wrong in the log;
a failure with a cause that anything scored is explained by its best cause, however weak (its label, often "low",
says how often such answers were right); a failure that nothing points at is reported as unknown — the honest
answer when the log does not say.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from envbuild.explain.scan import Hit, ScanResult

UNEXPLAINED = 1.0  # the score of "none of these": the softmax's floor
# A failure's best cause is named from any positive score: its confidence and label carry the doubt. Why not a floor:
# on the blind slices' first sight (docs/explain-slice4..33-before.md), a failure left `unknown` had its right cause
# first 32 times in 139, each a top-1 lost; dropping the floor from 1.0 moved strict leave-one-repository-out from
# 64.9 to 69.3 % and left the headline and the calibration as they were (docs/explain.md, "Session 21").
MIN_CAUSE_SCORE = 0.0
RULED_OUT_FACTOR = 0.25
SHOWN = 6  # causes listed
NAMES_IT = 3.5  # a weight from which one piece of evidence names its cause ("4-5 names it", docs/explain.md)


@dataclass
class Adjustment:
    """A change to a cause's score from outside the log lines (a doctor result, the profile)."""

    cause: str
    delta: float = 0.0  # added
    factor: float = 1.0  # multiplied, after all additions
    reason: str = ""
    origin: str = ""  # "log" (the log's facts together), "doctor", "bundle", "profile"

    def to_dict(self) -> Dict[str, Any]:
        return {"cause": self.cause, "delta": self.delta, "factor": self.factor, "reason": self.reason, "origin": self.origin}


@dataclass
class RankedCause:
    id: str
    title: str
    score: float
    share: float  # softmax share beside "unexplained"
    signatures: List[Hit] = field(default_factory=list)  # supporting hits, strongest first
    adjustments: List[Adjustment] = field(default_factory=list)
    ruled_out_by: List[str] = field(default_factory=list)
    confidence: float = 0.0  # calibrated: the measured chance that this is the cause


def counted_hits(scan: ScanResult) -> Dict[str, Hit]:
    """Hits whose `requires` are all met."""
    return {sid: h for sid, h in scan.hits.items() if all(r in scan.hits for r in h.signature.requires)}


def failing(scan: ScanResult) -> bool:
    """Whether the log shows a failure the run did not get past: a counted failure signature that, in some source, no
    later completion closed (a caught out-of-memory error before "training done" is not one)."""
    return bool(_still_open(scan))


def warned_only(scan: ScanResult) -> bool:
    """Whether every failure the run did not get past was printed only at a warning or info level (scan._soft), or
    in a report whose title asks whether a message matters: a run that logs a failure as a warning says it went on
    from it, and a question quotes a message without saying the run failed, so what the log holds is no proof of a
    cause (the answer's label is held at "low" unless a doctor, node or recorded finding stands behind it)."""
    still_open = _still_open(scan)
    return bool(still_open) and all(sid in scan.soft_failures for sid in still_open)


def _still_open(scan: ScanResult) -> List[str]:
    """The counted failure signatures no completion closed (open_failures holds failures only)."""
    return [sid for sid in counted_hits(scan) if sid in scan.open_failures]


def rank(scan: ScanResult, adjustments: List[Adjustment], titles: Dict[str, str]) -> List[RankedCause]:
    """Every cause with a positive score, best first, with its confidence and evidence."""
    hits = counted_hits(scan)
    scores: Dict[str, float] = {}
    support: Dict[str, List[Hit]] = {}
    ruled: Dict[str, List[str]] = {}
    for h in hits.values():
        for cid, w in h.signature.supports.items():
            scores[cid] = scores.get(cid, 0.0) + w
            support.setdefault(cid, []).append(h)
        for cid in h.signature.rules_out:
            ruled.setdefault(cid, []).append(h.signature.id)
    adj_by: Dict[str, List[Adjustment]] = {}
    for a in adjustments:
        if a.delta and a.origin != "node":
            scores[a.cause] = scores.get(a.cause, 0.0) + a.delta
        adj_by.setdefault(a.cause, []).append(a)
    for cid in list(scores):
        if cid in ruled:
            scores[cid] *= RULED_OUT_FACTOR
        for a in adj_by.get(cid, []):
            scores[cid] *= a.factor
    # A version the run printed that the node contradicts says the run was not what the node's checks saw, so
    # the checks' passes do not discount it: added after the factors.
    for a in adjustments:
        if a.delta and a.origin == "node":
            scores[a.cause] = scores.get(a.cause, 0.0) + a.delta
    positive = {c: s for c, s in scores.items() if s > 0}
    z = math.exp(UNEXPLAINED) + sum(math.exp(s) for s in positive.values())
    from envbuild.explain.calibrate import confidences, load_calibration

    out = []
    ordered = sorted(positive.items(), key=lambda kv: (-kv[1], kv[0]))
    calibrated = confidences([s for _, s in ordered], load_calibration())
    for (cid, s), p in zip(ordered, calibrated):
        sigs = sorted(support.get(cid, []), key=lambda h: -h.signature.supports[cid])
        out.append(RankedCause(cid, titles.get(cid, cid), round(s, 3), round(math.exp(s) / z, 3), sigs,
                               adj_by.get(cid, []), ruled.get(cid, []), round(p, 3)))
    return out


def verdict(scan: ScanResult, ranked: List[RankedCause], doctor_failed: bool = False) -> str:
    """'ok' (no failure in the log), 'explained' (a cause named) or 'unknown' (a failure, no cause that fits)."""
    if not failing(scan) and not doctor_failed:
        return "ok"
    if not ranked or ranked[0].score <= MIN_CAUSE_SCORE:
        return "unknown"
    best = ranked[0]
    argued_against = best.ruled_out_by or any(a.factor < 1 for a in best.adjustments)
    if argued_against and best.score < UNEXPLAINED:
        return "unknown"  # what is left of a cause the log argues against is no answer, only what remains
    return "explained"


def label(confidence: float, named: bool = True) -> str:
    """high / medium / low by the precision measured at that confidence (knowledge/calibration.toml); "high"
    also needs one piece of evidence that names the cause by itself (`named`), else it reads "medium"."""
    from envbuild.explain.calibrate import load_calibration

    word = load_calibration().label(confidence)
    return "medium" if word == "high" and not named else word


def top(ranked: List[RankedCause], n: Optional[int] = None) -> List[RankedCause]:
    return ranked[: n or SHOWN]
