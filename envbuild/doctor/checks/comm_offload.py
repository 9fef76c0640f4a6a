"""offload.cycle: pause/resume model-sized memory K times (torch_memory_saver or raw cuMem) with live NCCL groups."""
from __future__ import annotations

import sys
from typing import List

from envbuild.doctor.registry import check
from envbuild.report.model import Result

DEADLINE_S = {"quick": 120, "full": 420}
BACKENDS = ("auto", "tms", "cumem")
HOOKS = ("preload", "torch")


@check("offload.cycle", "comm", "Offload/resume cycles with communicators alive: memory released, data and "
       "collectives exact after every resume", needs=("gpu", "live"), timeout_s=420, causes=("C9", "M5", "M3"),
       modes=("quick", "full"))
def offload_cycle(ctx) -> List[Result]:
    """One rank per GPU runs checks/offload_cycle.py.

    Options: --set offload.backend=auto|tms|cumem (auto: torch_memory_saver when the env has it),
    --set offload.hook=preload|torch (torch_memory_saver's hook mode).
    """
    from envbuild.doctor.launcher import launch
    from envbuild.doctor.probes import failure_result, merged_result, probe_mode
    from envbuild.errors import EnvbuildError

    backend = str(ctx.options.get("offload.backend", "auto"))
    hook = str(ctx.options.get("offload.hook", "preload"))
    if backend not in BACKENDS or hook not in HOOKS:
        raise EnvbuildError(f"--set offload.backend must be one of {BACKENDS} and offload.hook one of {HOOKS}; "
                            f"got {backend!r}, {hook!r}")
    gpus = ctx.gpu_indices()
    mode = probe_mode(ctx)
    outcome = launch("offload_cycle.py", len(gpus), python=ctx.python or sys.executable, gpus=gpus,
                     args=["--mode", mode, "--backend", backend, "--hook", hook], deadline_s=DEADLINE_S[mode],
                     phase_deadlines={"init": 90, "*": 90})
    broken = failure_result("offload.cycle", "comm", outcome, what="the offload/resume probe",
                            hang_causes=("M5", "M4", "C9"), crash_causes=("C9", "M5"))
    if broken is not None:
        return [broken]
    result = merged_result("offload.cycle", "comm", outcome, metric_ranks=None)
    result.subject = f"{len(gpus)} GPU(s)"
    return [result]
