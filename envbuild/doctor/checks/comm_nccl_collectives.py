"""comm.nccl_collectives: NCCL collectives between the selected GPUs, run by the env's torch.

One process per GPU runs checks/comm_nccl_collectives.py under the hang-proof launcher. The judging is kept
in a plain function (judge_collectives) so a recorded GPU run can be replayed by the tests. The deadlines and
the phase-deadline option are shared with comm.nccl_churn (envbuild/doctor/checks/_comm_phases.py).

Their `--set` options are declared below (`envbuild doctor --list-options` prints them).
"""
from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from envbuild.data.checks._common import size_label
from envbuild.doctor.checks._comm_phases import DEADLINE_S, PHASE_DEADLINE, phase_deadlines
from envbuild.doctor.registry import Option, ProbeSpec, probe_check
from envbuild.report.model import Result, Status

if TYPE_CHECKING:  # pragma: no cover
    from envbuild.doctor.launcher import LaunchOutcome
    from envbuild.doctor.linerate import LineRate
    from envbuild.doctor.nccl_log import NcclLog

MIB = 1 << 20
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
SIZES = {
    "quick": [1 * MIB, 64 * MIB, 256 * MIB],
    "full": [1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, 1024 * MIB],
}
BUDGET_MS = {"quick": 40.0, "full": 80.0}

# First NCCL WARN's source file -> causes (the NCCL source file that prints the first WARN
# file.cc:LINE": alloc.h -> M1, nvls.cc -> N1, shm.cc -> M2/O1, p2p.cc -> M3/N3, enqueue.cc -> M5/D3).
WARN_FILE_CAUSES = {"alloc.h": ["M1"], "nvls.cc": ["N1"], "shm.cc": ["M2", "O1"], "p2p.cc": ["M3", "N3"],
                    "enqueue.cc": ["M5", "D3"]}
# NCCL variables that, set by the environment, steer NCCL away from NVLink P2P (envbuild/knowledge/causes.toml C4).
P2P_STEERING_VARS = ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE", "NCCL_NET", "NCCL_ALGO",
                     "NCCL_PROTO", "NCCL_CUMEM_ENABLE", "NCCL_P2P_USE_CUDA_MEMCPY")


def _smi_nvlink(ctx) -> Optional[str]:
    from envbuild.facts.source import FactUnavailable

    try:
        res = ctx.facts.command("nvidia-smi-nvlink-status")
    except FactUnavailable:
        return None
    return res.stdout if res.returncode == 0 else None


def warn_causes(warnings: List[str]) -> List[str]:
    """The causes of the first NCCL WARN that names a known source file (WARN_FILE_CAUSES); [] when none does."""
    for w in warnings:
        for fname, causes in WARN_FILE_CAUSES.items():
            if fname in w:
                return list(causes)
    return []


COLLECTIVES = ProbeSpec("comm_nccl_collectives.py", "NCCL collectives", deadline_s=DEADLINE_S,
                        phase_deadlines=phase_deadlines(PHASE_DEADLINE.default))


@probe_check("comm.nccl_collectives", "comm",
             "NCCL all_reduce/all_gather/reduce_scatter/all_to_all/broadcast: exact, busbw vs line rate, transports",
             needs=("gpu", "multi_gpu"), causes=("C4", "N3", "M1"), probe=COLLECTIVES,
             options=(Option("comm.sizes", "ints", None, "collective sizes in bytes (default: by mode)",
                             low=1, high=1 << 36),
                      Option("comm.cumem", "choice", "both", "which NCCL_CUMEM_ENABLE settings to run",
                             choices=("0", "1", "both")),
                      PHASE_DEADLINE))
def nccl_collectives(ctx, run) -> List[Result]:
    """Runs the collectives once with NCCL_CUMEM_ENABLE=0 and once with =1; one Result per setting."""
    from envbuild.doctor import nccl_log
    from envbuild.doctor.linerate import line_rate

    gpus = run.gpus
    lr = line_rate(ctx.facts.nvml(), gpus, _smi_nvlink(ctx))
    sizes = run.option("comm.sizes") or SIZES[run.mode]
    cumem_opt = run.option("comm.cumem")
    results = []
    for cumem in (("0", "1") if cumem_opt == "both" else (cumem_opt,)):
        run_dir = tempfile.mkdtemp(prefix=f"envbuild-coll-cumem{cumem}-")
        per_rank = [nccl_log.rank_log_env(run_dir, k) for k in range(len(gpus))]
        outcome = run.launch_outcome(["--sizes", ",".join(map(str, sizes)), "--budget-ms", str(BUDGET_MS[run.mode])],
                                     run_dir=run_dir, env={"NCCL_CUMEM_ENABLE": cumem}, per_rank_env=per_rank,
                                     phase_deadlines=phase_deadlines(run.option("comm.phase_deadline_s")))
        log = nccl_log.parse_files(p for k in range(len(gpus)) for p in nccl_log.rank_log_paths(run_dir, k))
        results.append(judge_collectives(outcome, log, lr, cumem=cumem, gpus=gpus))
    return results


def judge_collectives(outcome: "LaunchOutcome", log: "NcclLog", lr: "Optional[LineRate]", *, cumem: str,
                      gpus: List[int]) -> Result:
    """The verdict of one collectives run: hang/crash, wrong results, transport fallback, bandwidth."""
    from envbuild.doctor.nccl_log import fallback_kinds
    from envbuild.doctor.probes import failure_result, merged_result, worst
    from envbuild.doctor.thresholds import COLLECTIVE_SOURCE, band_verdict, collective_band

    subject = f"NCCL_CUMEM_ENABLE={cumem}"
    broken = failure_result(outcome, what=f"{COLLECTIVES.what} ({subject})", subject=subject,
                            hang_causes=COLLECTIVES.hang_causes, crash_causes=warn_causes(log.warnings))
    if broken is not None:
        broken.evidence["nccl"] = log.summary()
        return broken
    res = merged_result(outcome)
    res.subject = subject
    rank0 = (outcome.ranks[0].result or {}).get("evidence", {})
    ev: Dict[str, Any] = {"nccl": log.summary(), "rows": rank0.get("rows", []), "measure_s": rank0.get("measure_s"),
          "startup_s": rank0.get("startup_s"), "time_split": rank0.get("time_split"),
          "gpus": gpus, "line_rate": lr.describe() if lr else None, "run_dir": outcome.run_dir,
          "wall_s": outcome.wall_s, "torch": rank0.get("torch"), "device": rank0.get("device")}
    res.evidence = ev
    if res.status in (Status.FAIL, Status.ERROR):
        return res  # wrong results: the ranks' own verdict stands
    problems: List[str] = []
    found: List[Status] = []  # one entry per problem; the worst is the verdict
    causes: List[str] = []
    if len(log.versions) > 1:
        found.append(Status.FAIL)
        problems.append(f"ranks loaded different NCCL versions {log.versions}")
        causes.append("C3")
    fallback = fallback_kinds(log)
    if lr is not None and lr.link == "nvlink" and fallback:
        steering = {k: v for k, v in log.env_overrides.items() if k in P2P_STEERING_VARS and k != "NCCL_CUMEM_ENABLE"}
        total = sum(log.transports.values())
        n_fb = sum(log.transports[k] for k in fallback)
        found.append(Status.FAIL)
        msg = (f"NVLink node ({lr.links} active links between GPUs {gpus}) but NCCL routed {n_fb} of {total} "
               f"channel connections via {'/'.join(fallback)}")
        if steering:
            msg += " because the environment sets " + ", ".join(f"{k}={v}" for k, v in steering.items())
            causes += ["C4", "N3"]
        else:
            causes += ["N3", "N2"]
        problems.append(msg)
    kinds = set(log.transports)
    if cumem == "1" and "P2P/IPC" in kinds and "P2P/CUMEM" not in kinds:
        found.append(Status.WARN)
        problems.append("NCCL_CUMEM_ENABLE=1 but the channels use P2P/IPC: NCCL turned cuMem off on this node")
        causes.append("M1")
    if lr is not None:
        below = []  # (verdict, fraction, band limit, row) for every judged size under its band
        for row in ev["rows"]:
            band = collective_band(row["op"], _requested(row), lr.link)
            frac = row["busbw"] / lr.gbps
            row["fraction_of_line_rate"] = round(frac, 3)
            if band is None:
                continue
            name = f"{row['op']}.busbw.{size_label(_requested(row))}"
            for m in res.metrics:
                if m.name == name:
                    m.expect = f">= {band.warn_below:.2f} x {lr.gbps:.0f} GB/s (fail < {band.fail_below:.2f})"
                    m.source = COLLECTIVE_SOURCE
            judged = Status(band_verdict(frac, band))
            if judged is not Status.PASS:
                below.append((judged, frac, band.fail_below if judged is Status.FAIL else band.warn_below, row))
        if below:
            band_status = worst(b[0] for b in below)
            found.append(band_status)
            _, frac, limit, row = min(below, key=lambda b: b[1])
            word = "fail" if band_status is Status.FAIL else "warn"
            problems.append(f"busbw below the {word} band at {len(below)} of the judged sizes; worst "
                            f"{row['op']} {row['busbw']:.0f} GB/s at {size_label(_requested(row))} = {frac:.2f} of the "
                            f"{lr.gbps:.0f} GB/s line rate ({word} < {limit})")
            if not causes:
                causes += ["N3", "D3"]
    else:
        ev["line_rate"] = "unknown: NVML reported neither rated NVLinks nor a PCIe max gen/width for these GPUs"
    ar = max((r for r in ev["rows"] if r["op"] == "all_reduce"), key=_requested, default=None)
    headline = (f"all_reduce busbw {ar['busbw']:.0f} GB/s at {size_label(_requested(ar))}"
                + (f" ({ar['busbw'] / lr.gbps:.2f} of {lr.gbps:.0f} GB/s)" if lr else "")) if ar else ""
    via = ", ".join(f"{k} x{v}" for k, v in sorted(log.transports.items())) or "transports not logged"
    nccl_v = log.version or rank0.get("nccl_version_torch") or "?"
    res.status = worst(found)
    res.causes = list(dict.fromkeys(causes))
    if problems:
        res.summary = "; ".join(problems[:3])
        res.remediation = ("unset NCCL_* variables that steer transports (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, ...)"
                           if "C4" in causes else "check NVLink state (nvidia-smi nvlink -s) and P2P "
                           "(comm/p2p probes); rerun with NCCL_DEBUG=INFO")
    else:
        res.summary = f"exact on {len(gpus)} GPUs; {headline}; NCCL {nccl_v} via {via}"
    return res


def _requested(row: Dict[str, Any]) -> int:
    """The size a row was asked for, which names its metric and picks its band. S (row["size"]) can fall
    below it when the rank count does not divide it (all_gather of 64 MiB in fp32 on 3 GPUs moves 4 B less);
    rows recorded before the payload wrote "requested" had S equal to it."""
    return int(row.get("requested", row["size"]))
