# A training run that finishes and says so, and then makes noise on its way out (healthy):
#   - a buffered metrics sink whose file is closed at the end of the run, then handed one more record; when main()
#     returns the sink is collected and its __del__ flushes into the closed file: "Exception ignored in: <function
#     MetricsSink.__del__ ...>", ValueError: I/O operation on closed file
#   - a progress board in POSIX shared memory (multiprocessing.shared_memory, for a monitoring sidecar) that is
#     closed but never unlinked: at shutdown the resource tracker warns about 1 leaked shared_memory object and
#     removes it (an atexit hook waits for the tracker, so its warning is in the log before the process ends)
#   The exit status is 0. STEPS, DEVICE (cuda; cpu for a dry run)
import atexit
import json
import os
import struct
import time
from multiprocessing import resource_tracker, shared_memory

import torch

dev = torch.device(os.environ.get("DEVICE", "cuda"))
STEPS = int(os.environ.get("STEPS", "300"))


class MetricsSink:
    """Buffers metric records and appends them to a JSONL file 50 at a time."""

    def __init__(self, path):
        self.f = open(path, "a")
        self.buf = []

    def log(self, rec):
        self.buf.append(rec)
        if len(self.buf) >= 50:
            self.flush()

    def flush(self):
        self.f.write("".join(json.dumps(r) + "\n" for r in self.buf))
        self.f.flush()
        self.buf.clear()

    def close(self):
        self.flush()
        self.f.close()

    def __del__(self):
        if self.buf:
            self.flush()


def wait_for_tracker():
    tracker = getattr(resource_tracker, "_resource_tracker", None)
    if tracker is not None and hasattr(tracker, "_stop"):
        tracker._stop()


def main():
    board = shared_memory.SharedMemory(create=True, size=1 << 20)
    atexit.register(wait_for_tracker)
    sink = MetricsSink("metrics.jsonl")
    print(f"progress board at /dev/shm{'' if board.name.startswith('/') else '/'}{board.name} (1 MiB); metrics to metrics.jsonl",
          flush=True)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.SiLU(), torch.nn.Linear(2048, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(3)
    proto = torch.randn(10, 1024, generator=g)
    t0 = time.time()
    for step in range(1, STEPS + 1):
        y = torch.randint(0, 10, (256,), generator=g)
        x = (proto[y] + 0.5 * torch.randn(256, 1024, generator=g)).to(dev)
        loss = torch.nn.functional.cross_entropy(model(x), y.to(dev))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        struct.pack_into("<if", board.buf, 0, step, loss.item())
        sink.log({"step": step, "loss": round(loss.item(), 5)})
        if step % 50 == 0:
            print(f"step {step:4d}/{STEPS} loss {loss.item():.4f}", flush=True)
    with torch.no_grad():
        y = torch.randint(0, 10, (2048,), generator=g)
        acc = (model((proto[y] + 0.5 * torch.randn(2048, 1024, generator=g)).to(dev)).argmax(1).cpu() == y).float().mean()
    torch.save(model.state_dict(), "exit-model.pt")
    sink.close()
    sink.log({"event": "run_end", "accuracy": round(acc.item(), 4)})  # after close: flushed (into the closed file) when main() returns
    board.close()
    print(f"run complete: {STEPS} steps in {time.time() - t0:.1f} s, eval accuracy {acc.item():.4f}, model saved", flush=True)


if __name__ == "__main__":
    main()
