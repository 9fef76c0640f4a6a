# A trainer that runs evaluation in a separate worker process (as async-eval setups do) every EVAL_EVERY steps and
# prints a metrics table. The worker loads the saved weights onto a GPU and scores each benchmark in BENCH from
# eval-data/<name>.jsonl. A failed eval is logged and training goes on, unless REQUIRE_EVAL=1. Knobs:
#   BENCH: comma list of benchmarks; EVAL_CVD: CUDA_VISIBLE_DEVICES given to the worker (the eval GPU it is pinned to)
import json
import os
import subprocess
import sys
import time

import torch


def build():
    return torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 8))


if len(sys.argv) > 1 and sys.argv[1] == "--eval":  # the eval worker
    weights, step = sys.argv[2], int(sys.argv[3])
    print(f"[eval-worker] step {step}: CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}", flush=True)
    model = build()
    model.load_state_dict(torch.load(weights, map_location="cpu"))
    model = model.cuda().eval()
    for name in os.environ.get("BENCH", "heldout").split(","):
        with open(f"eval-data/{name}.jsonl") as f:
            rows = [json.loads(line) for line in f]
        x = torch.tensor([r["x"] for r in rows], device="cuda")
        y = torch.tensor([r["y"] for r in rows], device="cuda")
        with torch.no_grad():
            acc = (model(x).argmax(1) == y).float().mean().item()
        print(f"[eval-worker] {name}: {len(rows)} examples, accuracy {acc:.4f}", flush=True)
    raise SystemExit(0)

os.makedirs("eval-data", exist_ok=True)
torch.manual_seed(0)
W = torch.randn(64, 8)
with open("eval-data/heldout.jsonl", "w") as f:
    for _ in range(256):
        x = torch.randn(64)
        f.write(json.dumps({"x": x.tolist(), "y": int((x @ W).argmax())}) + "\n")
model = build().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
every, steps = int(os.environ.get("EVAL_EVERY", "20")), int(os.environ.get("STEPS", "60"))
env = dict(os.environ)
if "EVAL_CVD" in os.environ:
    env["CUDA_VISIBLE_DEVICES"] = os.environ["EVAL_CVD"]
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}; eval every {every} steps", flush=True)
print(f"| {'step':>5} | {'loss':>8} | {'acc':>6} | {'grad_norm':>9} | {'mem MiB':>7} | {'samples/s':>9} |", flush=True)
print(f"|{'-' * 7}|{'-' * 10}|{'-' * 8}|{'-' * 11}|{'-' * 9}|{'-' * 11}|", flush=True)
failed, t0 = 0, time.time()
for step in range(1, steps + 1):
    x = torch.randn(256, 64, device="cuda")
    y = (x @ W.cuda()).argmax(1)
    out = model(x)
    loss = torch.nn.functional.cross_entropy(out, y)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0).item()
    opt.step()
    opt.zero_grad()
    if step % 10 == 0:
        acc = (out.argmax(1) == y).float().mean().item()
        print(f"| {step:5d} | {loss.item():8.4f} | {acc:6.3f} | {gn:9.3f} | {torch.cuda.memory_allocated() >> 20:7d} | "
              f"{256 * 10 / (time.time() - t0):9.0f} |", flush=True)
        t0 = time.time()
    if step % every == 0:
        os.makedirs("out", exist_ok=True)
        torch.save(model.state_dict(), f"out/step{step}.pt")
        r = subprocess.run([sys.executable, sys.argv[0], "--eval", f"out/step{step}.pt", str(step)], env=env)
        if r.returncode != 0:
            failed += 1
            if os.environ.get("REQUIRE_EVAL") == "1":
                raise RuntimeError(f"eval worker for step {step} exited with code {r.returncode}")
            print(f"WARNING: eval at step {step} failed (worker exit code {r.returncode}); continuing training "
                  f"without eval metrics", flush=True)
torch.save(model.state_dict(), "out/final.pt")
print(f"model saved to out/final.pt after {steps} steps ({failed} eval run(s) failed)", flush=True)
