"""The page's plots, drawn with matplotlib and written as inline SVG: no JavaScript, no network, a few tens of kB.

Why matplotlib's object API (Figure, not pyplot): no global figure state, so one process can render many
pages, and nothing opens a window on a login node. Text stays text (svg.fonttype none): the files are small
and the browser's fonts draw it. Every mark a test counts carries a gid, which matplotlib writes as the SVG
element's id (p2p-cell-*, busbw-line-*, nccl-ref-*, train-mem-*, train-time-*, fleet-*).
"""
from __future__ import annotations

import functools
import io
import math
import re
import statistics
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from envbuild.report.html_data import BusbwSeries, P2PMatrix, TrainRun, size_text
from envbuild.report.model import Status

STATUS_COLOR = {"pass": "#2e7d32", "warn": "#e09b00", "fail": "#c62828", "error": "#7b1fa2", "skip": "#9e9e9e"}
_INK = "#263238"
_GRID = "#cfd8dc"
_SERIES = ["#1565c0", "#ef6c00", "#00897b", "#6a1b9a", "#ad1457", "#5d4037", "#3949ab", "#7cb342"]
_RC = {
    "svg.fonttype": "none", "font.family": "sans-serif", "font.size": 9, "axes.titlesize": 10,
    "axes.edgecolor": "#90a4ae", "axes.labelcolor": _INK, "xtick.color": _INK, "ytick.color": _INK,
    "axes.spines.top": False, "axes.spines.right": False, "legend.frameon": False, "path.simplify": True,
}
GiB = float(1 << 30)


def _isnum(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _gid(*parts: object) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(str(p) for p in parts))


def _styled(draw: Callable[..., Any]) -> Callable[..., str]:
    """Run a plot function under the page's matplotlib style (and a fixed SVG id salt, so the same report gives
    the same bytes) and return its figure as SVG text."""

    @functools.wraps(draw)
    def wrapper(*args: Any, salt: str, **kwargs: Any) -> str:
        import matplotlib

        with matplotlib.rc_context({**_RC, "svg.hashsalt": salt}):
            fig = draw(*args, **kwargs)
            buf = io.StringIO()
            fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
        text = buf.getvalue()
        return text[text.index("<svg"):]  # no XML prolog or DOCTYPE: the SVG sits inside HTML

    return wrapper


def _figure(width: float, height: float, layout: Optional[str] = "constrained"):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout=layout)


def _size_ticks(ax, sizes: Sequence[int]) -> None:
    ticks = sorted(set(sizes))
    if len(ticks) > 8:
        step = math.ceil(len(ticks) / 8)
        ticks = ticks[::step]
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [size_text(t) for t in ticks])
    ax.minorticks_off()


@_styled
def p2p_heatmap(m: P2PMatrix):
    """src x dst one-way copy bandwidth, coloured by the fraction of the pair's line rate (red below 0.74, the
    pass line in Azure/azurehpc-health-checks; green from 0.83, what nvbandwidth reaches)."""
    from matplotlib.colors import LinearSegmentedColormap, Normalize
    from matplotlib.patches import Rectangle

    n = len(m.gpus)
    side = min(2.2 + 0.75 * n, 9.0)
    fig = _figure(side + 1.2, side)
    ax = fig.add_subplot()
    cmap = LinearSegmentedColormap.from_list("p2p", ["#c62828", "#f9a825", "#c5e1a5", "#2e7d32"])
    norm = Normalize(vmin=0.5, vmax=0.9, clip=True)
    pos = {g: i for i, g in enumerate(m.gpus)}
    small = n > 6
    for (src, dst), cell in sorted(m.cells.items()):
        x, y = pos[dst], pos[src]
        if cell.fraction is not None:
            face = cmap(norm(cell.fraction))
        elif cell.gbps is None:
            face = STATUS_COLOR["fail"] if cell.status in (Status.FAIL, Status.ERROR) else "#eceff1"
        else:
            face = "#b0bec5"
        ax.add_patch(Rectangle((x, y), 1, 1, facecolor=face, edgecolor="white", linewidth=1.5,
                               gid=_gid("p2p-cell", src, dst)))
        if cell.gbps is not None:
            label = f"{cell.gbps:.0f}" if small else f"{cell.gbps:.0f} GB/s"
            if cell.fraction is not None and not small:
                label += f"\n{cell.fraction:.2f}×"
        else:
            label = "no data" if cell.status is Status.PASS else cell.status.value.upper()
        light_face = (cell.fraction is not None and 0.62 < cell.fraction < 0.86) or face in ("#eceff1", "#b0bec5")
        ax.text(x + 0.5, y + 0.5, label, ha="center", va="center", fontsize=8 if small else 9,
                fontweight="normal" if cell.gbps is not None else "bold", color=_INK if light_face else "white")
    for g in m.gpus:
        ax.add_patch(Rectangle((pos[g], pos[g]), 1, 1, facecolor="#f5f5f5", edgecolor="white", hatch="//"))
    ax.set_xlim(0, n)
    ax.set_ylim(n, 0)
    ax.set_aspect("equal")
    ax.set_xticks([i + 0.5 for i in range(n)], [f"GPU {g}" for g in m.gpus])
    ax.set_yticks([i + 0.5 for i in range(n)], [f"GPU {g}" for g in m.gpus])
    ax.set_xlabel("destination")
    ax.set_ylabel("source")
    ax.tick_params(length=0)
    for side_ in ("left", "bottom"):
        ax.spines[side_].set_visible(False)
    from matplotlib.cm import ScalarMappable

    bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, shrink=0.8, pad=0.02)
    bar.set_label("fraction of line rate" + (f" ({m.line_rate_gbps:.0f} GB/s {m.link})" if m.line_rate_gbps else ""))
    bar.outline.set_visible(False)
    return fig


@_styled
def busbw_chart(groups: Dict[str, List[BusbwSeries]], line_rate: Optional[float],
                reference: Sequence[BusbwSeries] = (), highlight: Optional[str] = None):
    """One panel per collective: busbw against message size per series (a CUMEM setting, or a node of a fleet),
    the line rate as a dashed ceiling and nccl-tests' busbw as crosses where given. With more than eight series
    (a fleet) lines are thin and grey, and `highlight` (the slowest node) is drawn in red on top."""
    ops = list(groups)
    cols = min(len(ops), 3)
    rows = math.ceil(len(ops) / cols)
    width, height = (3.6 * cols + 0.6 if cols > 1 else 6.5), 2.9 * rows + 0.4
    fig = _figure(width, height, layout=None)  # fixed margins: constrained layout costs more than the drawing here
    fig.subplots_adjust(left=0.75 / width, right=1 - 0.15 / width, bottom=0.65 / height, top=1 - 0.35 / height,
                        wspace=0.12, hspace=0.75 / 2.9 + 0.15)
    axes = fig.subplots(rows, cols, squeeze=False, sharey=True)
    ref_by_op: Dict[str, List[BusbwSeries]] = {}
    for s in reference:
        ref_by_op.setdefault(s.op, []).append(s)
    crowd = max(len(v) for v in groups.values()) > 8
    top = line_rate or 0.0
    for i, op in enumerate(ops):
        ax = axes[i // cols][i % cols]
        all_sizes: List[int] = [z for s in groups[op] for z in s.sizes]
        top = max([top] + [b for s in groups[op] for b in s.busbw])
        if crowd:  # a fleet: the nodes as one collection of thin lines (fast to draw, one SVG group)
            _crowd(ax, [(s.sizes, s.busbw) for s in groups[op] if s.label != highlight], _gid("busbw-crowd", op))
        for j, s in enumerate(groups[op]):
            hot = highlight is not None and s.label == highlight
            if crowd and not hot:
                continue
            color = "#c62828" if crowd else _SERIES[j % len(_SERIES)]
            flag = f" ({s.status.value.upper()})" if s.status not in (None, Status.PASS) else ""
            ax.plot(s.sizes, s.busbw, marker="o", markersize=4, color=color, linewidth=2.0 if crowd else 1.8,
                    zorder=3, label=s.label + flag, gid=_gid("busbw-line", op, s.label))
        for k, ref in enumerate(ref_by_op.get(op, [])):
            ax.plot(ref.sizes, ref.busbw, linestyle="none", marker="x", markersize=7, markeredgewidth=1.8,
                    color="#212121", label=ref.label if k == 0 else None, zorder=4, gid=_gid("nccl-ref", op, k))
            all_sizes += ref.sizes
        if line_rate:
            ax.axhline(line_rate, color="#37474f", linestyle="--", linewidth=1.0, gid=_gid("line-rate", op))
            ax.text(min(all_sizes), line_rate, f" line rate {line_rate:.0f} GB/s", va="bottom", ha="left",
                    fontsize=8, color="#37474f")
        _size_ticks(ax, all_sizes)
        ax.set_title(op)
        ax.grid(True, color=_GRID, linewidth=0.6)
        if i % cols == 0:
            ax.set_ylabel("busbw (GB/s)")
        ax.set_xlabel("message size")
        handles, _ = ax.get_legend_handles_labels()
        if handles:
            ax.legend(fontsize=7, loc="best")
    for k in range(len(ops), rows * cols):
        axes[k // cols][k % cols].set_visible(False)
    axes[0][0].set_ylim(0, top * 1.12 if top else 1)
    return fig


_PHASES = [("train_s", "train", "#1565c0"), ("sync_s", "weight sync", "#00897b"), ("offload_s", "offload", "#ef6c00"),
           ("resume_s", "resume", "#f9a825"), ("rebuild_s", "rebuild groups", "#6a1b9a")]
_MEMORY = [("used_after_step", "used after step", "#1565c0", "-"), ("peak_allocated_bytes", "peak allocated", "#00897b", "-"),
           ("used_before_offload", "before offload", "#ef6c00", ":"), ("used_after_offload", "after offload", "#c62828", "--")]


@_styled
def train_chart(runs: List[TrainRun]):
    """Per step of the train-step cycle: GPU memory (GiB) on the left and time on the right. One run: the
    memory curves (before/after offload, after the step, peak) and the time split by phase as stacked bars;
    several runs (a fleet): used-after-step and cycle time, one line per node."""
    fig = _figure(10.5, 3.4)
    mem_ax, time_ax = fig.subplots(1, 2)
    many = len(runs) > 1
    ceiling = None
    fleet_mem: List[Tuple[List[float], List[float]]] = []
    fleet_time: List[Tuple[List[float], List[float]]] = []
    for j, run in enumerate(runs):
        steps = run.steps
        xs = [int(s.get("step", i)) for i, s in enumerate(steps)]
        if run.total_gib:
            ceiling = max(ceiling or 0.0, run.total_gib)
        if many:
            mem = [(x, s["used_after_step"] / GiB) for x, s in zip(xs, steps) if _isnum(s.get("used_after_step"))]
            tim = [(x, s.get("cycle_s") or s.get("train_s")) for x, s in zip(xs, steps)]
            fleet_mem.append(([p[0] for p in mem], [p[1] for p in mem]))
            fleet_time.append(([p[0] for p in tim if _isnum(p[1])], [p[1] for p in tim if _isnum(p[1])]))
            continue
        for key, label, color, style in _MEMORY:
            pts = [(x, s[key] / GiB) for x, s in zip(xs, steps) if _isnum(s.get(key))]
            if pts:
                mem_ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, linestyle=style,
                            color=color, label=label, gid=_gid("train-mem", key))
        bottom = {x: 0.0 for x in xs}
        for key, label, color in _PHASES:
            have = [(x, float(s[key])) for x, s in zip(xs, steps) if _isnum(s.get(key))]
            if not have:
                continue
            bars = time_ax.bar([h[0] for h in have], [h[1] for h in have], bottom=[bottom[h[0]] for h in have],
                               color=color, label=label, width=0.75)
            for (x, v), rect in zip(have, bars):
                rect.set_gid(_gid("train-time", key, x))
                bottom[x] += v
        plain = [x for x, s in zip(xs, steps) if not s.get("cycle")]
        if plain:
            time_ax.axvspan(min(plain) - 0.5, max(plain) + 0.5, color="#eceff1", zorder=0)
            time_ax.text((min(plain) + max(plain)) / 2, 1.0, "plain steps", ha="center", va="top",
                         fontsize=7, color="#546e7a", transform=time_ax.get_xaxis_transform())
    if many:
        _crowd(mem_ax, fleet_mem, "train-mem-nodes", color="#1565c0")
        _crowd(time_ax, fleet_time, "train-time-nodes", color="#ef6c00")
    if ceiling:
        mem_ax.axhline(ceiling, color="#37474f", linestyle="--", linewidth=1.0)
        mem_ax.text(0, ceiling, f" GPU memory {ceiling:.0f} GiB", va="top", fontsize=8, color="#37474f")
    mem_ax.set_title("GPU memory per step")
    mem_ax.set_ylabel("GiB")
    mem_ax.set_ylim(bottom=0)
    time_ax.set_title("cycle time, one line per node" if many else "step time by phase")
    if many:
        mem_ax.set_title("GPU memory after each step, one line per node")
    time_ax.set_ylabel("seconds")
    for ax in (mem_ax, time_ax):
        ax.set_xlabel("step")
        ax.grid(True, axis="y", color=_GRID, linewidth=0.6)
        ax.xaxis.get_major_locator().set_params(integer=True)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    return fig


@_styled
def fleet_p2p_chart(nodes: List[Tuple[str, P2PMatrix, Status]]):
    """Per node: the range of one-way P2P bandwidth over its GPU pairs as a fraction of line rate, a dot at the
    slowest pair (coloured by the node's gpu.p2p status) and the fleet's median as a line."""
    fig = _node_figure([n[0] for n in nodes])
    ax = fig.add_subplot()
    lows: List[float] = []
    spans, dots, colors, empty = [], [], [], []
    for i, (name, m, status) in enumerate(nodes):
        vals = [c.fraction for c in m.cells.values() if c.fraction is not None]
        if not vals:
            empty.append(i)
            continue
        lows.append(min(vals))
        spans.append((i, min(vals), max(vals)))
        dots.append((i, min(vals)))
        colors.append(STATUS_COLOR[status.value])
    if spans:
        ax.vlines([s[0] for s in spans], [s[1] for s in spans], [s[2] for s in spans], color="#90a4ae", linewidth=3)
        ax.scatter([d[0] for d in dots], [d[1] for d in dots], c=colors, s=22, zorder=3, gid="fleet-p2p")
    if empty:
        ax.scatter(empty, [0.02] * len(empty), marker="x", c=STATUS_COLOR["fail"], zorder=3, gid="fleet-p2p-none")
    if lows:
        ax.axhline(statistics.median(lows), color="#37474f", linestyle=":", linewidth=1)
    ax.axhline(0.74, color=STATUS_COLOR["fail"], linestyle="--", linewidth=0.8)
    ax.text(len(nodes) - 0.5, 0.74, "pass line 0.74 ", ha="right", va="bottom", fontsize=7, color=STATUS_COLOR["fail"])
    _node_axis(ax, [n[0] for n in nodes])
    ax.set_ylabel("one-way P2P / line rate")
    ax.set_ylim(0, 1.0)
    ax.set_title("one-way P2P per node: range over GPU pairs, dot = slowest pair")
    return fig


@_styled
def fleet_busbw_bars(nodes: List[Tuple[str, float, Status]], line_rate: Optional[float], size_text: str):
    """all_reduce busbw at the largest message size per node, against the fleet median and the line rate."""
    fig = _node_figure([n[0] for n in nodes])
    ax = fig.add_subplot()
    bars = ax.bar(range(len(nodes)), [n[1] for n in nodes], color=[STATUS_COLOR[n[2].value] for n in nodes], width=0.7)
    for rect, (name, _, _) in zip(bars, nodes):
        rect.set_gid(_gid("fleet-busbw", name))
    med = statistics.median([n[1] for n in nodes])
    ax.axhline(med, color="#37474f", linestyle=":", linewidth=1)
    ax.text(-0.4, med, f"median {med:.0f} ", va="bottom", fontsize=7, color="#37474f")
    if line_rate:
        ax.axhline(line_rate, color="#37474f", linestyle="--", linewidth=1)
        ax.text(-0.4, line_rate, f"line rate {line_rate:.0f} GB/s", va="bottom", fontsize=7, color="#37474f")
    _node_axis(ax, [n[0] for n in nodes])
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(f"all_reduce busbw at {size_text} per node")
    return fig


def _crowd(ax, lines: List[Tuple[Sequence[float], Sequence[float]]], gid: str, color: str = "#90a4ae") -> None:
    """Many series as one LineCollection: 64 nodes draw in one call instead of 64 (ax.plot's cost per line)."""
    from matplotlib.collections import LineCollection

    segs = [list(zip(xs, ys)) for xs, ys in lines if len(xs)]
    if segs:
        ax.add_collection(LineCollection(segs, colors=color, linewidths=0.8, zorder=2, gid=gid), autolim=True)
        ax.autoscale_view()


def _node_figure(names: List[str]):
    """A figure with one x position per node and fixed margins (room below for the rotated names): constrained
    layout would measure every one of 64 rotated labels twice, the largest cost of a fleet page."""
    width = min(max(6.5, 2.5 + 0.16 * len(names)), 14.0)
    below = 0.45 + 0.06 * max((len(n) for n in names), default=4)  # inches: rotated names at fontsize 7
    height = 2.6 + below
    fig = _figure(width, height, layout=None)
    fig.subplots_adjust(left=0.7 / width, right=1 - 0.2 / width, bottom=below / height, top=1 - 0.35 / height)
    return fig


def _node_axis(ax, names: List[str]) -> None:
    ax.set_xlim(-0.7, len(names) - 0.3)
    if len(names) <= 40:
        ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
    else:
        step = math.ceil(len(names) / 32)
        ax.set_xticks(range(0, len(names), step), names[::step], rotation=60, ha="right", fontsize=7)
    ax.grid(True, axis="y", color=_GRID, linewidth=0.6)
