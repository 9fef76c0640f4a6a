"""gpu.basic: can the environment's torch drive every selected GPU (cuInit, context, kernel, memory, arch)?"""
from __future__ import annotations

import sys
from typing import List

from envbuild.doctor.registry import check
from envbuild.report.model import Result

MEM_MIB = {"quick": 1024, "full": 4096}


@check("gpu.basic", "gpu", "cuInit, a context, a tiny kernel, memory alloc/free and the SM in torch's arch list, per GPU",
       needs=("gpu",), timeout_s=120, causes=("D1", "D4", "D5", "D10"), modes=("quick", "full"))
def gpu_basic(ctx) -> List[Result]:
    """One process per GPU runs checks/gpu_basic.py with the env's python; one Result per GPU."""
    from envbuild.doctor.launcher import launch
    from envbuild.doctor.probes import failure_result, probe_mode, rank_results

    gpus = ctx.gpu_indices()
    mode = probe_mode(ctx)
    outcome = launch("gpu_basic.py", len(gpus), python=ctx.python or sys.executable, gpus=gpus,
                     args=["--mem-mib", str(MEM_MIB[mode])], deadline_s=90, backend="none",
                     phase_deadlines={"cuinit": 30, "context": 60, "*": 45})
    subjects = {k: f"gpu{g}" for k, g in enumerate(gpus)}
    broken = failure_result("gpu.basic", "gpu", outcome, what="the basic GPU probe",
                            hang_causes=("D1", "D4", "D7"))
    if broken is not None:
        # keep the verdicts of the GPUs that did answer, next to the hang/crash of the others
        good = [res for res, ro in zip(rank_results("gpu.basic", "gpu", outcome, subjects), outcome.ranks)
                if ro.result is not None and ro.rank not in outcome.crashed_ranks + outcome.hung_ranks]
        return [broken] + good
    return rank_results("gpu.basic", "gpu", outcome, subjects)
