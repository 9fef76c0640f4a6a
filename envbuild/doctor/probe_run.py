"""What a probe check is handed by the runner: its spec made concrete for this run (size, GPUs, options) and the
one way to launch its payload.

The runner owns launching: `run.launch(args)` starts the payload under envbuild/doctor/launcher.py with the
spec's ranks, deadline for the mode and phase deadlines; a hang or a crash becomes the check's `fail` here
(`ProbeBroken`, caught by the runner), so a check module holds only its judgement. A probe that must keep the
verdicts of the ranks that did answer next to a broken one uses `launch_outcome` and `failure` itself.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from envbuild.report.model import Result

if TYPE_CHECKING:  # pragma: no cover
    from envbuild.doctor.context import DoctorContext
    from envbuild.doctor.launcher import LaunchOutcome
    from envbuild.doctor.registry import Check


# A quick probe's phases last seconds on a healthy node (docs/gpu-runs: the longest quick phase, NCCL init with the
# torch import before it, took under 10 s); a rank stuck in one is reported after this long, not after the full
# mode's 60-90 s. Applies to the deadlines a spec declares; deadlines a check passes from a user's --set stay.
QUICK_PHASE_CAP_S = 30.0


class ProbeBroken(Exception):
    """A launch that hung or crashed; carries the Result that reports it (raised by ProbeRun.launch)."""

    def __init__(self, result: Result):
        super().__init__(result.summary)
        self.result = result


class ProbeRun:
    """One probe check's run: `mode` (quick/full), `gpus`, typed `option(key)`, `launch(...)`."""

    def __init__(self, check: "Check", ctx: "DoctorContext"):
        if check.probe is None:
            raise ValueError(f"{check.id} is not a probe check")
        self.check = check
        self.spec = check.probe
        self.ctx = ctx
        # a static run that names a probe with --check gets the quick size: probes have no static variant
        self.mode = "full" if ctx.mode == "full" else "quick"
        gpus = ctx.gpu_indices()
        self.gpus: List[int] = gpus[: self.spec.max_gpus] if self.spec.max_gpus else gpus
        self.outcomes: List["LaunchOutcome"] = []  # every launch of this run, for launch_timing()

    @property
    def nranks(self) -> int:
        """Processes per launch: one per GPU, or one that sees them all."""
        return len(self.gpus) if self.spec.ranks == "per_gpu" else 1

    @property
    def deadline_s(self) -> float:
        return float(self.spec.deadline_s[self.mode])

    def phase_deadlines(self) -> Dict[str, float]:
        """The spec's phase deadlines, each capped at QUICK_PHASE_CAP_S in a quick run, where also every other
        phase ("*") and the time from a rank's start to its first phase (launcher.START) get the cap: no wait of a
        quick run is bounded by the whole-run deadline alone. A full run keeps the declared ones and bounds the
        start like any phase ("*") when the spec declares that."""
        from envbuild.doctor.launcher import START

        declared = {k: float(v) for k, v in self.spec.phase_deadlines.items()}
        if self.mode == "quick":
            capped = {k: min(v, QUICK_PHASE_CAP_S) for k, v in declared.items()}
            capped.setdefault("*", QUICK_PHASE_CAP_S)
            capped.setdefault(START, QUICK_PHASE_CAP_S)
            return capped
        if "*" in declared:
            declared.setdefault(START, declared["*"])
        return declared

    def start_env(self) -> Dict[str, str]:
        """The variables the spec says this check's ranks start with ({} when it declares none)."""
        return dict(self.spec.start_env(self)) if self.spec.start_env is not None else {}

    def payload_start_env(self, args: Sequence[str]) -> Dict[str, str]:
        """Ask the payload (`<payload> --print-start-env ARGS`, under the env's python, no torch imported) which
        variables it would re-execute itself with; asked once per run and arguments. {} when it cannot say."""
        import json

        from envbuild.children import CommandHung, run_bounded
        from envbuild.doctor.launcher import resolve_payload

        key = f"start_env {self.spec.payload} {json.dumps(list(args))}"
        cache = self.ctx.cache
        if key not in cache:
            try:
                proc = run_bounded([self.ctx.python or sys.executable, str(resolve_payload(self.spec.payload)),
                                    "--print-start-env", *args], 30.0)
                found = json.loads(proc.stdout) if proc.returncode == 0 else {}
            except (OSError, ValueError, CommandHung):
                found = {}
            cache[key] = {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
        return dict(cache[key])

    def option(self, key: str) -> Any:
        """The typed value of one of this check's declared options: the user's `--set`, else its default."""
        return self.ctx.option(key)

    def launch_outcome(self, args: Sequence[str] = (), *, nranks: Optional[int] = None,
                       deadline_s: Optional[float] = None, phase_deadlines: Optional[Dict[str, float]] = None,
                       env: Optional[Dict[str, str]] = None, per_rank_env: Optional[List[Dict[str, str]]] = None,
                       run_dir: Optional[str] = None) -> "LaunchOutcome":
        """Run the payload and return what every rank did, hangs and crashes included. Arguments left out come
        from the spec (ranks, the mode's deadline, phase deadlines)."""
        from envbuild.doctor.launcher import launch

        if nranks is None:
            nranks = self.nranks
        deadlines = self.phase_deadlines()
        if phase_deadlines is not None:  # a check's own (a user's --set): the start stays bounded all the same
            from envbuild.doctor.launcher import START

            own = dict(phase_deadlines)
            if START in deadlines and START not in own:
                own[START] = deadlines[START]
            deadlines = own
        start = self.start_env()
        outcome = launch(self.spec.payload, nranks, python=self.ctx.python or sys.executable, gpus=self.gpus,
                         args=list(args), deadline_s=self.deadline_s if deadline_s is None else deadline_s,
                         backend=self.spec.backend, env={**start, **(env or {})} if start else env,
                         per_rank_env=per_rank_env,
                         phase_deadlines=deadlines,
                         run_dir=run_dir, drain=self.spec.teardown_behind)
        self.outcomes.append(outcome)
        return outcome

    def launch_timing(self) -> List[Dict[str, Any]]:
        """Per launch: its wall time and, per rank, whether it was warm and how long it took to reach its first
        phase. What a probe check's seconds were besides the probe's own work: in a --quick on one H200 the first
        GPU probe (gpu.basic) took 2.9 s (docs/gpu-runs/s7) and nothing recorded how much of it was its rank still
        importing torch; this does, and where the rest went: each outermost phase's seconds and the rank's exit
        after its result (teardown)."""
        return [{"wall_s": o.wall_s, "ranks": [{"rank": r.rank, "warm": r.warm, "start_s": r.start_s,
                                                "phase_s": r.phase_s, "after_result_s": r.after_result_s,
                                                "import_s": r.import_s, "import_wait_s": r.import_wait_s}
                                               for r in o.ranks]} for o in self.outcomes]

    def launch(self, args: Sequence[str] = (), **kw: Any) -> "LaunchOutcome":
        """launch_outcome, but a hang or a crash raises ProbeBroken with its `fail`: the check never sees it."""
        outcome = self.launch_outcome(args, **kw)
        broken = self.failure(outcome)
        if broken is not None:
            raise ProbeBroken(broken)
        return outcome

    def failure(self, outcome: "LaunchOutcome", **kw: Any) -> Optional[Result]:
        """The spec's hang/crash result of `outcome` (ProbeSpec.failure), or None when every rank answered."""
        return self.spec.failure(outcome, **kw)
