"""comm.nccl_churn: slime's per-step communicator rebuild (~20 subgroups built, used and destroyed K times) under
NCCL, watching GPU memory and file descriptors for leaks (envbuild/knowledge/causes.toml M4).

One process per GPU runs checks/comm_nccl_churn.py; judge_churn is a plain function so the gloo tests and
recorded runs replay it.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from envbuild.doctor.checks._comm_phases import DEADLINE_S, PHASE_DEADLINE, phase_deadlines
from envbuild.doctor.registry import Option, ProbeSpec, probe_check
from envbuild.report.model import Result, Status

if TYPE_CHECKING:  # pragma: no cover
    from envbuild.doctor.launcher import LaunchOutcome

CHURN = {"quick": dict(cycles=4, groups=20), "full": dict(cycles=12, groups=20)}

CHURN_PROBE = ProbeSpec("comm_nccl_churn.py", "communicator churn", deadline_s=DEADLINE_S,
                        phase_deadlines=phase_deadlines(PHASE_DEADLINE.default), hang_causes=("M4", "D7"),
                        crash_causes=("M4",))


@probe_check("comm.nccl_churn", "comm",
             "NCCL communicator churn: K cycles of ~20 subgroups built, used and destroyed; memory and FD leaks",
             needs=("gpu", "multi_gpu"), causes=("M4",), probe=CHURN_PROBE,
             options=(Option("comm.churn_cycles", "int", None, "destroy/rebuild cycles (default: 4, 12 with --full)",
                             low=1, high=10000),
                      PHASE_DEADLINE))
def nccl_churn(ctx, run) -> Result:
    """slime's ReloadableProcessGroup pattern (envbuild/knowledge/causes.toml M4) under NCCL_CUMEM_ENABLE=0 (slime's
    default)."""
    cfg = CHURN[run.mode]
    cycles = run.option("comm.churn_cycles")
    cycles = cfg["cycles"] if cycles is None else cycles
    outcome = run.launch_outcome(["--cycles", str(cycles), "--groups", str(cfg["groups"])],
                                 env={"NCCL_CUMEM_ENABLE": os.environ.get("NCCL_CUMEM_ENABLE", "0")},
                                 phase_deadlines=phase_deadlines(run.option("comm.phase_deadline_s")))
    return judge_churn(outcome)


def judge_churn(outcome: "LaunchOutcome") -> Result:
    """The verdict of one churn run: hang/crash, wrong results, then memory and FD growth per cycle against the
    thresholds (a plain function so the gloo tests and recorded runs replay it)."""
    from envbuild.doctor.probes import merged_result
    from envbuild.doctor.thresholds import (CHURN_FD_SLOPE_FAIL, CHURN_FD_SLOPE_WARN, CHURN_MEM_SLOPE_FAIL_MIB,
                                            CHURN_MEM_SLOPE_WARN_MIB, CHURN_SOURCE)

    broken = CHURN_PROBE.failure(outcome)
    if broken is not None:
        return broken
    res = merged_result(outcome, metric_ranks=None)
    if res.status in (Status.FAIL, Status.ERROR):
        return res
    status, problems = Status.PASS, []
    limits = {"gpu_mem_growth_per_cycle": (CHURN_MEM_SLOPE_WARN_MIB, CHURN_MEM_SLOPE_FAIL_MIB, "MiB"),
              "fd_growth_per_cycle": (CHURN_FD_SLOPE_WARN, CHURN_FD_SLOPE_FAIL, "fds")}
    for m in res.metrics:
        base = m.name.split(".", 1)[-1]
        if base not in limits:
            continue
        warn, fail, unit = limits[base]
        m.expect, m.source = f"< {warn:g} {unit}/cycle (fail >= {fail:g})", CHURN_SOURCE
        what = "free GPU memory fell" if unit == "MiB" else "open file descriptors grew"
        if m.value >= fail:
            status = Status.FAIL
            problems.append(f"{m.name.split('.')[0]}: {what} by {m.value:g} {unit} per cycle (leak)")
        elif m.value >= warn and status is not Status.FAIL:
            status = Status.WARN
            problems.append(f"{m.name.split('.')[0]}: {what} by {m.value:g} {unit} per cycle")
    ev0 = (outcome.ranks[0].result or {}).get("evidence", {})
    res.status = status
    if problems:
        res.summary = "; ".join(problems)
        res.causes = ["M4"]
        res.remediation = "upgrade NCCL (leak fixes in 2.28.x) or keep communicators alive across steps"
    else:
        med = next((m.value for m in res.metrics if m.name.endswith("cycle_s_median")), None)
        res.summary = (f"{ev0.get('cycles')} cycles x {ev0.get('groups_per_cycle')} communicators rebuilt on "
                       f"{len(outcome.ranks)} GPUs, no growth in GPU memory or FDs"
                       + (f"; {med:g} s per cycle" if med is not None else ""))
    res.evidence["wall_s"] = outcome.wall_s
    return res
