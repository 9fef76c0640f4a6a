"""The doctor's live counter numbers the rows its report table will print, not the checks it runs.

A check may print several rows (one per GPU, gpu.cumem_ipc one per sub-test, comm.weight_sync three) and the
checks a mode leaves out print a skip row each, so "[12/32]" over a table of 41 rows (issue 26) told a reader
neither how far the run was nor where a line sits in the table. Here the total is the rows each check printed
in this node's last run of the mode (1 for a check never run), plus one per left-out check; it is corrected as
each check ends (a check that printed more or fewer rows than last time), and a check judged again after a rank's
late exit (runner.judge_exits) has its new rows replace the ones it printed, so the last line reads N/N with N the
table's rows. The row counts are kept beside the check durations (envbuild/report/progress.py's file, under
"<mode>.rows").
"""
from __future__ import annotations

import time
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence

from envbuild.progress import fmt_seconds
from envbuild.report.model import Result
from envbuild.report.progress import STATUS_STYLE, STATUS_WORD, Progress, _one_line, load_durations, save_durations


def rows_key(mode: str) -> str:
    return f"{mode}.rows"


class RowProgress(Progress):
    """Progress whose `[i/N]` counts table rows: `check_ids` are the checks the run executes, `left_out` the
    checks whose mode-skip rows the report adds (the runner passes those rows through `result` too)."""

    def __init__(self, mode: str, check_ids: Sequence[str], left_out: int, quiet: bool = False, stream: Any = None,
                 estimates: Optional[Dict[str, float]] = None):
        last = load_durations(rows_key(mode))
        self.mode = mode
        self.planned: Dict[str, int] = {cid: max(1, int(last.get(cid, 1))) for cid in check_ids}
        self.rows_of: Counter = Counter()
        self.rows = 0
        super().__init__(total=sum(self.planned.values()) + left_out,
                         estimates=load_durations(mode) if estimates is None else estimates, quiet=quiet,
                         stream=stream)

    def _reconcile(self, check_id: Optional[str]) -> None:
        """A finished check printed fewer rows than planned: the total shrinks by the difference."""
        if check_id is None or check_id not in self.planned:
            return
        short = self.planned[check_id] - self.rows_of[check_id]
        if short > 0:
            self.total -= short
            self.planned[check_id] = self.rows_of[check_id]

    def _finish_current(self) -> None:
        self._reconcile(self._current)
        super()._finish_current()

    def result(self, result: Result, replaces: bool = False) -> None:
        """One row. `replaces`: the first result of a check judged again after a rank's late exit
        (runner.judge_exits): the rows the check printed before leave the count and its plan, so its new rows,
        counted from here, are its only ones, live and in what `save` records."""
        cid = result.check_id
        if replaces and cid in self.planned:
            self.rows -= self.rows_of[cid]
            self.total -= self.planned[cid]
            self.rows_of[cid] = self.planned[cid] = 0
        self.rows_of[cid] += 1
        self.rows += 1
        if cid in self.planned and self.rows_of[cid] > self.planned[cid]:  # more rows than last time
            self.planned[cid] += 1
            self.total += 1
        self.total = max(self.total, self.rows)
        if self.quiet:
            return
        took = time.monotonic() - self._started_at if self._current == cid else result.duration_s
        line = (f"[{self.rows:>{len(str(self.total))}}/{self.total}] {STATUS_WORD[result.status]:<5} "
                f"{cid}  {fmt_seconds(took or 0.0)}  {_one_line(result.summary)}")
        self.display.line(line, style=STATUS_STYLE[result.status])

    def status_text(self) -> str:
        text = super().status_text()
        return f"[{min(self.rows + 1, self.total)}/{self.total}]" + text[text.index("]") + 1:]

    def save(self) -> None:
        """Record this run's rows per check for the next run's total (with the durations)."""
        save_durations(rows_key(self.mode), {cid: float(n) for cid, n in self.rows_of.items() if cid in self.planned})


def left_out_count(patterns: List[str], skips: List[str], mode: str) -> int:
    """How many mode-skip rows the report will add (runner.run_selected adds one per check the mode leaves out,
    only when no --check was given)."""
    if patterns:
        return 0
    from envbuild.doctor.registry import select

    return sum(1 for c in select((), skips, mode=None) if mode not in c.modes)
