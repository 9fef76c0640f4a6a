"""What `envbuild record` costs a job, each number next to its anchor measured in the same run.

    python benchmarks/bench_record.py start [--actors 8] [--rounds 3] [--json FILE]   # goal: <= 30 ms per worker
    python benchmarks/bench_record.py gpu [--steps 100] [--rounds 5] [--json FILE]    # goal: <= 2 % fewer steps/s

start (CPU, a real local Ray cluster of one node): a driver creates actors one after another, each in a new Ray
worker process, and times `ray.get(Actor.remote().ready.remote())` (the worker's start, its setup hook, the
actor's __init__ and one call); the anchor is the same driver with a runtime env without the hook. Drivers with
and without the hook alternate, so the machine's other load falls on both alike. Printed: the medians and their
ratio; the difference of each round's adjacent drivers and its median (the goal's number: less moved by the
machine's other load than the pooled medians); the hook's start path as each worker timed it (`setup_ms` of its
`start` event); and the same in a plain interpreter with the hook's imports.

gpu (the lent GPU; torch with CUDA): a training loop in one process on a one-rank NCCL group, with recording on
(the recorder through its sitecustomize bootstrap, which switches PyTorch's flight recorder on with 2000 entries
and wraps torch.distributed's collectives to catch their first error) and off (TORCH_FR_BUFFER_SIZE=0, no
recorder); runs alternate, the first side alternating per round. Two step shapes, each against its own anchor:
  bucketed (the goal's number): a training step as Megatron's DDP runs it: 4 MLP blocks (4096 -> 16384 -> 4096,
    bf16, 4096 tokens), forward and backward, the gradients all-reduced in buckets of 40M elements (Megatron's
    default bucket size), SGD: ~0.5 B parameters, 14 collectives a step;
  per-param (a worst case, no goal): 4 linear layers of 4096 on 2048 tokens and one all_reduce per parameter
    tensor: a 1-2 ms step with 8 collectives, where a per-collective cost shows most;
and a micro loop of 2000 all_reduces of 1 KiB, which prints what recording costs per collective (microseconds).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DRIVER = r"""
import json, os, sys, time
import ray
address, renv, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
ray.init(address=address, runtime_env=renv, log_to_driver=False, logging_level="ERROR")

@ray.remote(num_cpus=0)
class Probe:
    def ready(self):
        return os.getpid()

out = []
for i in range(n):
    t0 = time.perf_counter()
    a = Probe.remote()
    ray.get(a.ready.remote())
    out.append(time.perf_counter() - t0)
    ray.kill(a)
    time.sleep(0.3)  # let the killed worker go before the next start
print(json.dumps(out))
"""

HOOK_ALONE = r"""
import os, sys, time
t0 = time.perf_counter()
from envbuild.record import hook
hook.setup()
print(time.perf_counter() - t0)
"""


def _env(extra: Dict[str, str]) -> Dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "RAY_USAGE_STATS_ENABLED": "0", **extra}


def bench_start(actors: int, rounds: int) -> Dict[str, Any]:
    from envbuild.fleet.localray import LocalRayCluster
    from envbuild.record.runenv import record_env

    times: Dict[str, List[float]] = {"plain": [], "record": []}
    per_round: Dict[str, List[List[float]]] = {"plain": [], "record": []}
    with tempfile.TemporaryDirectory(prefix="bench-record-") as tmp, \
            LocalRayCluster(workers=0, num_cpus=2, env=_env({})) as cluster:
        # both modes with a runtime env of their own (env_vars), so both start workers the same way
        envs = {"plain": {"env_vars": {"BENCH_MODE": "plain"}}, "record": record_env(os.path.join(tmp, "run"))}
        envs["record"]["env_vars"]["BENCH_MODE"] = "record"
        for r in range(rounds):
            for mode in (("plain", "record") if r % 2 == 0 else ("record", "plain")):
                proc = subprocess.run([sys.executable, "-c", DRIVER, cluster.address, json.dumps(envs[mode]),
                                       str(actors)], capture_output=True, text=True, env=_env({}), timeout=600)
                if proc.returncode != 0:
                    raise SystemExit(f"driver ({mode}) exited {proc.returncode}: {proc.stderr[-1500:]}")
                got = json.loads(proc.stdout.strip().splitlines()[-1])
                got = got[1:] if r == 0 else got  # the very first start of a mode warms Ray's caches
                times[mode] += got
                per_round[mode].append(got)
                print(f"round {r + 1} {mode:6s}: median {statistics.median(got) * 1000:7.1f} ms over {len(got)} starts",
                      flush=True)
        recorded = sum(1 for _ in Path(tmp, "run").glob("*/proc/*"))
        in_worker = [e["setup_ms"] for f in Path(tmp, "run").glob("*/proc/*/events.jsonl")
                     for e in map(json.loads, f.read_text().splitlines()) if e.get("kind") == "start" and "setup_ms" in e]
        alone = []
        for _ in range(15):
            proc = subprocess.run([sys.executable, "-c", HOOK_ALONE], capture_output=True, text=True, timeout=60,
                                  env=_env({"ENVBUILD_RECORD_DIR": os.path.join(tmp, "alone")}))
            alone.append(float(proc.stdout.strip()))
    plain, rec = statistics.median(times["plain"]), statistics.median(times["record"])
    paired = [(statistics.median(r) - statistics.median(p)) * 1000 for p, r in zip(per_round["plain"], per_round["record"])]
    out = {"mode": "start", "actors_per_driver": actors, "rounds": rounds, "samples": {k: len(v) for k, v in times.items()},
           "plain_median_s": plain, "record_median_s": rec, "added_ms": (rec - plain) * 1000, "ratio": rec / plain,
           "added_ms_per_round": paired, "added_ms_median_of_rounds": statistics.median(paired),
           "hook_setup_in_worker_median_ms": statistics.median(in_worker) if in_worker else None,
           "hook_setup_in_worker_max_ms": max(in_worker) if in_worker else None,
           "plain_quartiles_s": statistics.quantiles(times["plain"], n=4), "record_quartiles_s":
               statistics.quantiles(times["record"], n=4), "hook_start_path_median_ms": statistics.median(alone) * 1000,
           "processes_recorded": recorded, "goal_added_ms": 30}
    added = out["added_ms_median_of_rounds"]
    print(f"worker start, median of {len(times['plain'])} / {len(times['record'])}: without the hook "
          f"{plain * 1000:.1f} ms (anchor), with {rec * 1000:.1f} ms (ratio {out['ratio']:.3f}); added per round "
          f"(adjacent drivers) {', '.join(f'{d:+.0f}' for d in paired)} ms, median {added:+.1f} ms "
          f"(goal <= +30 ms: {'met' if added <= 30 else 'NOT met'}); the hook's start path in the workers "
          f"{out['hook_setup_in_worker_median_ms']} ms median, {out['hook_setup_in_worker_max_ms']} ms max; in a "
          f"plain interpreter (its imports included) {out['hook_start_path_median_ms']:.1f} ms; {recorded} worker(s) recorded")
    return out


GPU_WORKER = r"""
import os, sys, time, datetime
import torch, torch.distributed as dist
shape, steps, port = sys.argv[1], int(sys.argv[2]), sys.argv[3]
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=60), device_id=torch.device("cuda:0"))
torch.manual_seed(0)
if shape == "micro":  # per-collective cost: tiny all_reduces, nothing else
    t = torch.ones(256, device="cuda")
    for _ in range(200):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    print((time.perf_counter() - t0) / steps * 1e6)  # microseconds per collective
    dist.destroy_process_group()
    sys.exit(0)
if shape == "bucketed":
    hidden, ffn, tokens, blocks = 4096, 16384, 4096, 4
    layers = []
    for _ in range(blocks):
        layers += [torch.nn.Linear(hidden, ffn, bias=False, device="cuda", dtype=torch.bfloat16),
                   torch.nn.Linear(ffn, hidden, bias=False, device="cuda", dtype=torch.bfloat16)]
    act = torch.nn.functional.gelu
else:
    hidden, tokens = 4096, 2048
    layers = [torch.nn.Linear(hidden, hidden, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    act = torch.relu
params = [p for l in layers for p in l.parameters()]
x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
if shape == "bucketed":  # Megatron's DDP: one contiguous grad buffer, all-reduced bucket by bucket (40M elements)
    total = sum(p.numel() for p in params)
    grad_buffer = torch.zeros(total, device="cuda", dtype=torch.bfloat16)
    offset = 0
    for p in params:
        p.grad = grad_buffer[offset:offset + p.numel()].view_as(p)
        offset += p.numel()
    bucket = 40_000_000
    buckets = [grad_buffer[i:i + bucket] for i in range(0, total, bucket)]
    def reduce_grads():
        for b in buckets:
            dist.all_reduce(b)
else:
    def reduce_grads():
        for p in params:
            dist.all_reduce(p.grad)
def step():
    h = x
    for i, l in enumerate(layers):
        h = l(h)
        if shape != "bucketed" or i % 2 == 0:
            h = act(h)
    h.float().pow(2).mean().backward()
    reduce_grads()
    with torch.no_grad():
        for p in params:
            p -= 1e-4 * p.grad
            if shape != "bucketed":
                p.grad = None
        if shape == "bucketed":
            grad_buffer.zero_()
for _ in range(10):
    step()
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(steps):
    step()
torch.cuda.synchronize()
dt = time.perf_counter() - t0
dist.destroy_process_group()
print(steps / dt)
"""

SHAPES = ("bucketed", "per-param", "micro")


def _gpu_run(shape: str, mode: str, steps: int, run_dir: str) -> float:
    """One worker process: steps/s (the micro shape: microseconds per collective)."""
    from envbuild.fleet.localray import _free_port
    from envbuild.record.hook import bootstrap_dir

    extra = {"TORCH_FR_BUFFER_SIZE": "0", "TORCH_NCCL_TRACE_BUFFER_SIZE": "0"} if mode == "plain" else \
        {"ENVBUILD_RECORD_DIR": run_dir,
         "PYTHONPATH": os.pathsep.join([bootstrap_dir(), str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", GPU_WORKER, shape, str(steps), str(_free_port())],
                          capture_output=True, text=True, env=_env(extra), timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"gpu worker ({shape}, {mode}) exited {proc.returncode}: {proc.stderr[-1500:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def bench_gpu(steps: int, rounds: int, shapes: List[str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {"mode": "gpu", "steps": steps, "rounds": rounds, "goal_slower_pct": 2, "shapes": {}}
    with tempfile.TemporaryDirectory(prefix="bench-record-gpu-") as tmp:
        for shape in shapes:
            n = 2000 if shape == "micro" else steps * (10 if shape == "per-param" else 1)
            rates: Dict[str, List[float]] = {"plain": [], "record": []}
            for r in range(rounds):
                for mode in (("plain", "record") if r % 2 == 0 else ("record", "plain")):
                    value = _gpu_run(shape, mode, n, os.path.join(tmp, "run"))
                    rates[mode].append(value)
                    print(f"{shape:9s} round {r + 1} {mode:6s}: {value:.2f} "
                          f"{'us per collective' if shape == 'micro' else 'steps/s'}", flush=True)
            plain, rec = statistics.median(rates["plain"]), statistics.median(rates["record"])
            if shape == "micro":
                out["shapes"][shape] = {"collectives": n, "plain_us": rates["plain"], "record_us": rates["record"],
                                        "added_us_per_collective": rec - plain}
                print(f"micro: one all_reduce of 1 KiB, median of {rounds}: {plain:.1f} us without recording "
                      f"(anchor), {rec:.1f} us with: {rec - plain:+.1f} us per collective", flush=True)
                continue
            out["shapes"][shape] = {"steps": n, "plain_steps_per_s": rates["plain"], "record_steps_per_s":
                                    rates["record"], "ratio": rec / plain, "slower_pct": (1 - rec / plain) * 100}
            goal = f"goal <= 2 %: {'met' if (1 - rec / plain) * 100 <= 2 else 'NOT met'}" if shape == "bucketed" \
                else "no goal: a worst case"
            print(f"{shape}: train steps/s, median of {rounds}: without recording {plain:.2f} (anchor), with "
                  f"recording and the flight recorder {rec:.2f}: ratio {rec / plain:.4f}, "
                  f"{(1 - rec / plain) * 100:+.2f} % slower ({goal})", flush=True)
        out["processes_recorded"] = len(list(Path(tmp, "run").glob("*/proc/*")))
    out["slower_pct"] = out["shapes"]["bucketed"]["slower_pct"]
    return out


def _shapes(text: str) -> List[str]:
    shapes = [s for s in text.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown or "bucketed" not in shapes:
        raise SystemExit(f"--shapes {text}: each of {', '.join(SHAPES)}, and bucketed (the goal's) among them")
    return shapes


def main(argv: List[str] = None) -> int:  # type: ignore[assignment]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("start", help="Ray worker start with and without the setup hook (CPU)")
    s.add_argument("--actors", type=int, default=8, help="actor starts per driver")
    s.add_argument("--rounds", type=int, default=3, help="drivers per mode, alternated")
    g = sub.add_parser("gpu", help="train steps/s with and without recording (GPU)")
    g.add_argument("--steps", type=int, default=100, help="bucketed steps per run (per-param: 10x)")
    g.add_argument("--rounds", type=int, default=5)
    g.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)} (bucketed is the goal's)")
    for p in (s, g):
        p.add_argument("--json", help="write the numbers to this file")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    out = bench_start(args.actors, args.rounds) if args.mode == "start" else bench_gpu(args.steps, args.rounds, _shapes(args.shapes))
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
