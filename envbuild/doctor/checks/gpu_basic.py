"""gpu.basic: can the environment's torch drive every selected GPU (cuInit, context, kernel, memory, arch)?"""
from __future__ import annotations

from typing import List

from envbuild.doctor.registry import ProbeSpec, probe_check
from envbuild.report.model import Result

MEM_MIB = {"quick": 1024, "full": 4096}


@probe_check("gpu.basic", "gpu", "cuInit, a context, a tiny kernel, memory alloc/free and the SM in torch's arch list, "
             "per GPU", causes=("D1", "D4", "D5", "D10"),
             probe=ProbeSpec("gpu_basic.py", "the basic GPU probe", deadline_s={"quick": 90, "full": 90},
                             phase_deadlines={"cuinit": 30, "context": 60, "*": 45}, backend="none",
                             hang_causes=("D1", "D4", "D7"), teardown_behind=True))
def gpu_basic(ctx, run) -> List[Result]:
    """One process per GPU runs checks/gpu_basic.py with the env's python; one Result per GPU."""
    from envbuild.doctor.probes import rank_results

    outcome = run.launch_outcome(["--mem-mib", str(MEM_MIB[run.mode])])
    subjects = {k: f"gpu{g}" for k, g in enumerate(run.gpus)}
    broken = run.failure(outcome)
    if broken is not None:
        # keep the verdicts of the GPUs that did answer, next to the hang/crash of the others
        good = [res for res, ro in zip(rank_results(outcome, subjects), outcome.ranks)
                if ro.result is not None and ro.rank not in outcome.crashed_ranks + outcome.hung_ranks]
        return [broken] + good
    return rank_results(outcome, subjects)
