# A training job whose launcher wants its GPU to itself: before it starts it checks for memory held by other
# processes (device memory in use beyond this process's own context) and waits for the GPU to be free, listing the
# GPU's compute processes as nvidia-smi shows them.
#   default: another process (the previous job step's evaluation, started before this one, output not in this log)
#     holds the GPU for a while; the gate waits (WARNING lines every few seconds), sees it freed, trains; healthy
#   if the other process does not go away within WAIT_S, the gate prints nvidia-smi and raises
#   WAIT_S (90), POLL_S (3), OTHERS_GIB (2: more than this in use by others counts as busy), STEPS (80)
import os
import subprocess
import sys
import time

import torch

WAIT_S = float(os.environ.get("WAIT_S", "90"))
POLL_S = float(os.environ.get("POLL_S", "3"))
OTHERS_GIB = float(os.environ.get("OTHERS_GIB", "2"))
STEPS = int(os.environ.get("STEPS", "80"))
GIB = 1 << 30


def stamp():
    return time.strftime("%Y-%m-%d %H:%M:%S")


def compute_apps():
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        return [line.strip() for line in out.stdout.splitlines() if line.strip()] or ["(none listed)"]
    except (OSError, subprocess.TimeoutExpired) as e:
        return [f"(nvidia-smi: {e})"]


def others_gib(baseline):
    free, total = torch.cuda.mem_get_info()
    return max(0.0, (total - free - baseline) / GIB)


def main():
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    name = torch.cuda.get_device_name(0)
    free, total = torch.cuda.mem_get_info()
    # this process's own footprint: its context (measured once on an idle GPU it would be ~0.5 GiB)
    own = 0.6 * GIB
    print(f"[{stamp()}] gate: pid {os.getpid()} on {name}, {total / GIB:.1f} GiB, {free / GIB:.1f} GiB free",
          flush=True)
    t0 = time.time()
    while True:
        busy = others_gib(own)
        if busy <= OTHERS_GIB:
            break
        waited = time.time() - t0
        if waited >= WAIT_S:
            print(f"[{stamp()}] gate: GPU 0 still busy after {waited:.0f} s; nvidia-smi:", flush=True)
            try:
                subprocess.run(["nvidia-smi"], timeout=30)
            except (OSError, subprocess.TimeoutExpired) as e:
                print(f"(nvidia-smi: {e})", flush=True)
            raise RuntimeError(f"GPU 0 ({name}) is in use by another process: {busy:.1f} GiB held that this job did "
                               f"not allocate, still there after {WAIT_S:.0f} s; compute processes: "
                               + "; ".join(compute_apps()))
        print(f"[{stamp()}] WARNING gate: GPU 0 busy, {busy:.1f} GiB held by other processes; waiting "
              f"({waited:.0f} s of {WAIT_S:.0f} s); compute processes: " + "; ".join(compute_apps()), flush=True)
        time.sleep(POLL_S)
    print(f"[{stamp()}] gate: GPU 0 free after {time.time() - t0:.0f} s; starting training", flush=True)

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU())
                                  for _ in range(8)], torch.nn.Linear(4096, 1000)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(2048, 4096, device="cuda")
    y = torch.randint(0, 1000, (2048,), device="cuda")
    t1 = time.time()
    for step in range(1, STEPS + 1):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"[{stamp()}] step {step}/{STEPS} loss {loss.item():.4f}", flush=True)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() / GIB
    print(f"[{stamp()}] done: {STEPS} steps in {time.time() - t1:.1f} s, peak {peak:.1f} GiB; GPU released", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
