"""comm.offload_cycle: pause/resume model-sized memory K times (torch_memory_saver or raw cuMem) with live NCCL groups."""
from __future__ import annotations

from typing import Dict, List

from envbuild.doctor.registry import Option, ProbeSpec, probe_check
from envbuild.report.model import Result

OPTIONS = (
    Option("offload.backend", "choice", "auto", "auto: torch_memory_saver when the env has it, else raw cuMem",
           choices=("auto", "tms", "cumem")),
    Option("offload.hook", "choice", "preload", "torch_memory_saver's hook mode", choices=("preload", "torch")),
)


def payload_args(run) -> List[str]:
    return ["--mode", run.mode, "--backend", run.option("offload.backend"), "--hook", run.option("offload.hook")]


def start_env(run) -> Dict[str, str]:
    """The TMS preload hook (LD_PRELOAD) the payload would re-exec itself with: given at the launch instead, so its
    ranks can be warm ones that imported torch under the hook (envbuild/doctor/warm.py)."""
    return run.payload_start_env(payload_args(run))


@probe_check("comm.offload_cycle", "comm", "Offload/resume cycles with communicators alive: memory released, data and "
             "collectives exact after every resume", needs=("gpu", "live"), causes=("C9", "M5", "M3"),
             options=OPTIONS,
             probe=ProbeSpec("comm_offload_cycle.py", "the offload/resume probe", deadline_s={"quick": 120, "full": 420},
                             phase_deadlines={"init": 90, "*": 90}, hang_causes=("M5", "M4", "C9"),
                             crash_causes=("C9", "M5"), start_env=start_env,
                             teardown_behind=True, starts_beside_teardown=True))
def offload_cycle(ctx, run) -> List[Result]:
    """One rank per GPU runs checks/comm_offload_cycle.py; one Result for the group, metrics of every rank."""
    from envbuild.doctor.probes import merged_result

    outcome = run.launch(payload_args(run))
    result = merged_result(outcome, metric_ranks=None)
    result.subject = f"{len(run.gpus)} GPU(s)"
    return [result]
