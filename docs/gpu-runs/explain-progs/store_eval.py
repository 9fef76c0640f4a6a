"""A trainer that publishes weight versions through a torch.distributed TCPStore it hosts on 127.0.0.1, and an
evaluator process (this file with --eval PORT, started by the trainer) that waits for each version with a short
timeout, logging every timeout with its traceback and waiting again, scores it and writes the score back.
The trainer ends after VERSIONS versions are scored. DEVICE=cpu trains on the CPU."""
import datetime, io, logging, os, subprocess, sys, time, traceback
import torch
import torch.distributed as dist

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s [%(name)s] %(message)s")
VERSIONS = int(os.environ.get("VERSIONS", 8))
DIM = 512


def evaluator(port):
    log = logging.getLogger("evaluator")
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=10))
    g = torch.Generator().manual_seed(7)
    x = torch.randn(4096, DIM, generator=g)
    y = torch.tanh(x @ torch.linspace(-1, 1, DIM).unsqueeze(1) / 8)
    failures, rows = 0, []
    for v in range(1, VERSIONS + 1):
        while True:
            try:
                store.wait([f"w/{v}"], datetime.timedelta(seconds=1))
                break
            except Exception as e:
                failures += 1
                if "timeout" in str(e).lower() and failures < 60:
                    log.warning("version %d not published yet: %s: %s\n%s", v, type(e).__name__, e,
                                traceback.format_exc().rstrip())
                    continue
                log.error("lost the trainer's store at 127.0.0.1:%d while waiting for version %d", port, v)
                raise
        w = torch.load(io.BytesIO(store.get(f"w/{v}")))
        mse = torch.nn.functional.mse_loss(x @ w, y).item()
        store.set(f"score/{v}", f"{mse:.6f}")
        rows.append((v, mse))
        log.info("scored version %d: held-out mse %.6f", v, mse)
    print(f"\n{'version':>8} {'held-out mse':>14}")
    for v, m in rows:
        print(f"{v:>8} {m:>14.6f}")


def trainer():
    log = logging.getLogger("trainer")
    dev = torch.device("cpu") if os.environ.get("DEVICE") == "cpu" else torch.device("cuda", 0)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=30))
    log.info("store on 127.0.0.1:%d; starting the evaluator", store.port)
    ev = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--eval", str(store.port)])
    open("trainer.pid", "w").write(str(os.getpid()))
    w = torch.zeros(DIM, 1, device=dev, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.05)
    wt = torch.linspace(-1, 1, DIM, device=dev).unsqueeze(1) / 8
    for v in range(1, VERSIONS + 1):
        t = time.time()
        while time.time() - t < float(os.environ.get("VERSION_S", 2.5)):
            x = torch.randn(1024, DIM, device=dev)
            loss = torch.nn.functional.mse_loss(x @ w, torch.tanh(x @ wt))
            opt.zero_grad()
            loss.backward()
            opt.step()
        buf = io.BytesIO()
        torch.save(w.detach().cpu(), buf)
        store.set(f"w/{v}", buf.getvalue())
        log.info("published version %d (train mse %.6f)", v, loss.item())
    store.wait([f"score/{VERSIONS}"], datetime.timedelta(seconds=60))
    scores = {v: float(store.get(f"score/{v}")) for v in range(1, VERSIONS + 1)}
    rc = ev.wait(30)
    best = min(scores, key=scores.get)
    log.info("evaluator exited with %d; best version %d (mse %.6f) kept as best.pt", rc, best, scores[best])
    torch.save(w.detach().cpu(), "best.pt")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--eval":
        evaluator(int(sys.argv[2]))
    else:
        trainer()
