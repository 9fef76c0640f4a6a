"""Turning a LaunchOutcome (what each rank of a payload did) into the Results a check returns.

Shared by every GPU probe check so that hangs, crashes and per-rank metrics read the same in every
report: a hang is a `fail` naming the phase of every rank; a crash is a `fail` with the stderr tail;
a payload that broke without a verdict is an `error`; otherwise each rank's own verdict counts, and the
worst one wins.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence

from envbuild.doctor.launcher import LaunchOutcome, RankOutcome
from envbuild.doctor.verdict import DEFAULT_HANG_CAUSES, verdict
from envbuild.report.model import Metric, Result, Status

STACK_CHARS = 3000
TAIL_LINES = 25


def _tail_lines(text: str, n: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def phases_by_rank(outcome: LaunchOutcome) -> Dict[str, Optional[str]]:
    """rank<k> -> the phase it was in last: where a hang or crash happened, for the evidence."""
    return {f"rank{r.rank}": r.phase for r in outcome.ranks}


# Native frames that say what a rank stuck before its first phase waits on (py-spy --native, faulthandler), most
# specific first: the CUDA driver's initialisation, a context, NCCL's first communicator, the dynamic loader.
STUCK_START_FRAMES = (("cuInit", "CUDA's cuInit"), ("cuDevicePrimaryCtxRetain", "creating a CUDA context"),
                      ("cudaGetDeviceCount", "cudaGetDeviceCount (CUDA initialisation)"),
                      ("ncclCommInitRank", "ncclCommInitRank"), ("_dl_map_object", "the dynamic loader"),
                      ("_find_and_load", "a Python import"))


def stuck_start_where(stack_dump: str) -> str:
    """What the stacks of a rank stuck before its first phase show it in ("" when they name nothing known)."""
    for frame, label in STUCK_START_FRAMES:
        if frame in stack_dump:
            return label
    return ""


def _rank_line(r: RankOutcome, outcome: LaunchOutcome) -> str:
    where = f"in phase {r.phase!r}" if r.phase else "before its first phase"
    if r.rank in outcome.hung_ranks:
        held = f" for {r.phase_elapsed_s:.0f} s" if r.phase_elapsed_s is not None else ""
        if r.state == "T":
            return f"rank {r.rank} was stopped (state T, e.g. SIGSTOP) {where}{held}"
        if not r.phase:
            inside = stuck_start_where(r.stack_dump)
            return (f"rank {r.rank} was stuck starting: no phase{held} after its start" +
                    (f", inside {inside} (see its stack)" if inside else " (see its stack)"))
        return f"rank {r.rank} hung {where}{held}"
    if r.rank in outcome.crashed_ranks:
        return f"rank {r.rank} exited with code {r.returncode} {where}"
    return f"rank {r.rank} finished (code {r.returncode})"


def failure_result(outcome: LaunchOutcome, *, what: str, hang_causes: Sequence[str] = DEFAULT_HANG_CAUSES,
                   crash_causes: Sequence[str] = (), subject: Optional[str] = None) -> Optional[Result]:
    """A `fail` (hang or crash) or `error` (no verdict) Result, or None when every rank gave a verdict.

    `what` names the probe in the summary ("NCCL collectives"). Evidence carries each rank's phase,
    return code, stderr tail and stack dump, the run directory and any leftover PID (which would be a
    launcher bug, reported rather than hidden).
    """
    if outcome.ok:
        return None
    evidence: Dict[str, Any] = {
        "phases": phases_by_rank(outcome),
        "returncodes": {f"rank{r.rank}": r.returncode for r in outcome.ranks},
        "run_dir": outcome.run_dir,
        "wall_s": outcome.wall_s,
        "stopped_because": outcome.reason or None,
    }
    for r in outcome.ranks:
        if r.stderr_tail.strip():
            evidence[f"rank{r.rank}_stderr_tail"] = _tail_lines(r.stderr_tail)
        if r.stack_dump:
            evidence[f"rank{r.rank}_stacks"] = r.stack_dump[-STACK_CHARS:]
    evidence["pids"] = {f"rank{r.rank}": r.pid for r in outcome.ranks}
    # what was still alive after the kill: must be [] (the launcher kills by group and by descendant)
    evidence["leftover_pids"] = outcome.leftover_pids
    lines = "; ".join(_rank_line(r, outcome) for r in outcome.ranks if r.rank in outcome.hung_ranks
                      or r.rank in outcome.crashed_ranks)
    if outcome.hung_ranks and not outcome.crashed_ranks:
        return verdict(Status.FAIL,
                      f"{what} hung: {lines} ({outcome.reason}); every process was killed",
                      evidence=evidence, causes=list(hang_causes), subject=subject,
                      remediation="look at the stacks in the evidence; check for stale GPU processes "
                                  "(nvidia-smi --query-compute-apps) and rerun with NCCL_DEBUG=INFO")
    if outcome.crashed_ranks:
        first = next(r for r in outcome.ranks if r.rank == outcome.crashed_ranks[0])
        msg = _last_error_line(first)
        # A payload that raised still wrote an "error" verdict: when it names a cause, keep its summary. A rank
        # that answered pass or warn and crashed afterwards (its teardown) is told by where it crashed.
        own = first.result or {}
        summary = f"{what} failed: {lines}" + (f": {msg}" if msg else "")
        if own.get("summary") and own.get("status") in ("error", "fail"):
            summary = f"{what} failed on rank {first.rank}: {own['summary']}"
        return verdict(Status.FAIL, summary, evidence=evidence,
                      causes=list(crash_causes) or list(own.get("causes", [])), subject=subject,
                      remediation="read the stderr tail in the evidence; rerun with NCCL_DEBUG=INFO")
    missing = [r.rank for r in outcome.ranks if r.result is None]
    return verdict(Status.ERROR,
                  f"{what}: rank(s) {missing} exited 0 without a result; the probe itself is broken",
                  evidence=evidence, subject=subject)


def _last_error_line(r: RankOutcome) -> str:
    """The last line of the stderr tail that looks like an error, for the one-line summary."""
    for line in reversed(r.stderr_tail.strip().splitlines()):
        s = line.strip()
        if s and ("Error" in s or "error" in s or "WARN" in s or "Failure" in s or "failure" in s):
            return s[:300]
    lines = r.stderr_tail.strip().splitlines()
    return lines[-1][:300] if lines else ""


def metrics_of(data: Dict[str, Any], prefix: str = "") -> List[Metric]:
    """The Metrics a payload emitted (JSON dicts) as report Metrics, names prefixed to keep ranks apart."""
    out = []
    for m in data.get("metrics", []) or []:
        out.append(Metric(name=prefix + str(m["name"]), value=float(m["value"]), unit=str(m.get("unit", "")),
                          expect=m.get("expect"), source=m.get("source")))
    return out


def rank_results(outcome: LaunchOutcome, subject_of: Optional[Dict[int, str]] = None) -> List[Result]:
    """One Result per rank from its own verdict (for probes where each rank tests its own GPU)."""
    out = []
    for r in outcome.ranks:
        data = r.result or {}
        status = status_of(data.get("status"))
        out.append(verdict(status, str(data.get("summary") or "no summary"),
                          evidence=dict(data.get("evidence") or {}), metrics=metrics_of(data),
                          causes=list(data.get("causes") or []), remediation=data.get("remediation"),
                          subject=(subject_of or {}).get(r.rank, f"rank{r.rank}")))
    return out


def status_of(value: Any) -> Status:
    """A payload's verdict string as a Status; anything else is an `error` (the payload broke its contract)."""
    try:
        return Status(str(value))
    except ValueError:
        return Status.ERROR


def worst(statuses: Iterable[Status]) -> Status:
    """The most severe status (Status.rank order); PASS for none, so "no problem found" needs no special case."""
    return max(statuses, key=lambda s: s.rank, default=Status.PASS)


def merged_result(outcome: LaunchOutcome, *, metric_ranks: Optional[Sequence[int]] = (0,)) -> Result:
    """One Result for a collective probe: the worst rank verdict, summaries of non-passing ranks,
    metrics from `metric_ranks` (rank 0 by default, as collectives measure the same thing everywhere;
    None = every rank, names prefixed rank<k>.), evidence per rank."""
    ranks = [r for r in outcome.ranks if r.result is not None]
    status = worst(status_of(r.result.get("status")) for r in ranks)
    bad = [r for r in ranks if status_of(r.result.get("status")) == status and status != Status.PASS]
    lead = bad[0] if bad else ranks[0]
    summary = str(lead.result.get("summary") or "")
    if bad and len(bad) < len(ranks):
        summary = f"rank {lead.rank}: {summary}"
    metrics: List[Metric] = []
    for r in ranks:
        if metric_ranks is None:
            metrics += metrics_of(r.result, prefix=f"rank{r.rank}.")
        elif r.rank in metric_ranks:
            metrics += metrics_of(r.result)
    evidence: Dict[str, Any] = {}
    for r in ranks:
        ev = r.result.get("evidence") or {}
        if len(ranks) == 1:
            evidence.update(ev)
        else:
            evidence[f"rank{r.rank}"] = ev
    causes: List[str] = []
    for r in bad:
        for c in r.result.get("causes") or []:
            if c not in causes:
                causes.append(c)
    return verdict(status, summary, evidence=evidence, metrics=metrics, causes=causes,
                   remediation=lead.result.get("remediation"))
