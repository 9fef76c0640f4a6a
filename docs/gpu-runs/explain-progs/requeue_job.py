# A preemptible training job step: the trainer (GPU) reads batches from a data-producer process (spawn) over a
# multiprocessing queue (each batch saved to a local spool file, its path sent on the queue). On SIGTERM (the
# scheduler's preemption or time-limit notice) it checkpoints at the next step boundary, stops the producer and exits
# 0, to be requeued; a later run resumes from the checkpoint. The job's submit script (in the case) sends the signal and requeues.
#   default: run to TOTAL steps or until SIGTERM; resumes from requeue-ckpt/last.pt when it is there; healthy
#   if the producer stops sending (a stopped or hung process), the trainer gives up after GET_TIMEOUT seconds with
#     the producer's state from /proc, kills it and raises
#   PIDFILE (the trainer's pid, written once the first batch came), PRODUCER_PIDFILE, TOTAL (600), STEP_SLEEP
#   (0.005), GET_TIMEOUT (10), DEVICE (cuda; cpu for a dry run)
import multiprocessing as mp
import os
import queue
import signal
import sys
import time

import torch

CKPT = "requeue-ckpt/last.pt"
SPOOL = "requeue-spool"
TOTAL = int(os.environ.get("TOTAL", "600"))
GET_TIMEOUT = float(os.environ.get("GET_TIMEOUT", "10"))


def producer(q, stop, start_step, seed):
    """Makes batches (CPU) for steps start_step.. and puts them on the queue; ends by itself after TOTAL."""
    w = torch.randn(128, 16, generator=torch.Generator().manual_seed(1234))  # the task: the same in every run
    torch.manual_seed(seed)
    for step in range(start_step, TOTAL + 1):
        if stop.is_set():
            break
        x = torch.randn(512, 128)
        y = (x @ w).argmax(1)
        path = f"{SPOOL}/batch-{step:06d}.pt"
        torch.save({"step": step, "x": x, "y": y}, path + ".tmp")
        os.replace(path + ".tmp", path)
        while not stop.is_set():
            try:
                q.put(path, timeout=0.5)
                break
            except queue.Full:
                pass
    if stop.is_set():
        q.cancel_join_thread()  # the trainer reads no more: do not wait to flush at exit
    else:
        q.put(None)


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return {"R": "R (running)", "S": "S (sleeping)", "D": "D (disk sleep)", "T": "T (stopped)",
                "t": "t (tracing stop)", "Z": "Z (zombie)"}.get(fields[0], fields[0])
    except OSError as e:
        return f"unknown ({e.strerror})"


def main():
    dev = torch.device(os.environ.get("DEVICE", "cuda"))
    step_sleep = float(os.environ.get("STEP_SLEEP", "0.005"))
    term = {"sig": None}
    signal.signal(signal.SIGTERM, lambda s, f: term.update(sig=s))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 16)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    start = 1
    if os.path.exists(CKPT):
        ck = torch.load(CKPT, map_location=dev)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        start = ck["step"] + 1
        print(f"resuming from {CKPT}: step {ck['step']}, loss {ck['loss']:.4f} (requeue count {ck['requeues']})",
              flush=True)
    else:
        ck = {"requeues": 0}
        print(f"no checkpoint at {CKPT}; starting at step 1 of {TOTAL}", flush=True)
    os.makedirs(SPOOL, exist_ok=True)
    ctx = mp.get_context("spawn")
    q, stop = ctx.Queue(maxsize=8), ctx.Event()
    prod = ctx.Process(target=producer, args=(q, stop, start, 1234 + start), name="data-producer", daemon=True)
    prod.start()
    if os.environ.get("PRODUCER_PIDFILE"):
        with open(os.environ["PRODUCER_PIDFILE"], "w") as f:
            f.write(str(prod.pid))
    print(f"trainer pid {os.getpid()} on {torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'cpu'}, "
          f"data producer pid {prod.pid}", flush=True)
    step, loss = start - 1, None
    t0 = time.time()
    while True:
        try:
            item = q.get(timeout=GET_TIMEOUT)
        except queue.Empty:
            state = proc_state(prod.pid)
            print(f"[trainer] no batch from the data producer for {GET_TIMEOUT:.0f} s after step {step}; producer "
                  f"pid {prod.pid} alive={prod.is_alive()} state={state}", flush=True)
            prod.kill()
            prod.join(5)
            raise RuntimeError(f"data producer (pid {prod.pid}) sent no batch for {GET_TIMEOUT:.0f} s "
                               f"(state {state}); giving up at step {step}")
        if item is None:
            break
        b = torch.load(item)
        os.remove(item)
        step = b["step"]
        if step == start and os.environ.get("PIDFILE"):
            with open(os.environ["PIDFILE"], "w") as f:
                f.write(str(os.getpid()))
        x, y = b["x"].to(dev, non_blocking=True), b["y"].to(dev, non_blocking=True)
        out = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        out.backward()
        opt.step()
        loss = out.item()
        time.sleep(step_sleep)
        if step % 100 == 0:
            print(f"step {step}/{TOTAL} loss {loss:.4f} ({(step - start + 1) / (time.time() - t0):.0f} steps/s)",
                  flush=True)
        if term["sig"] is not None:
            os.makedirs(os.path.dirname(CKPT), exist_ok=True)
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "loss": loss,
                        "requeues": ck["requeues"] + 1}, CKPT)
            print(f"received {signal.Signals(term['sig']).name} at step {step}: checkpoint saved to {CKPT}, "
                  f"stopping the data producer and exiting for requeue", flush=True)
            stop.set()
            prod.join(10)
            print(f"data producer exited with code {prod.exitcode}", flush=True)
            return 0
    prod.join(10)
    print(f"training complete: step {step}/{TOTAL}, final loss {loss:.4f}", flush=True)
    if os.path.exists(CKPT):
        os.remove(CKPT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
