"""The numbers the HTML page plots, read out of a Report's results (pure: no plotting, no HTML).

Each reader takes what one check wrote (docs/checks-*.md name the evidence and metrics) and returns None or an
empty list when the report has no such result, so the page can say what is missing instead of failing. The
readers accept evidence written by older envbuild versions of schema v1 (a key absent, a line rate written as
text) because fleets run mixed versions.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from envbuild.errors import InputFileError, read_input_text
from envbuild.report.model import Report, Result, Status

_PAIR_METRIC = re.compile(r"^gpu(\d+)->gpu(\d+)\.uni_(gbps|fraction)$")
_BIDIR_METRIC = re.compile(r"^gpu(\d+)<->gpu(\d+)\.bidir_(gbps|fraction)$")
_SUBJECT_PAIR = re.compile(r"^gpu(\d+)<->gpu(\d+)$")
_RATE_TEXT = re.compile(r"([\d.]+)\s*GB/s per direction")
_RATE_EXPECT = re.compile(r"x\s*([\d.]+)\s*GB/s")


@dataclass
class P2PCell:
    gbps: Optional[float]
    fraction: Optional[float]  # of the pair's line rate
    status: Status


@dataclass
class P2PMatrix:
    """gpu.p2p results of one node: one-way copy bandwidth per ordered GPU pair (NVML indices)."""

    gpus: List[int]
    cells: Dict[Tuple[int, int], P2PCell]
    line_rate_gbps: Optional[float]
    link: str
    bidir: List[Tuple[int, int, float, Optional[float]]]  # (a, b, GB/s, fraction of 2 x line rate)


@dataclass
class BusbwSeries:
    """busbw against message size for one collective, from one comm.nccl_collectives result or nccl-tests."""

    label: str
    op: str
    sizes: List[int]
    busbw: List[float]
    status: Optional[Status] = None


@dataclass
class NcclRun:
    series: List[BusbwSeries]
    line_rate_gbps: Optional[float]
    line_rate_text: str


@dataclass
class TrainRun:
    """train.moe_step's per-step record: memory in bytes and phase times in seconds, cycle steps first."""

    label: str
    status: Status
    summary: str
    steps: List[Dict[str, Any]]
    layout: str
    total_gib: Optional[float] = None  # the GPU's memory, for the plot's ceiling
    notes: List[str] = field(default_factory=list)


def size_text(b: int) -> str:
    """64MiB, 1GiB, 4096B: a message size spelled as the checks spell it in metric names (the doctor's
    size_label; report/ does not import doctor/, which sits above it in the layers)."""
    b = int(b)
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << k and b % (1 << k) == 0:
            return f"{b >> k}{unit}"
    return f"{b}B"


def results_of(report: Report, check_id: str) -> List[Result]:
    return [r for r in report.results if r.check_id == check_id]


def _num(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def p2p_matrix(report: Report) -> Optional[P2PMatrix]:
    """The node's P2P matrix, or None when no gpu.p2p result measured a pair (one GPU, static run, skip)."""
    cells: Dict[Tuple[int, int], P2PCell] = {}
    bidir: List[Tuple[int, int, float, Optional[float]]] = []
    rate: Optional[float] = None
    link = ""
    for r in results_of(report, "gpu.p2p"):
        if r.status is Status.SKIP:
            continue
        lr = r.evidence.get("line_rate") if isinstance(r.evidence, dict) else None
        if isinstance(lr, dict):
            rate = rate or _num(lr.get("gbps"))
            link = link or str(lr.get("link") or "")
        values: Dict[Tuple[int, int], Dict[str, float]] = {}
        for m in r.metrics:
            hit = _PAIR_METRIC.match(m.name)
            if hit and _num(m.value) is not None:
                values.setdefault((int(hit.group(1)), int(hit.group(2))), {})[hit.group(3)] = float(m.value)
                if rate is None and hit.group(3) == "gbps" and m.expect:
                    found = _RATE_EXPECT.search(m.expect)
                    rate = float(found.group(1)) if found else None
        bi: Dict[str, float] = {}
        for m in r.metrics:
            hit = _BIDIR_METRIC.match(m.name)
            if hit and _num(m.value) is not None:
                bi[hit.group(3)] = float(m.value)
                ab = (int(hit.group(1)), int(hit.group(2)))
        if "gbps" in bi:
            bidir.append((ab[0], ab[1], bi["gbps"], bi.get("fraction")))
        pair = _SUBJECT_PAIR.match(r.subject or "")
        if pair:  # a pair the probe could not measure still gets its (failing) cells
            a, b = int(pair.group(1)), int(pair.group(2))
            values.setdefault((a, b), {})
            values.setdefault((b, a), {})
        for key, v in values.items():
            cells[key] = P2PCell(gbps=v.get("gbps"), fraction=v.get("fraction"), status=r.status)
    if not cells:
        return None
    gpus = sorted({i for k in cells for i in k})
    return P2PMatrix(gpus=gpus, cells=cells, line_rate_gbps=rate, link=link, bidir=sorted(bidir))


def nccl_run(report: Report) -> Optional[NcclRun]:
    """Every comm.nccl_collectives result's rows as busbw series (one per op and subject), or None."""
    series: List[BusbwSeries] = []
    rate: Optional[float] = None
    rate_text = ""
    for r in results_of(report, "comm.nccl_collectives"):
        ev = r.evidence if isinstance(r.evidence, dict) else {}
        rows = [row for row in ev.get("rows") or [] if isinstance(row, dict)
                and _num(row.get("size")) and _num(row.get("busbw")) is not None]
        if not rows:
            continue
        text = ev.get("line_rate")
        if isinstance(text, str):
            rate_text = rate_text or text
            found = _RATE_TEXT.search(text) or re.search(r"=\s*([\d.]+)\s*GB/s", text)
            if found and rate is None:
                rate = float(found.group(1))
        if rate is None:
            fracs = [row["busbw"] / row["fraction_of_line_rate"] for row in rows
                     if _num(row.get("fraction_of_line_rate"))]
            rate = max(fracs) if fracs else None
        by_op: Dict[str, List[Dict[str, Any]]] = {}
        for row in rows:
            by_op.setdefault(str(row.get("op", "?")), []).append(row)
        for op, op_rows in by_op.items():
            op_rows.sort(key=lambda x: x["size"])
            series.append(BusbwSeries(label=r.subject or "nccl", op=op, sizes=[int(x["size"]) for x in op_rows],
                                      busbw=[float(x["busbw"]) for x in op_rows], status=r.status))
    if not series:
        return None
    return NcclRun(series=series, line_rate_gbps=rate, line_rate_text=rate_text)


def train_run(report: Report) -> Optional[TrainRun]:
    """The train.moe_step result's per-step record, or None without one (or when it stopped before a step)."""
    for r in results_of(report, "train.moe_step"):
        ev = r.evidence if isinstance(r.evidence, dict) else {}
        steps = [s for s in ev.get("steps") or [] if isinstance(s, dict)]
        if r.status is Status.SKIP:
            continue
        lay = ev.get("layout") if isinstance(ev.get("layout"), dict) else {}
        layout = ", ".join(f"{k.upper()} {lay[k]}" for k in ("tp", "ep", "pp", "cp", "dp") if k in lay)
        if lay.get("sp"):
            layout = layout.replace("TP ", "TP+SP ", 1)
        total = None
        for g in report.gpus:
            total = _num(g.get("memory_total_mib")) if isinstance(g, dict) else None
            if total:
                total = total / 1024
                break
        return TrainRun(label=r.subject or "train.moe_step", status=r.status, summary=r.summary, steps=steps,
                        layout=layout, total_gib=total)
    return None


def profile_rows(report: Report) -> Optional[Dict[str, Any]]:
    """stack.profile_match's side-by-side table (profile, image, rows), or None when it did not run."""
    for r in results_of(report, "stack.profile_match"):
        ev = r.evidence if isinstance(r.evidence, dict) else {}
        rows = [row for row in ev.get("rows") or [] if isinstance(row, dict)]
        if rows:
            return {"profile": ev.get("profile") or report.profile, "image": ev.get("image"), "rows": rows,
                    "status": r.status, "summary": r.summary}
    return None


_PERF_START = re.compile(r"Collective test starting:\s*(\w+?)_perf")
_PERF_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+")


def read_nccl_tests(path: str) -> List[BusbwSeries]:
    """nccl-tests results as reference series: the stdout of `all_reduce_perf` (and its siblings; out-of-place
    busbw), or a benchmarks/bench_allreduce.py JSON (docs/gpu-runs/bench-allreduce*.json), which holds that stdout."""
    text = read_input_text(path, "the nccl-tests output")
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputFileError(path, f"not valid JSON: {exc.msg} at column {exc.colno}", exc.lineno) from exc
        nt = data.get("nccl_tests") if isinstance(data, dict) else None
        text = nt.get("stdout_tail", "") if isinstance(nt, dict) else ""
        if not text:
            raise InputFileError(path, "no nccl_tests.stdout_tail in this JSON: expected a bench_allreduce.py result")
    series: Dict[str, BusbwSeries] = {}
    op = "all_reduce"
    for line in text.splitlines():
        start = _PERF_START.search(line)
        if start:
            op = start.group(1)
            continue
        row = _PERF_ROW.match(line)
        if row:
            s = series.setdefault(op, BusbwSeries(label=f"nccl-tests ({Path(path).name})", op=op, sizes=[], busbw=[]))
            s.sizes.append(int(row.group(1)))
            s.busbw.append(float(row.group(5)))
    if not series:
        raise InputFileError(path, "no nccl-tests result rows (size count type redop root time algbw busbw ...) found")
    return list(series.values())
