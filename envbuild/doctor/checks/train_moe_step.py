"""train.moe_step: a Qwen3-30B-A3B-shaped MoE train step with megatron-core inside slime's colocated cycle.

The closest thing to slime's `Cuda failure 999` short of a full RL run: train -> weight sync over a
separate NCCL group -> offload (torch_memory_saver) -> resume -> every process group destroyed and
re-created -> next step, K times, with a randomly initialised model (no weights to download).
The payload is checks/train_moe_step.py; the arithmetic (layout, FLOPs, peaks, memory) lives in
envbuild/train/ so CI checks it without torch. See docs/checks-train.md.

An unknown `--set train.*` key or a value of the wrong type is refused before the run (exit 2, like every
check's options); a value that parses but cannot be laid out or run (TP 3 on 2 GPUs, CP without Transformer
Engine) gives an `error` result naming the option (exit 1): a fleet-wide `doctor --full` keeps every other
check's verdict, and `error` says the verdict is not about the node.
"""
from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from envbuild.doctor.registry import Option, ProbeSpec, probe_check, verdict
from envbuild.report.model import Metric, Result, Status
from envbuild.train import options as train_options

if TYPE_CHECKING:  # pragma: no cover
    from envbuild.train.layout import Layout
    from envbuild.train.options import TrainOptions
    from envbuild.train.presets import ModelShape

INSTALL_HINT = "pip install megatron-core==0.19.2 (and torch_memory_saver for slime's offload path)"
# The default depth, when the user sets none, is lowered to what fits this share of the GPU by the estimate: the
# GPU's own use ran up to 1.2x the estimate (4 layers on the H200: 81.2 GiB estimated, 97.7 GiB used,
# docs/gpu-runs/s6-train-tms-sourcebuilt-full.json), and at depth 3 an 80 GiB H100 ran out of memory where the
# estimate fitted in 90 % (docs/gpu-runs/s13/call-h). 2 layers on the H100 used 57.6 GiB (s7-train-tms-apex-h100.json).
DEFAULT_DEPTH_HEADROOM = 0.75
# torch_memory_saver's allocator exits on a CUDA out-of-memory instead of raising torch's OutOfMemoryError:
# "[torch_memory_saver.cpp] cudaError error: 2 (out of memory) ... func=tms_torch_malloc" (docs/gpu-runs/s13/call-h);
# its "cuMemCreate CUDA_ERROR_OUT_OF_MEMORY (may not be an issue ...)" before it is a retry, not the exit.
ALLOCATOR_OOM = re.compile(r"\[torch_memory_saver\.cpp\][^\n]*\(out of memory\)[^\n]*")


class _GpuNeeds:
    """Stands in for the Check object when asking the runner's unmet_need(): the check declares no
    needs itself (so bad options are reported even on a machine without GPUs) and asks here."""

    needs = frozenset({"gpu"})


def _declared_options() -> Tuple[Option, ...]:
    """The train.* options (envbuild/train/options.py) as the doctor declares them: type, default, help."""
    defaults = train_options.TrainOptions()
    out = []
    for name, help_text in train_options.HELP.items():
        kind = ("int" if name in train_options.INTS else "choice" if name in train_options.CHOICES
                else "bool" if name == "sp" else "float")
        default = None if name == "steps" else getattr(defaults, name)  # steps: by mode (train.options.STEPS_BY_MODE), or --soak N
        low, high = train_options.BOUNDS.get(name, (None, None))
        out.append(Option(train_options.PREFIX + name, kind, default, help_text,
                          choices=tuple(train_options.CHOICES.get(name, ())), low=low, high=high,
                          low_open=name in train_options.LOW_OPEN))
    return tuple(out)


def _options_error(message: str) -> Result:
    from envbuild.train.options import HELP, PREFIX

    known = {f"{PREFIX}{k}": v for k, v in HELP.items()}
    return verdict(Status.ERROR, f"bad option: {message}",
                  remediation="fix the --set value (the train.* options are listed in the evidence and in "
                              "docs/checks-train.md)", evidence={"options": known})


def _declared_world(ctx) -> Optional[int]:
    """GPUs to lay out on: the usable ones, else what --gpus names (to validate a layout before a run)."""
    gpus = ctx.gpu_indices()
    if gpus:
        return len(gpus)
    if ctx.gpus:
        return len(ctx.gpus)
    return None


def _structural_world(opts) -> int:
    """Without a GPU count, the smallest world the explicit flags imply (checks everything but divisibility
    by the GPU count)."""
    tp, pp, cp, ep = (opts.tp or 1), (opts.pp or 1), (opts.cp or 1), (opts.ep or 1)
    return math.lcm(tp * pp * cp, ep * pp)


def _gpu_facts(ctx) -> Dict[str, Any]:
    from envbuild.facts.source import FactUnavailable

    try:
        snap = ctx.facts.nvml()
    except FactUnavailable:
        return {}
    chosen = set(ctx.gpu_indices())
    devices = [d for d in snap.get("devices", []) if d.get("index") in chosen]
    mem = [d.get("memory_total_mib") for d in devices if d.get("memory_total_mib")]
    return {"name": devices[0].get("name") if devices else None,
            "memory_bytes": min(mem) * 1024 ** 2 if mem else None}


def _te_installed(ctx) -> Optional[bool]:
    """Whether the environment under test has Transformer Engine (None when its packages cannot be read)."""
    from envbuild.facts.source import FactUnavailable
    from envbuild.facts.stack_view import dist

    try:
        stack = ctx.facts.stack()
    except FactUnavailable:
        return None
    return dist(stack, "transformer-engine", "transformer-engine-torch", "transformer-engine-cu12",
                "transformer-engine-cu13") is not None


def _spec_refusal(ctx, opts: "TrainOptions", layout: "Layout") -> Optional[str]:
    """What the payload would refuse for want of Transformer Engine, said before any launch (None: go on).

    megatron-core's local DotProductAttention asserts context_parallel_size == 1; only the TE spec
    (TEDotProductAttention) runs context parallel. The payload refuses too, for environments whose
    packages could not be read here.
    """
    if opts.spec != "te" and layout.cp == 1:
        return None
    cp = f"train.cp={layout.cp}" if layout.cp > 1 else ""
    if opts.spec == "local":
        return (f"{cp} with train.spec=local: megatron-core's local attention refuses context parallel; "
                f"use train.spec=te (Transformer Engine) or train.cp=1")
    if _te_installed(ctx) is False:
        what = cp or "train.spec=te"
        return (f"{what} needs Transformer Engine (megatron-core's local attention refuses context parallel), "
                f"and transformer-engine is not installed in {ctx.python or sys.executable}; install the "
                f"profile's transformer-engine there" + (" or use train.cp=1" if cp else " or use train.spec=local"))
    return None


def payload_args(opts: "TrainOptions", layout: "Layout", shape: "ModelShape", vocab: int) -> List[str]:
    """The payload's command line for these options (also what docs/gpu-runs records)."""
    return ["--shape", json.dumps(asdict(shape)), "--layers", str(opts.layers), "--steps", str(opts.steps),
            "--plain-steps", str(opts.plain_steps), "--seq", str(opts.seq), "--mbs", str(opts.mbs),
            "--tp", str(layout.tp), "--sp", str(int(layout.sp)), "--ep", str(layout.ep), "--pp", str(layout.pp),
            "--cp", str(layout.cp), "--vocab", str(vocab), "--offload", opts.offload, "--spec", opts.spec,
            "--lr", repr(opts.lr)]


def deadline_for(opts: "TrainOptions") -> float:
    """Whole-run deadline: train.deadline, else imports and model build plus a generous per-step allowance."""
    if opts.deadline:
        return float(opts.deadline)
    return 240.0 + 30.0 * (opts.steps + opts.plain_steps) * max(1.0, opts.layers / 8)


# The whole-run deadline comes from the options (deadline_for); these are its defaults by mode.
PROBE = ProbeSpec("train_moe_step.py", "the train-step cycle", deadline_s={"quick": 420, "full": 630},
                  phase_deadlines={"*": 300}, hang_causes=(), crash_causes=())


@probe_check("train.moe_step", "train", "Qwen3-30B-A3B-shaped MoE train steps (megatron-core) in slime's train -> "
             "sync -> offload -> resume -> group rebuild cycle", needs=("stack",), probe=PROBE,
             causes=("M4", "M5", "C9", "C2"), modes=("full",), options=_declared_options())
def train_moe_step(ctx, run) -> List[Result]:
    """Options: --set train.layers=N train.steps=K train.tp/sp/ep/pp/cp train.seq train.mbs train.offload
    train.spec train.lr (see docs/checks-train.md)."""
    from envbuild.doctor.runner import unmet_need
    from envbuild.train.layout import LayoutError, derive_layout
    from envbuild.train.memory import GIB, depth_that_fits, estimate_bytes
    from envbuild.train.options import PREFIX, train_options
    from envbuild.train.presets import get_preset

    opts = train_options(ctx.options, ctx.mode)
    shape = get_preset(opts.preset)
    world = _declared_world(ctx)

    def lay_out(layers: int) -> "Layout":
        return derive_layout(world or _structural_world(opts), shape, layers, opts.seq, tp=opts.tp, sp=opts.sp,
                             ep=opts.ep, pp=opts.pp, cp=opts.cp)
    try:
        layout = lay_out(opts.layers)
    except LayoutError as exc:
        return [_options_error(str(exc))]
    refusal = _spec_refusal(ctx, opts, layout)
    if refusal:
        return [_options_error(refusal)]
    reason = unmet_need(_GpuNeeds, ctx)
    if reason is not None:
        status = Status.FAIL if (ctx.require_gpu and ctx.facts.is_live) else Status.SKIP
        return [verdict(status, reason,
                        evidence={"layout": layout.to_dict(), "layers": opts.layers})]

    gpu = _gpu_facts(ctx)
    capacity = gpu.get("memory_bytes")
    chosen = None
    if capacity and f"{PREFIX}layers" not in ctx.options:
        fits = depth_that_fits(shape, layout, opts.seq, opts.mbs, capacity, headroom=DEFAULT_DEPTH_HEADROOM)
        if 0 < fits < opts.layers:
            chosen = (f"{fits}: the default depth {opts.layers} does not fit {capacity / GIB:.0f} GiB per GPU with "
                      f"the margin the measured runs need (set train.layers to choose)")
            opts, layout = replace(opts, layers=fits), lay_out(fits)
    estimate = estimate_bytes(shape, layout, opts.layers, opts.seq, opts.mbs)
    if capacity and estimate["total"] > capacity:
        fits = depth_that_fits(shape, layout, opts.seq, opts.mbs, capacity, headroom=DEFAULT_DEPTH_HEADROOM)
        experts = shape.experts // layout.ep
        return [_options_error(
            f"train.layers={opts.layers} with {layout.describe()} ({experts} experts per rank) needs about "
            f"{estimate['total'] / GIB:.0f} GiB per GPU, the GPUs have {capacity / GIB:.0f} GiB; "
            + (f"depth {fits} fits (--set train.layers={fits})" if fits else
               "not even one layer fits: raise train.ep or train.tp"))]
    result = run_payload(run, opts, shape, layout, gpu, estimate)
    if chosen:
        result.evidence["layers_chosen"] = chosen
    return [result]


def _only_teardown_hung(outcome) -> bool:
    """Every rank gave its final verdict and the only trouble is ranks stuck in teardown afterwards."""
    if outcome.ok or outcome.crashed_ranks:
        return False
    finals = all(r.result and not r.result.get("partial") and r.result.get("status") == "pass"
                 for r in outcome.ranks)
    return finals and all(r.phase == "teardown" for r in outcome.ranks if r.rank in outcome.hung_ranks)


def run_payload(probe, opts: "TrainOptions", shape: "ModelShape", layout: "Layout", gpu: Dict[str, Any],
                estimate: Dict[str, int]) -> Result:
    """Launch the payload (probe: the runner's ProbeRun) on the layout's GPUs and turn what the ranks did into one
    Result."""
    from envbuild.train.layout import padded_vocab
    from envbuild.train.memory import GIB

    gpus = probe.gpus
    vocab = padded_vocab(shape.vocab, layout.tp)
    args = payload_args(opts, layout, shape, vocab)
    outcome = probe.launch_outcome(args, nranks=layout.world, deadline_s=deadline_for(opts))
    run = _Run(opts, shape, layout, gpu, vocab, outcome, {
        "layout": layout.to_dict(), "layers": opts.layers, "seq": opts.seq, "mbs": opts.mbs,
        "estimate_GiB": {k: round(v / GIB, 2) for k, v in estimate.items()},
        "payload_args": [a for a in args if not a.startswith("{")], "gpus": gpus, "gpu_name": gpu.get("name"),
    })
    results = [r.result for r in outcome.ranks if r.result is not None]
    skipped = next((r for r in results if r.get("status") == "skip"), None)
    if skipped is not None and outcome.ok:
        return verdict(Status.SKIP, str(skipped.get("summary")),
                      remediation=skipped.get("remediation") or INSTALL_HINT, evidence=run.evidence)
    refused = next((r for r in results if r.get("refused")), None)
    if refused is not None:  # the environment cannot run this layout/spec (e.g. CP without TE): no GPU work done
        return verdict(Status.ERROR, str(refused.get("summary")),
                      remediation=refused.get("remediation"), evidence=run.evidence)
    oom = next((r for r in results if r.get("oom")), None) or _allocator_oom(outcome, opts.layers)
    if oom is not None:
        return _oom_result(run, oom)
    if not outcome.ok and not _only_teardown_hung(outcome):
        return _broken_result(run)
    return _verdict_result(run)


@dataclass
class _Run:
    """What one launch of the payload had and gave: the inputs and the launcher's outcome."""

    opts: Any
    shape: Any
    layout: Any
    gpu: Dict[str, Any]
    vocab: int
    outcome: Any
    evidence: Dict[str, Any]

    def rank0(self) -> Dict[str, Any]:
        return next((r.result for r in self.outcome.ranks if r.rank == 0 and r.result), None) or {}

    def flops_per_token(self) -> int:
        from envbuild.train.flops import train_flops_per_token

        return train_flops_per_token(self.shape, self.opts.layers, self.opts.seq, self.vocab)

    def tokens_per_step(self) -> int:
        return self.opts.mbs * self.opts.seq * self.layout.dp


def usable_capacity(total: Optional[int], free_at_start: Optional[int]) -> Tuple[Optional[int], int]:
    """(bytes the estimate may fill, bytes other processes held) for a GPU the payload found partly taken.

    The payload reads the free memory once its own CUDA context and WORLD communicator exist; the estimate
    counts those in its overhead, so up to START_BYTES of what was taken counts as ours and the rest as
    other processes' (a colocated rollout engine, a leftover job).
    """
    from envbuild.train.memory import START_BYTES

    if not total or free_at_start is None:
        return total, 0
    held = max(total - free_at_start, 0)
    ours = min(held, START_BYTES)
    return free_at_start + ours, held - ours


def _allocator_oom(outcome, layers: int) -> Optional[Dict[str, Any]]:
    """A crashed rank whose allocator (torch_memory_saver's) exited on an out-of-memory, as the payload's own OOM
    verdict would say it (None when no rank did): it is a depth too deep for the GPU, not a broken node."""
    for r in outcome.ranks:
        found = ALLOCATOR_OOM.findall(r.stderr_tail or "") if r.rank in outcome.crashed_ranks else []
        if found:
            own = r.result or {}
            phase = (None if own.get("partial") else own.get("phase")) or r.phase
            evidence = own.get("evidence") or {}
            record = {"phase": phase, "message": found[-1][:400]}
            # what the GPU had free at the start (a partial verdict carries it): memory others held is named
            record.update({k: evidence[k] for k in ("free_at_start_bytes", "device_total_bytes") if k in evidence})
            return {"summary": f"out of memory in phase {phase!r} at depth {layers} (torch_memory_saver's allocator)",
                    "rank": r.rank, "evidence": {"oom": record, "steps": evidence.get("steps", [])}}
    return None


def _oom_result(run: _Run, oom: Dict[str, Any]) -> Result:
    """An out-of-memory: the phase, the depth the estimate says would fit in the memory that was free, what
    other processes held, and M4 if it came after cycle 0."""
    from envbuild.train.memory import GIB, depth_that_fits

    opts, layout = run.opts, run.layout
    details = oom.get("evidence", {})
    record = details.get("oom") or {}
    # The payload's free and total come from one source (cudaMemGetInfo); NVML's total is 0.6 GiB larger
    # on an H200, so mixing them would charge that difference to other processes.
    total = record.get("device_total_bytes") if record.get("free_at_start_bytes") else None
    capacity, others = usable_capacity(total or run.gpu.get("memory_bytes"), record.get("free_at_start_bytes"))
    fits = depth_that_fits(run.shape, layout, opts.seq, opts.mbs, capacity) if capacity else 0
    fits = min(fits, opts.layers - layout.pp) if opts.layers > layout.pp else 0
    grew = any(s.get("step", 0) > 0 for s in details.get("steps", []))
    evidence = dict(run.evidence, oom=record, steps=details.get("steps"), rank=oom.get("rank"),
                    usable_GiB=round(capacity / GIB, 2) if capacity else None, held_by_others_GiB=round(others / GIB, 2))
    taken = (f"; other processes held {others / GIB:.1f} GiB of the GPU when the run started"
             if others >= GIB else "")
    asked = re.search(r"Tried to allocate ([\d.]+ [KMGT]iB)", record.get("message") or "")
    return verdict(Status.FAIL,
                  f"{oom.get('summary')}{f' (asked for {asked.group(1)} more)' if asked else ''} "
                  f"({layout.describe()}){taken}; "
                  + (f"depth {fits} would fit: --set train.layers={fits}" if fits else
                     "no smaller depth fits: raise train.ep or train.tp"),
                  evidence=evidence, causes=["M4"] if grew else [],
                  remediation=(f"rerun with --set train.layers={fits}" if fits else "raise train.ep/train.tp")
                  + ("; or free the GPU first (nvidia-smi lists its processes)" if taken else "")
                  + ("; memory ran out after the first cycle, so look for per-cycle growth (M4)" if grew else ""))


def _broken_result(run: _Run) -> Result:
    """A hang or crash: the phase and step it happened in, its causes, and what the completed cycles showed."""
    from envbuild.train.assess import PHASE_CAUSES, assess, phase_kind

    outcome, opts, layout = run.outcome, run.opts, run.layout
    broken = PROBE.failure(outcome)
    rank0 = run.rank0()
    steps = (rank0.get("evidence") or {}).get("steps", [])
    done = [s for s in steps if s.get("cycle")]
    phase = _failed_phase(outcome)
    kind = phase_kind(phase)
    broken.causes = list(PHASE_CAUSES.get(kind, ())) or ["M4", "M5"]
    software = _software_error(outcome)
    if (kind in ("import", "build") or software) and not outcome.hung_ranks:
        # The model could not be built, or Python itself failed (a NameError in megatron-core, a changed
        # signature): megatron-core and this torch (or a missing Apex/TE piece) disagree. The check could
        # not run; that is no verdict on the node.
        broken.status, broken.causes = Status.ERROR, []
    broken.evidence.update(run.evidence, failed_phase=phase, steps=steps)
    if software:
        broken.summary += (f"; megatron-core {software.get('megatron_core') or '?'} at "
                           f"{software.get('megatron_core_path') or '?'} cannot run in this environment "
                           f"(a Python error, not a GPU or NCCL one: no verdict on the node)")
        broken.remediation = _known_breakage(broken.summary) or (
            f"test the node with the megatron-core release the check is built for ({INSTALL_HINT}); then fix "
            f"the environment's Megatron")
    if kind:
        broken.summary = f"[{kind}] {broken.summary}"
    broken.summary += f" ({len(done)} cycle(s) had completed; {layout.describe()}, {opts.layers} layers)"
    earlier = assess(steps, global_tokens=run.tokens_per_step(), flops_per_token=run.flops_per_token(),
                     gpus=layout.world, peak_tflops=None,
                     weight_bytes=int((rank0.get("evidence") or {}).get("weight_bytes_per_rank") or 0))
    if earlier.problems:  # what the completed cycles already showed, e.g. a leak before a hang
        broken.summary += "; before that: " + "; ".join(earlier.problems)
        broken.causes = list(dict.fromkeys(earlier.causes + broken.causes))
    broken.metrics = [Metric(**m) for m in earlier.metrics]
    _out_of_time_not_hung(broken, outcome, done, opts.steps, earlier.problems)
    return broken


SOFTWARE_ERRORS = frozenset({"NameError", "AttributeError", "TypeError", "ImportError", "ModuleNotFoundError",
                             "NotImplementedError", "AssertionError"})

# Breakages seen on the lent machine, by a string of their error message: what a user should do.
KNOWN_BREAKAGES = (
    ("te_general_gemm",
     "Megatron-LM before 9ed8b0c4 (2026-03-19, #3763; first released in core_v0.17.0) routes MoE tokens "
     "through Transformer Engine's te_general_gemm and never defines it without TE (slime v0.3.1 pins "
     "1dcf0daf, which has this; seen on the lent H200s, docs/gpu-runs): install the profile's "
     "transformer-engine, or test the node with megatron-core>=0.17 (pip install megatron-core==0.19.2)"),
)


def _software_error(outcome) -> Optional[Dict[str, Any]]:
    """The evidence of the first crashed rank whose exception is a Python error (the code, not the node)."""
    for r in outcome.ranks:
        own = r.result or {}
        if r.rank in outcome.crashed_ranks and own.get("exception") in SOFTWARE_ERRORS:
            return dict(own.get("evidence") or {}, exception=own.get("exception"))
    return None


def _known_breakage(summary: str) -> Optional[str]:
    return next((fix for needle, fix in KNOWN_BREAKAGES if needle in summary), None)


def _failed_phase(outcome) -> Optional[str]:
    """The phase the first crashed or hung rank (that knows one) failed in.

    A rank that raised names its phase in its verdict (the phase file then says "teardown"); a killed rank's
    phase file is where it was. A partial verdict (written before the end) names no failure phase."""
    for r in outcome.ranks:
        if r.rank not in outcome.crashed_ranks + outcome.hung_ranks:
            continue
        own = r.result or {}
        if r.phase or own.get("phase"):
            return (None if own.get("partial") else own.get("phase")) or r.phase
    return None


def _out_of_time_not_hung(broken: Result, outcome, done: List[Dict[str, Any]], planned: int,
                          problems: List[str]) -> None:
    """Reword a run stopped by its overall deadline while every rank was still moving.

    Why: a cycle with torch_memory_saver's CPU backup can take 20-30 s (GPU run final-integrated, EP 2:
    offload 15.5 s), so 10 cycles can outlast a deadline while each rank had been in its current phase
    for only a few seconds. Calling that a hang (M4) sends people after a bug that is not there; the
    verdict is a warning that the check did not finish, with the deadline that would let it.
    """
    if not outcome.hung_ranks or outcome.crashed_ranks or problems or not done:
        return
    if not outcome.run_deadline_passed:
        return
    cycle_s = max(float(s.get("cycle_s") or 0.0) for s in done)
    stuck = [r for r in outcome.ranks if r.rank in outcome.hung_ranks]
    if cycle_s <= 0 or any(r.phase_elapsed_s is None or r.phase_elapsed_s > cycle_s for r in stuck):
        return
    startup_s = max(outcome.wall_s - sum(float(s.get("cycle_s") or 0.0) for s in done), 0.0)
    need = int(startup_s + cycle_s * planned * 1.2) + 30
    broken.status = Status.WARN
    broken.causes = []
    broken.summary = (f"did not finish: {outcome.reason} with every rank still moving (in its current phase "
                      f"{max(r.phase_elapsed_s for r in stuck):.0f} s, under one {cycle_s:.1f} s cycle) after "
                      f"{len(done)} of {planned} cycles, all healthy; no hang")
    broken.remediation = f"rerun with a longer deadline, e.g. --set train.deadline={need}"


def _verdict_result(run: _Run) -> Result:
    """Every rank finished: judge rank 0's step records (loss, leaks, release) and report the numbers."""
    from envbuild.train.assess import assess
    from envbuild.train.flops import forward_flops_per_token
    from envbuild.train.memory import GIB
    from envbuild.train.peaks import peak_for

    outcome, opts, layout = run.outcome, run.opts, run.layout
    ev = run.rank0().get("evidence", {})
    steps = ev.get("steps", [])
    peak = peak_for(ev.get("gpu_name") or run.gpu.get("name"))
    flops = run.flops_per_token()
    tokens = run.tokens_per_step()
    weight_bytes = int(ev.get("weight_bytes_per_rank") or 0)
    offloaded = (ev.get("offload_mode") or {}).get("offload") != "none"  # train.offload=none frees only comms
    judged = assess(steps, global_tokens=tokens, flops_per_token=flops, gpus=layout.world,
                     peak_tflops=peak.bf16_dense_tflops if peak else None, weight_bytes=weight_bytes,
                     offloaded=offloaded)
    peaks_by_rank = {f"rank{r.rank}": max([s.get("peak_allocated_bytes") or 0
                                           for s in ((r.result or {}).get("evidence") or {}).get("steps", [])]
                                          or [0])
                     for r in outcome.ranks}
    evidence = dict(run.evidence)
    evidence.update({
        "megatron_core": ev.get("megatron_core"), "torch": ev.get("torch"), "nccl": ev.get("nccl"),
        "spec": ev.get("spec"), "offload_mode": ev.get("offload_mode"),
        "torch_memory_saver": ev.get("torch_memory_saver"), "params_per_rank": ev.get("params_per_rank"),
        "weight_bytes_per_rank": weight_bytes, "groups_per_cycle": ev.get("groups_member"),
        "new_group_calls_total": ev.get("new_group_calls_total"), "gpu_name": ev.get("gpu_name"),
        "peak_sku": asdict(peak) if peak else None, "flops_per_token": flops, "global_tokens_per_step": tokens,
        "forward_flops_per_token": forward_flops_per_token(run.shape, opts.layers, opts.seq, run.vocab),
        "peak_allocated_bytes_by_rank": peaks_by_rank, "steps": steps,
    })
    if not peak:
        evidence["mfu_note"] = f"no peak for GPU {ev.get('gpu_name')!r} in envbuild/train/peaks.py: MFU not given"
    if outcome.hung_ranks:  # only in teardown, after every rank's judged (_only_teardown_hung)
        judged.problems.append(f"rank(s) {outcome.hung_ranks} hung in teardown after their result and were killed")
        judged.causes = list(dict.fromkeys(judged.causes + ["M4"]))
        judged.summary = "; ".join(judged.problems)
        judged.status = "fail" if judged.status == "fail" else "warn"
    metrics = [Metric("layers", opts.layers, "layers")] + [Metric(**m) for m in judged.metrics]
    f = judged.figures
    what = (f"{f['cycles']} cycles + {f['plain']} plain steps, {opts.layers} layers, {layout.describe()}, "
            f"{opts.seq * opts.mbs} tokens/micro-batch")
    if judged.status == "pass":
        parts = [what, f"loss {f['loss_first']:.2f} -> {f['loss_last']:.2f}"]
        if f["plain_s"]:
            parts.append(f"{f['plain_s']:.3f} s/step, {f['tokens_per_s']:,.0f} tok/s")
        if f["mfu"] is not None:
            parts.append(f"MFU {100 * f['mfu']:.1f} % of {peak.bf16_dense_tflops:.0f} TFLOP/s")
        if f["ratio"]:
            parts.append(f"cycle {f['ratio']:.1f}x a plain step")
        if f["released"] is not None and weight_bytes and offloaded:
            parts.append(f"offload freed {f['released'] / GIB:.1f} GiB ({f['released'] / weight_bytes:.1f}x weights)")
        summary = "; ".join(parts)
    else:
        summary = f"{judged.summary} ({what})"
    return verdict(Status(judged.status), summary, evidence=evidence, metrics=metrics,
                  causes=judged.causes,
                  remediation=None if judged.status == "pass" else
                  "compare with the same run without offload (--set train.offload=none) and read the step "
                  "records in the evidence; docs/checks-train.md lists what each cause means here")
