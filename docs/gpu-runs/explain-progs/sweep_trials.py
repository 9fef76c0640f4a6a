# A small hyperparameter sweep: the scheduler (no torch in it) starts each trial as its own python process with
# CUDA_VISIBLE_DEVICES set from the GPUS list (round robin, 2 at a time), collects each trial's JSON result and
# prints a leaderboard. Trials that diverge or run out of memory are expected in a sweep and recorded.
# GPUS (default "0"): the devices trials are spread over; RANK_FAILED=1 puts failed trials into the ranking.
import json
import os
import subprocess
import sys
import time

TRIALS = [dict(lr=3e-3, batch=256), dict(lr=100.0, batch=256), dict(lr=1e-3, batch=1 << 15), dict(lr=1e-2, batch=128)]

if len(sys.argv) > 1 and sys.argv[1] == "--trial":
    import math
    import torch
    cfg = json.loads(sys.argv[2]); tid = cfg["id"]
    dev = torch.device("cpu") if os.environ.get("DEVICE") == "cpu" else torch.device("cuda", 0)
    out = {"id": tid, "status": "ok", "loss": None}
    try:
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"trial {tid}: no CUDA device visible (CUDA_VISIBLE_DEVICES="
                               f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}, device_count={torch.cuda.device_count()})")
        torch.manual_seed(tid)
        model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
        w = torch.randn(512, 10, device=dev)
        seq = 4096 if cfg["batch"] > 4096 else 1  # the big-batch trial packs sequences: batch x 4096 x 512 fp32 = 256 GiB, more than any GPU here
        for step in range(40):
            x = torch.randn(cfg["batch"], seq, 512, device=dev).mean(1)
            y = (x @ w).argmax(1)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            if not math.isfinite(loss.item()):
                raise FloatingPointError(f"trial {tid}: loss became {loss.item()} at step {step}")
            opt.zero_grad(); loss.backward(); opt.step()
        out["loss"] = round(loss.item(), 4)
    except torch.OutOfMemoryError as e:
        print(f"[trial {tid}] torch.OutOfMemoryError: {str(e).splitlines()[0]}", flush=True)
        out["status"] = "oom"
    except FloatingPointError as e:
        import traceback
        traceback.print_exc()
        out["status"] = "diverged"
    print("RESULT " + json.dumps(out), flush=True)
    sys.exit(0 if out["status"] != "crashed" else 1)

gpus = os.environ.get("GPUS", "0").split(",")
rank_failed = os.environ.get("RANK_FAILED", "0") == "1"
print(f"sweep: {len(TRIALS)} trials over GPUs {gpus}, 2 at a time", flush=True)
results, pending, queue = {}, {}, list(enumerate(TRIALS))
t0 = time.time()
while queue or pending:
    while queue and len(pending) < 2:
        tid, cfg = queue.pop(0)
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpus[tid % len(gpus)])
        p = subprocess.Popen([sys.executable, __file__, "--trial", json.dumps(dict(cfg, id=tid))], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        pending[tid] = (p, cfg)
        print(f"trial {tid} started on GPU {env['CUDA_VISIBLE_DEVICES']}: lr={cfg['lr']} batch={cfg['batch']}", flush=True)
    for tid in list(pending):
        p, cfg = pending[tid]
        if p.poll() is None:
            continue
        text = p.stdout.read()
        res = None
        for line in text.splitlines():
            if line.startswith("RESULT "):
                res = json.loads(line[7:])
            else:
                print(f"  [trial {tid}] {line}")
        if res is None:
            res = {"id": tid, "status": "crashed", "loss": None}
            print(f"trial {tid} crashed (exit code {p.returncode})", flush=True)
        res.update(cfg)
        results[tid] = res
        print(f"trial {tid} finished: {res['status']} loss={res['loss']}", flush=True)
        del pending[tid]
    time.sleep(0.2)

crashed = [r for r in results.values() if r["status"] == "crashed"]
if len(crashed) * 2 >= len(TRIALS):
    raise SystemExit(f"sweep aborted: {len(crashed)} of {len(TRIALS)} trials crashed (not diverged or out of memory)")
ranked = sorted(results.values() if rank_failed else [r for r in results.values() if r["status"] == "ok"],
                key=lambda r: r["loss"])
print(f"\nleaderboard ({time.time() - t0:.0f} s)\n  #  trial  lr       batch  status    loss")
for i, r in enumerate(ranked):
    print(f"{i + 1:3d}  {r['id']:5d}  {r['lr']:<7g}  {r['batch']:5d}  {r['status']:8s}  {r['loss']}")
for r in sorted(results.values(), key=lambda r: r["id"]):
    if r["status"] != "ok":
        print(f"  (trial {r['id']}: {r['status']}, not ranked)")
best = ranked[0]
print(f"best trial {best['id']}: lr={best['lr']} batch={best['batch']} loss={best['loss']} -> best_trial.json")
json.dump(best, open("best_trial.json", "w"))
