"""Turns the per-step records of the train-step payload into a verdict, metrics and causes.

Pure Python, so CI replays recorded GPU runs (docs/gpu-runs/train-*.json) through it. What is
judged, and why:
- loss finite every step (a NaN after a resume points at a poisoned context or a bad TMS hook:
  M5, C9) and falling on the fixed batch (the weights survive the cycle and the optimizer works);
- the weight sync delivered every bucket intact (checksums);
- offload released at least the weights' bytes (else the offload hook did nothing: C9);
- device memory and open file descriptors do not grow across cycles (per-step communicator churn
  leaking NCCL buffers or FDs: M4; slime #956 ran out of memory after 17 steps that way);
- throughput and MFU are reported, not judged (no threshold source for a 4-layer slice).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from envbuild.train.flops import mfu as model_flops_utilisation

GIB = 1024 ** 3
MIB = 1024 ** 2
MEMORY_GROWTH_LIMIT = 256 * MIB  # device memory may wobble (allocator caches); a leak grows past this
FD_GROWTH_PER_CYCLE = 1.0  # one more open FD per cycle on average is a leak

# The causes (envbuild/knowledge/causes.toml) a failure in each phase points to.
PHASE_CAUSES: Dict[str, tuple] = {
    "import": (), "init": ("C2",), "build": (),
    "train": ("M5", "C9"),
    "sync": ("M4", "C2"),
    "offload": ("C9", "M3"),
    "resume": ("C9", "M5"),
    "rebuild": ("M4", "C2"),
    "plain": ("M5",),
    "teardown": ("M4",),
}


def phase_kind(phase: Optional[str]) -> str:
    """'rebuild 3' -> 'rebuild'."""
    return (phase or "").split(" ", 1)[0]


@dataclass
class Verdict:
    status: str  # pass | warn | fail
    summary: str
    metrics: List[Dict[str, Any]] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)
    causes: List[str] = field(default_factory=list)
    figures: Dict[str, Any] = field(default_factory=dict)


def _median(values: Sequence[float]) -> Optional[float]:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def assess(steps: List[Dict[str, Any]], *, global_tokens: int, flops_per_token: float, gpus: int,
           peak_tflops: Optional[float], weight_bytes: int, offloaded: bool = True) -> Verdict:
    """Judge one run from its step records (rank 0's; cycle steps first, then plain ones).

    `offloaded` is False for train.offload=none: what the offload phase frees is then only the destroyed
    communicators' memory, reported but not held against the weights' size."""
    cycle = [s for s in steps if s.get("cycle")]
    plain = [s for s in steps if not s.get("cycle")]
    metrics: List[Dict[str, Any]] = []
    problems: List[str] = []
    causes: List[str] = []
    warn_only = True

    def add(name, value, unit, expect=None, source=None):
        if value is not None:
            metrics.append({"name": name, "value": round(float(value), 6), "unit": unit, "expect": expect,
                            "source": source})

    def problem(text, cause_ids, fail):
        nonlocal warn_only
        problems.append(text)
        for c in cause_ids:
            if c not in causes:
                causes.append(c)
        if fail:
            warn_only = False

    losses = [s.get("loss") for s in steps]
    bad = [s["step"] for s in steps if not _finite(s.get("loss"))]
    if bad:
        problem(f"loss not finite at step(s) {bad}", ("M5", "C9"), True)
    finite = [x for x in losses if _finite(x)]
    first, last = (finite[0], finite[-1]) if finite else (None, None)
    add("loss_first", first, "nats")
    add("loss_last", last, "nats", expect="< loss_first (fixed batch)")
    if first is not None and last is not None and not last < first:
        problem(f"loss did not fall on the fixed batch ({first:.3f} -> {last:.3f})", ("C9",), False)
    norms = [s.get("grad_norm") for s in steps if _finite(s.get("grad_norm"))]
    if norms:
        add("grad_norm_first", norms[0], "")
        add("grad_norm_last", norms[-1], "")

    # Step 0 includes warm-up (cuBLAS handles, first communicators, allocator growth): left out.
    steady = cycle[1:] or cycle
    train_s = _median([s.get("train_s") for s in steady])
    plain_s = _median([s.get("train_s") for s in plain]) or train_s
    cycle_s = _median([s.get("cycle_s") for s in steady])
    add("train_step_s", train_s, "s")
    add("plain_step_s", plain_s, "s")
    add("cycle_step_s", cycle_s, "s")
    for part in ("sync", "offload", "resume", "rebuild"):
        add(f"{part}_s", _median([s.get(f"{part}_s") for s in steady]), "s")
    tokens_per_s = global_tokens / plain_s if plain_s else None
    add("tokens_per_s", tokens_per_s, "tokens/s")
    mfu = None
    if tokens_per_s and peak_tflops:
        mfu = model_flops_utilisation(tokens_per_s, flops_per_token, gpus, peak_tflops * 1e12)
        add("mfu", mfu, "fraction", source=f"{peak_tflops:.0f} TFLOP/s dense bf16 per GPU (envbuild/train/peaks.py)")
    ratio = cycle_s / plain_s if cycle_s and plain_s else None
    add("cycle_over_plain", ratio, "x", expect="reported: the cost of train+sync+offload+resume+rebuild "
                                                 "over a plain step")
    sync_bytes = _median([s.get("sync_bytes") for s in steady])
    sync_s = _median([s.get("sync_s") for s in steady])
    if sync_bytes and sync_s:
        add("sync_GBps", sync_bytes / sync_s / 1e9, "GB/s")
    corrupt = [s["step"] for s in cycle if s.get("sync_bad_buckets")]
    if corrupt:
        problem(f"weight sync delivered corrupted buckets at step(s) {corrupt}", ("M4", "C2"), True)

    released = _median([s.get("released_bytes") for s in cycle])
    add("released_GiB", released / GIB if released is not None else None, "GiB",
        expect=f">= weights {weight_bytes / GIB:.2f} GiB" if offloaded else None)
    if released is not None and weight_bytes and offloaded:
        add("released_over_weights", released / weight_bytes, "x", expect=">= 1")
        if released < weight_bytes:
            problem(f"offload released {released / GIB:.2f} GiB, less than the {weight_bytes / GIB:.2f} GiB "
                    f"of weights", ("C9",), False)
    peak = max((s.get("peak_allocated_bytes") or 0 for s in cycle), default=0)
    add("peak_allocated_GiB", peak / GIB if peak else None, "GiB")

    if len(cycle) >= 3:
        base, end = cycle[1], cycle[-1]
        growth = (end.get("used_after_step") or 0) - (base.get("used_after_step") or 0)
        add("device_memory_growth_MiB", growth / MIB, "MiB",
            expect=f"< {MEMORY_GROWTH_LIMIT // MIB} MiB from cycle 1 to {end['step']}")
        cycles = end["step"] - base["step"]
        if growth >= MEMORY_GROWTH_LIMIT:
            problem(f"device memory grew {growth / MIB:.0f} MiB over {cycles} cycles "
                    f"({growth / cycles / MIB:.0f} MiB per cycle)", ("M4",), False)
        fd_growth = (end.get("fds") or 0) - (base.get("fds") or 0)
        add("fd_growth", fd_growth, "fds", expect=f"< {FD_GROWTH_PER_CYCLE:g} per cycle")
        if cycles and fd_growth / cycles >= FD_GROWTH_PER_CYCLE:
            problem(f"open file descriptors grew by {fd_growth} over {cycles} cycles ({fd_growth / cycles:.0f} per "
                    f"cycle)", ("M4",), False)
        add("device_used_GiB", (end.get("used_after_step") or 0) / GIB, "GiB")

    status = "pass" if not problems else ("warn" if warn_only else "fail")
    figures = {"loss_first": first, "loss_last": last, "train_s": train_s, "plain_s": plain_s,
               "cycle_s": cycle_s, "tokens_per_s": tokens_per_s, "mfu": mfu, "ratio": ratio,
               "released": released, "peak": peak, "cycles": len(cycle), "plain": len(plain)}
    return Verdict(status=status, summary="; ".join(problems), metrics=metrics, problems=problems,
                   causes=causes, figures=figures)


def _finite(x: Any) -> bool:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return False
    return v == v and v not in (float("inf"), float("-inf"))
