"""gpu.compute: bf16/fp16 GEMM TFLOP/s and HBM copy GB/s of every GPU, against its SKU's datasheet peak and
against the other GPUs, so a throttled or sick GPU (the straggler that stalls every collective) is named.

The anchor is DCGM's diagnostics (NVIDIA/DCGM nvvs/diag-skus.yaml.in): `targeted_stress` (a sustained GEMM) and
`memory_bandwidth`, whose per-SKU pass targets are 75 % of what a healthy GPU of that SKU measures. Here the
expectation is a fraction of the datasheet peak (envbuild/train/peaks.py, each row with its datasheet), so a SKU
needs one table row, not a measured target. One process per GPU, all at once (checks/gpu_compute.py): the
node's power and cooling carry every GPU together as in training, and the check takes one GPU's time whatever
the count (quick: 0.3 s per phase, about 1 s of measuring plus torch start-up per GPU).
"""
from __future__ import annotations

import statistics
from typing import Any, Dict, List, Optional

from envbuild.doctor.registry import Option, ProbeSpec, probe_check, verdict
from envbuild.doctor.thresholds import Band, band_verdict
from envbuild.report.model import Metric, Result, Status

SECONDS = {"quick": 0.3, "full": 3.0}  # measuring time per phase; full runs long enough to reach steady clocks
# (quick: 0.3 s is six ~50 ms batches per phase, the median of which is judged; 0.5 s until session 11)

# Fractions of the dense datasheet peak. Healthy cuBLAS on a large square bf16 GEMM reaches about 0.6-0.8 of it
# on Hopper/Ampere, device-to-device copies 0.8-0.9 of HBM bandwidth; DCGM fails a GPU under 75 % of a healthy
# one's measurement (DCGM diag-skus.yaml.in: H100 memory_bandwidth target 1,905 GB/s = 0.57 of 3.35 TB/s).
# Warn where DCGM would fail, fail where no healthy GPU lands (a clock-capped, power-braked or degraded GPU).
GEMM_BAND = Band(warn_below=0.45, fail_below=0.25)
COPY_BAND = Band(warn_below=0.55, fail_below=0.35)
PEAK_SOURCE = ("fraction of the datasheet peak (envbuild/train/peaks.py); bands from DCGM diag's 75 %-of-healthy "
               "targets (NVIDIA/DCGM nvvs/diag-skus.yaml.in)")
# GPUs of one node and SKU run within a few percent of each other; one 10 % slower than the median sets the pace
# of every synchronous step (the straggler), 25 % slower is a sick GPU.
PEER_BAND = Band(warn_below=0.90, fail_below=0.75)
PEER_SOURCE = "slowest GPU / median of this node's GPUs (same SKU, same run)"

# A GPU slower than it should be: failing hardware (D3), another process on it (D7), a sharing layer (D8).
SLOW_CAUSES = ["D3", "D7", "D8"]
MEASURES = (("bf16_tflops", "bf16 GEMM", "TFLOP/s", GEMM_BAND),
            ("fp16_tflops", "fp16 GEMM", "TFLOP/s", GEMM_BAND),
            ("hbm_copy_gbps", "HBM copy", "GB/s", COPY_BAND))
REMEDY = ("look at `nvidia-smi -q -d PERFORMANCE,CLOCK,POWER,TEMPERATURE` for the slow GPU (clock throttle reasons: "
          "power brake, thermal, HW slowdown), then run DCGM's `dcgmi diag -r 3` on it; drain it from the job until "
          "it measures like its peers")


@probe_check("gpu.compute", "gpu", "bf16/fp16 GEMM TFLOP/s and HBM copy GB/s per GPU vs the SKU's peak and vs the "
             "other GPUs (the straggler)", causes=("D3", "D7", "D8"),
             options=(Option("gpu.compute.seconds", "float", None, "measuring time per phase (default 0.3, 3 with "
                                                                    "--full)", low=0, high=3600, low_open=True),),
             probe=ProbeSpec("gpu_compute.py", "the compute probe", deadline_s={"quick": 60, "full": 120},
                             phase_deadlines={"*": 30}, backend="none", hang_causes=("D3", "D1", "D7"),
                             crash_causes=("D3",), teardown_behind=True,
                             starts_beside_teardown=True))
def gpu_compute(ctx, run) -> List[Result]:
    """One Result per GPU (subject gpuN) against its peak, plus `peers` comparing the GPUs when there are 2+."""
    seconds = run.option("gpu.compute.seconds") or SECONDS[run.mode]
    outcome = run.launch(["--seconds", str(seconds)])
    names = {int(d["index"]): d.get("name") for d in ctx.facts.nvml().get("devices") or [] if "index" in d}
    return judge({g: (r.result or {}) for g, r in zip(run.gpus, outcome.ranks)}, names)


def judge(per_gpu: Dict[int, Dict[str, Any]], names: Dict[int, Optional[str]]) -> List[Result]:
    """The verdicts from what each GPU's rank reported ({gpu index: payload result}) and the NVML names (pure;
    tested in CI on synthetic evidence)."""
    from envbuild.doctor.probes import status_of
    from envbuild.train.peaks import peak_for

    results = []
    values: Dict[str, Dict[int, float]] = {key: {} for key, *_ in MEASURES}
    for gpu, data in sorted(per_gpu.items()):
        own = status_of(data.get("status"))
        measured = {m["name"]: float(m["value"]) for m in data.get("metrics") or []}
        if own is not Status.PASS or not measured:
            results.append(verdict(own, str(data.get("summary") or "no summary"), subject=f"gpu{gpu}",
                                   evidence=dict(data.get("evidence") or {}), causes=list(data.get("causes") or [])))
            continue
        name = names.get(gpu) or (data.get("evidence") or {}).get("device")
        peak = peak_for(name)
        statuses, notes, metrics = [], [], []
        for key, what, unit, band in MEASURES:
            if key not in measured:
                continue
            value = measured[key]
            values[key][gpu] = value
            top = (peak.hbm_gbps if key == "hbm_copy_gbps" else peak.bf16_dense_tflops) if peak else 0.0
            if not top:
                metrics.append(Metric(key, value, unit))
                continue
            frac = value / top
            judged = Status(band_verdict(frac, band))
            statuses.append(judged)
            if judged is not Status.PASS:
                notes.append(f"{what} {value:.0f} {unit} = {frac:.2f} of the {peak.sku}'s {top:.0f}")
            metrics += [Metric(key, value, unit, expect=f">= {band.warn_below} x {top:.0f} {unit} ({peak.sku})",
                               source=f"{PEAK_SOURCE}; {peak.source}"),
                        Metric(key.rsplit("_", 1)[0] + "_fraction_of_peak", round(frac, 3), "ratio")]
        status = max(statuses, key=lambda s: s.rank, default=Status.PASS)
        line = ", ".join(f"{what} {measured[key]:.0f} {unit}" for key, what, unit, _ in MEASURES if key in measured)
        if notes:
            summary = f"GPU {gpu} ({name}) below its peak: " + "; ".join(notes)
        elif peak is None:
            summary = f"GPU {gpu} ({name}): {line}; not judged against a peak: no row for {name!r} in the peak table"
        else:
            summary = f"GPU {gpu} ({peak.sku}): {line}"
        results.append(verdict(status, summary, subject=f"gpu{gpu}", metrics=metrics,
                               evidence=dict(data.get("evidence") or {}, peak=peak.__dict__ if peak else None),
                               causes=SLOW_CAUSES if notes else [], remediation=REMEDY if notes else None))
    if len(values["bf16_tflops"]) >= 2:
        results.append(compare_peers(values))
    return results


def compare_peers(values: Dict[str, Dict[int, float]]) -> Result:
    """The slowest GPU against the median of all, per measure: the straggler is named even when every GPU is
    above its datasheet band (or when the SKU has no peak row)."""
    statuses, notes, metrics = [], [], []
    evidence: Dict[str, Any] = {}
    for key, what, unit, _ in MEASURES:
        per_gpu = values.get(key) or {}
        if len(per_gpu) < 2:
            continue
        median = statistics.median(per_gpu.values())
        slow = min(per_gpu, key=per_gpu.get)
        frac = per_gpu[slow] / median if median else 1.0
        judged = Status(band_verdict(frac, PEER_BAND))
        statuses.append(judged)
        evidence[key] = {f"gpu{g}": v for g, v in sorted(per_gpu.items())}
        metrics.append(Metric(f"{key}.slowest_vs_median", round(frac, 3), "ratio",
                              expect=f">= {PEER_BAND.warn_below} (fail < {PEER_BAND.fail_below})", source=PEER_SOURCE))
        if judged is not Status.PASS:
            notes.append(f"GPU {slow} {what} {per_gpu[slow]:.0f} {unit} = {frac:.2f} of the median {median:.0f}")
    status = max(statuses, key=lambda s: s.rank, default=Status.PASS)
    n = max(len(v) for v in values.values())
    summary = ("straggler: " + "; ".join(notes)) if notes else f"{n} GPUs within {1 - PEER_BAND.warn_below:.0%} of " \
                                                                f"their median on every measure"
    return verdict(status, summary, subject="peers", metrics=metrics, evidence=evidence,
                   causes=SLOW_CAUSES if notes else [], remediation=REMEDY if notes else None)
