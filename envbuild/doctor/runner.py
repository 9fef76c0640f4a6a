"""Runs selected checks against a context and turns every outcome, crashes included, into Results.

The runner is the one place that launches a probe check (through envbuild/doctor/probe_run.py), turns its
hang or crash into a result, and stamps the check's id and category on every result a check returns.
"""
from __future__ import annotations

import contextlib
import time
import traceback
from typing import TYPE_CHECKING, Callable, ContextManager, List, Optional, Sequence

from envbuild.doctor.context import DoctorContext
from envbuild.doctor.probe_run import ProbeBroken, ProbeRun
from envbuild.doctor.registry import Check, verdict
from envbuild.facts.bundle_files import crash_note
from envbuild.facts.source import FactHung, FactUnavailable
from envbuild.report.model import Result, Status

if TYPE_CHECKING:  # pragma: no cover
    from envbuild.doctor.interrupt import Stopped
    from envbuild.doctor.launcher import LaunchOutcome

# Told of each result as it comes (the live progress). The flag is True on the first result of a check judged again
# (judge_exits): that result and the check's others after it replace every result of the check told before, so a
# counter of rows counts the check's rows once.
OnResult = Callable[[Result, bool], None]


def unmet_need(check: Check, ctx: DoctorContext) -> Optional[str]:
    """The reason a check cannot run here, or None. Shown as the summary of its `skip`."""
    if "profile" in check.needs and ctx.profile is None:
        return "needs a profile: pass --profile NAME (see `envbuild profiles`)"
    if "live" in check.needs and not ctx.facts.is_live:
        return f"needs the live node; this run replays {ctx.facts.description}"
    if "gpu" in check.needs or "multi_gpu" in check.needs:
        if not ctx.facts.is_live:
            return f"GPU probes need the live node; this run replays {ctx.facts.description}"
        reason = ctx.nvml_unavailable_reason()
        if reason is not None:
            return reason if "driver" in reason.lower() else f"no usable NVIDIA driver: {reason}"
        gpus = ctx.gpu_indices()
        if not gpus:
            return "no GPU visible to NVML" + (f" among --gpus {ctx.gpus}" if ctx.gpus is not None else "")
        if "multi_gpu" in check.needs and len(gpus) < 2:
            return f"needs at least 2 GPUs; {len(gpus)} selected"
    return None


def run_check(check: Check, ctx: DoctorContext, behind: Optional[List[ProbeRun]] = None) -> List[Result]:
    """One check's results, never an exception: a broken check must not hide the verdicts of the others.

    `behind`: where a probe check's run goes when its ranks are still exiting (ProbeSpec.teardown_behind); its
    results stand until judge_exits has read those exits."""
    start = time.monotonic()
    reason = unmet_need(check, ctx)
    if reason is not None:
        # --require-gpu: a node that should have GPUs and shows none fails instead of skipping (not one whose
        # driver hangs: node.driver_version already fails for that, and "install the driver" would mislead).
        gpu_missing = ctx.require_gpu and ctx.facts.is_live and bool({"gpu", "multi_gpu"} & check.needs) \
            and not ctx.gpu_indices() and not ctx.nvml_hung()
        status = Status.FAIL if gpu_missing else Status.SKIP
        results = [verdict(status, reason,
                           remediation="install the NVIDIA driver or run on a GPU node" if gpu_missing else None)]
    else:
        run = ProbeRun(check, ctx) if check.probe is not None else None
        results = _judged(check, ctx, run)
        if run is not None and run.outcomes:  # last in the evidence: what fold.py searches comes first
            timing = run.launch_timing()
            for r in results:
                r.evidence = {**(r.evidence or {}), "launch": (r.evidence or {}).get("launch", timing)}
            if behind is not None and any(o.drain is not None for o in run.outcomes):
                behind.append(run)
    return _stamped(check, results, time.monotonic() - start)


def _judged(check: Check, ctx: DoctorContext, run: Optional[ProbeRun]) -> List[Result]:
    """The check function's results, its failures included: a hung or crashed probe's fail, a node command that
    hung, a fact it could not read, or the check itself broken."""
    mark = len(getattr(ctx.facts, "touched", ()))  # bundle replays: which files this check read
    try:
        out = check.fn(ctx) if run is None else check.fn(ctx, run)
        return out if isinstance(out, list) else [out]
    except ProbeBroken as exc:  # the payload hung or crashed: its fail, built by the runner
        return [exc.result]
    except FactHung as exc:  # a node command that hung is the node's problem, not a fact we may skip
        return [verdict(Status.ERROR, str(exc), evidence={"hung": True},
                        remediation="find what blocks it on the node (`ps -eo pid,stat,wchan:30,cmd | "
                                    "grep ' D'`: processes in D state), then rerun")]
    except FactUnavailable as exc:
        return [verdict(Status.SKIP, str(exc))]
    except Exception as exc:  # a broken check is reported, never fatal to the run
        tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
        return [verdict(Status.ERROR, f"the check itself failed: {type(exc).__name__}: {exc}"
                                      f"{crash_note(ctx.facts, mark)}", evidence={"traceback": tail})]


class ReplayRun(ProbeRun):
    """A probe check's run judged again on the outcomes its launches ended with, their ranks' exits included (read
    by the drains): the check function runs as it did, its launches answered from `finals`, in order, instead of
    starting ranks. So a rank that hung or crashed after its result is judged by the check itself (its per-GPU rows,
    its comparisons, the causes it names), as it would have been had the launch waited for the exit."""

    def __init__(self, run: ProbeRun, finals: List["LaunchOutcome"]):
        super().__init__(run.check, run.ctx)
        self._finals = list(finals)

    def launch_outcome(self, args: Sequence[str] = (), **kw: object) -> "LaunchOutcome":
        if not self._finals:
            raise RuntimeError(f"{self.check.id} asked for more launches than it made")
        outcome = self._finals.pop(0)
        self.outcomes.append(outcome)
        return outcome


def _stamped(check: Check, results: List[Result], elapsed: float) -> List[Result]:
    """The check's id, category and share of `elapsed` on each result; its own causes on a fail or warn that
    names none."""
    for r in results:
        r.check_id, r.category = check.id, check.category
        r.duration_s = round(elapsed / len(results), 4)
        if r.status in (Status.FAIL, Status.WARN) and not r.causes:
            r.causes = list(check.causes)
    return results


def judge_exits(behind: List[ProbeRun], results: List[Result],
                on_result: Optional[OnResult] = None) -> List[Result]:
    """`results` once the checks whose ranks exited behind the run (ProbeSpec.teardown_behind) have been read
    again with those exits. A rank that crashed or hung after its result: the check is judged again on the outcomes
    with the exits (ReplayRun), as it would have been inside the launch, and those results replace its first ones
    (kept in the evidence as `results_before_exit`). Otherwise the results stay, their launch evidence completed with
    the exit times. Waits for every drain (each bounded by its launch's deadlines)."""
    for run in behind:
        finals = [o.drain.wait() if o.drain is not None else o for o in run.outcomes]
        broke = any(o.drain is not None and not f.ok for o, f in zip(run.outcomes, finals))
        own = [r for r in results if r.check_id == run.check.id]
        if not broke:
            run.outcomes[:] = finals
            timing = run.launch_timing()
            for r in own:
                if "launch" in (r.evidence or {}):
                    r.evidence["launch"] = timing
            continue
        replay = ReplayRun(run, finals)
        fresh = _judged(run.check, run.ctx, replay)
        timing = replay.launch_timing()
        before = [{"status": r.status.value, "summary": r.summary, "subject": r.subject} for r in own]
        for r in fresh:
            r.evidence = {**(r.evidence or {}), "results_before_exit": before, "launch": timing}
        fresh = _stamped(run.check, fresh, sum(r.duration_s or 0.0 for r in own))
        at = results.index(own[0]) if own else len(results)
        results = [r for r in results if r.check_id != run.check.id]
        results[at:at] = fresh
        if on_result is not None:
            for r in fresh:
                on_result(r, r is fresh[0])
    for r in results:  # a probe that waited for an earlier one's exit in vain measured beside it: say so
        beside = (r.evidence or {}).get("settle") or {}
        if beside.get("still_running") and "measured beside" not in r.summary:
            r.summary += (f" (measured beside pid {', '.join(map(str, beside['still_running']))} of an earlier probe, "
                          f"still exiting after {beside.get('waited_s')} s)")
    return results


def cut_short(behind: List[ProbeRun], results: List[Result], stop: "Stopped") -> List[Result]:
    """`results` after a stop signal: a check whose ranks were still exiting (their drain not done) is not judged,
    since how its ranks would have ended is unknown; its results become an interrupted skip."""
    exiting = {run.check.id: run.check for run in behind
               if any(o.drain is not None and not o.drain.done.is_set() for o in run.outcomes)}
    if not exiting:
        return results
    out = [r for r in results if r.check_id not in exiting]
    for cid, check in exiting.items():
        before = [{"status": x.status.value, "summary": x.summary} for x in results if x.check_id == cid]
        out.append(Result(check.id, check.category, Status.SKIP,
                          f"interrupted by {stop.name} while its ranks were exiting after their results "
                          "(phase 'teardown'); not judged",
                          evidence={"interrupted": True, "signal": stop.name, "where": "teardown",
                                    "results_before_exit": before}))
    return out


def mode_skip(check: Check, ctx: DoctorContext) -> Result:
    """The `skip` of a check this mode does not run, so a report always lists every check and says why.

    A need the node cannot meet (no driver, a bundle) is the better reason; else name the mode to use.
    """
    reason = unmet_need(check, ctx)
    if reason is None:
        flags = " or ".join(f"--{m}" for m in ("quick", "full") if m in check.modes)
        reason = f"not part of the {ctx.mode} run; runs with {flags}"
    return Result(check.id, check.category, Status.SKIP, reason)


def interrupted_result(check: Check, stop: "Stopped", elapsed_s: float) -> Result:
    """The check a stop signal cut short: a skip (nothing was judged) that says so, with the phase the probe's
    ranks were in when the launcher stopped them."""
    where = f" ({stop.where})" if getattr(stop, "where", "") else ""
    return Result(check.id, check.category, Status.SKIP,
                  f"interrupted by {stop.name} after {elapsed_s:.1f} s{where}; not judged",
                  evidence={"interrupted": True, "signal": stop.name, "where": getattr(stop, "where", "")},
                  duration_s=round(elapsed_s, 4))


def not_run_result(check: Check, stop: "Stopped") -> Result:
    return Result(check.id, check.category, Status.SKIP, f"not run: the doctor was stopped by {stop.name}",
                  evidence={"interrupted": True, "signal": stop.name})


def prepare_warm(upcoming: List[Check], ctx: DoctorContext) -> None:
    """Have warm ranks started, while this check runs, for the next probe check whose ranks need start-time
    variables (ProbeSpec.start_env). Best effort: without them that check's ranks just start cold."""
    from envbuild.doctor import warm

    if warm.active() is None:
        return
    for check in upcoming:
        if check.probe is not None and check.probe.start_env is not None and unmet_need(check, ctx) is None:
            try:
                run = ProbeRun(check, ctx)
                warm.prepare(run.start_env(), run.nranks)
            except Exception:  # noqa: BLE001 - a check's own launch reports what is wrong with it
                pass
            return


def next_check(remaining: List[Check], ctx: DoctorContext) -> int:
    """Index in `remaining` of the check to start now: the first one, unless the stack probe still runs and it
    reads the probe's facts (need "stack") or uses a GPU (a probe, or need "gpu"/"multi_gpu": the probe holds a
    CUDA context and an NCCL communicator on GPU 0 until it exits, which would move a probe's free-memory and
    timing readings); then the first one after it that does neither. So the node checks never wait for it."""
    if ctx.facts.stack_pending():
        for i, check in enumerate(remaining):
            if not ("stack" in check.needs or check.probe is not None or {"gpu", "multi_gpu"} & check.needs):
                return i
    return 0


def run_checks(checks: List[Check], ctx: DoctorContext,
               on_result: Optional[OnResult] = None,
               on_start: Optional[Callable[[Check, List[str]], None]] = None) -> List[Result]:
    """Run `checks` (in the order next_check picks; the results come back in the order of `checks`); `on_start`
    is told of each check (and the ids still to come) as it begins, `on_result` sees each result as it comes
    (the live progress of long GPU probes; OnResult).

    A stop signal (envbuild.doctor.interrupt.Stopped) propagates, carrying in `stop.partial` every result so
    far, the interrupted check marked, and a `not run` skip for each check not started, so the caller can still
    write a complete report."""
    from envbuild.doctor.interrupt import Stopped

    order = {c.id: i for i, c in enumerate(checks)}

    def in_order(results: List[Result]) -> List[Result]:
        return sorted(results, key=lambda r: order.get(r.check_id, len(order)))

    from envbuild.doctor.launcher import abort_drains, wait_drains

    results: List[Result] = []
    behind: List[ProbeRun] = []
    remaining = list(checks)

    def give_up(stop: "Stopped", extra: List[Result]) -> None:
        """A stop: the checks whose ranks still exit are not judged, those ranks are killed, the report keeps the
        rest."""
        stop.partial = in_order(cut_short(behind, results, stop) + extra)
        abort_drains()

    while remaining:
        check = remaining.pop(next_check(remaining, ctx))
        if on_start is not None:
            on_start(check, [c.id for c in remaining])
        prepare_warm(remaining, ctx)
        began = time.monotonic()
        try:
            if not (check.probe is not None and check.probe.starts_beside_teardown):
                wait_drains()  # an earlier probe's ranks still exiting: this check would see them on the GPU
            for r in run_check(check, ctx, behind):
                results.append(r)
                if on_result is not None:
                    on_result(r, False)
        except Stopped as stop:
            give_up(stop, [interrupted_result(check, stop, time.monotonic() - began)] +
                    [not_run_result(c, stop) for c in remaining])
            raise
    try:
        return in_order(judge_exits(behind, results, on_result))
    except Stopped as stop:  # while the last probes' ranks were exiting: every other check has its results
        give_up(stop, [])
        raise


def warm_ranks(ctx: DoctorContext, checks: List[Check]) -> ContextManager[object]:
    """The warm pool for this run's probe ranks (envbuild/doctor/warm.py), or nothing when it would not help:
    a static run, a bundle replay, no GPU, no probe check selected, or ENVBUILD_WARM_POOL=0."""
    import sys

    from envbuild.doctor import warm

    probes = [c for c in checks if c.probe is not None]
    gpus = ctx.gpu_indices() if probes and ctx.facts.is_live else []
    if not warm.wanted(ctx.mode, ctx.facts.is_live, len(gpus), bool(probes)):
        return contextlib.nullcontext()
    # two per GPU rank: a launch takes one and the next check's is already importing torch (a replacement
    # started only at the take would be ready a torch import later, after the next check has begun)
    return warm.pool(ctx.python or sys.executable, 2 * len(gpus) or 2, gpus or None)


def run_selected(ctx: DoctorContext, patterns: Sequence[str] = (), skips: Sequence[str] = (),
                 on_result: Optional[OnResult] = None,
                 on_start: Optional[Callable[[Check, List[str]], None]] = None) -> List[Result]:
    """Run the checks of ctx.mode matching `patterns` (all when empty), minus `skips`.

    Without patterns the report also lists, as skips with their reason, the checks this mode leaves
    out (the GPU probes of a static run), so a reader sees every check and why it did not run.
    """
    from envbuild.doctor.interrupt import Stopped
    from envbuild.doctor.registry import select

    left_out: List[Result] = []
    if not patterns:
        left_out = [mode_skip(c, ctx) for c in select((), skips, mode=None) if ctx.mode not in c.modes]
    chosen = select(patterns, skips, mode=ctx.mode)
    try:
        with warm_ranks(ctx, chosen):
            results = run_checks(chosen, ctx, on_result=on_result, on_start=on_start)
    except Stopped as stop:
        stop.partial = list(getattr(stop, "partial", [])) + left_out
        raise
    if on_result is not None:  # rows of the table too: the live counter reaches the table's row count
        for r in left_out:
            on_result(r, False)
    return results + left_out
