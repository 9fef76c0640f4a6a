"""A small generation server on 127.0.0.1 (http.server) with its load test in the same process: the model on the
GPU, a KV pool preallocated at start (KV_GB, under a per-process memory cap of CAP_GB), bad requests answered 400 and
logged with their tracebacks, an oversized batch that runs out of memory answered 503 (the cache is emptied and the
server goes on). SERVER=threading (default) or forking (a child process per request). DEVICE=cpu runs on the CPU."""
import json, logging, os, socketserver, statistics, sys, threading, time, traceback, urllib.error, urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
import torch

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s")
log = logging.getLogger("genserver")
CPU = os.environ.get("DEVICE") == "cpu"
DEV = torch.device("cpu") if CPU else torch.device("cuda", 0)
VOCAB, D, MAXLEN = 8192, 1024, 2048
CAP_GB = float(os.environ.get("CAP_GB", 16))
KV_GB = float(os.environ.get("KV_GB", 6))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, D)
        self.mix = torch.nn.Linear(D, D)
        self.out = torch.nn.Linear(D, VOCAB)

    @torch.no_grad()
    def generate(self, prompt, n, max_new):
        ids = torch.tensor(prompt, device=DEV).unsqueeze(0).repeat(n, 1)
        if CPU and n * ids.shape[1] ** 2 * 4 * 8 > 2**30:   # the CPU copy's stand-in for the GPU cap
            raise torch.OutOfMemoryError(f"CPU stand-in: {n} x {ids.shape[1]}^2 scores over the budget")
        for _ in range(max_new):
            h = self.emb(ids)
            # all-pairs scores of the batch: n x L x L floats (what an oversized batch runs out of)
            s = torch.softmax(h @ h.transpose(1, 2) / D ** 0.5, dim=-1)
            h = torch.tanh(self.mix(s @ h))
            ids = torch.cat([ids, self.out(h[:, -1]).argmax(-1, keepdim=True)], 1)
        return ids[:, len(prompt):].tolist()


MODEL = None


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        log.info("%s %s", self.address_string(), fmt % args)

    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        try:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            req = json.loads(raw)
            prompt, n, max_new = req["prompt"], int(req.get("n", 1)), int(req.get("max_new", 8))
            if len(prompt) + max_new > MAXLEN:
                raise ValueError(f"prompt of {len(prompt)} tokens + max_new {max_new} exceeds the context of {MAXLEN}")
            out = MODEL.generate(prompt, n, max_new)
            self.reply(200, {"tokens": out[0], "n": n})
        except (json.JSONDecodeError, KeyError, ValueError) as e:
            log.error("bad request: %s\n%s", e, traceback.format_exc().rstrip())
            self.reply(400, {"error": f"{type(e).__name__}: {e}"})
        except torch.OutOfMemoryError as e:
            log.error("out of memory serving a batch of %s; request rejected, cache emptied\n%s",
                      req.get("n"), traceback.format_exc().rstrip())
            if not CPU:
                torch.cuda.empty_cache()
            self.reply(503, {"error": "out of memory, retry with a smaller batch"})
        except Exception as e:
            log.error("internal error: %s\n%s", e, traceback.format_exc().rstrip())
            self.reply(500, {"error": f"{type(e).__name__}: {e}"})


class ForkingServer(socketserver.ForkingMixIn, HTTPServer):
    pass


class ThreadingServer(socketserver.ThreadingMixIn, HTTPServer):
    daemon_threads = True


def post(port, body):
    t = time.time()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()
            code = r.status
    except urllib.error.HTTPError as e:
        code = e.code
    return code, time.time() - t


def main():
    global MODEL
    torch.manual_seed(0)
    if not CPU:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, CAP_GB * 2**30 / total), 0)
        log.info("memory cap %.0f GiB of %.0f GiB on %s", CAP_GB, total / 2**30, torch.cuda.get_device_name(0))
    MODEL = Model().to(DEV).eval()
    kv = torch.empty(int(KV_GB * 2**30) // 2 if not CPU else 1 << 20, dtype=torch.bfloat16, device=DEV)
    log.info("KV pool: %.1f GiB preallocated (%d bf16 slots)", KV_GB, kv.numel())
    kind = os.environ.get("SERVER", "threading")
    srv = (ForkingServer if kind == "forking" else ThreadingServer)(("127.0.0.1", 0), Handler)
    port = srv.server_address[1]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    log.info("serving on 127.0.0.1:%d (%s)", port, kind)
    g = torch.Generator().manual_seed(1)
    load = []
    for i in range(40):
        p = torch.randint(0, VOCAB, (int(torch.randint(16, 256, (1,), generator=g)),), generator=g).tolist()
        load.append(("ok", json.dumps({"prompt": p, "n": 4, "max_new": 8}).encode()))
    load.insert(7, ("malformed", b'{"prompt": [1, 2, 3], "n": 2,'))
    load.insert(15, ("no prompt", json.dumps({"tokens": [5, 6]}).encode()))
    load.insert(22, ("too long", json.dumps({"prompt": list(range(2100)), "max_new": 8}).encode()))
    load.insert(30, ("oversized", json.dumps({"prompt": list(range(1900)), "n": 512, "max_new": 1}).encode()))
    load.insert(35, ("too long", json.dumps({"prompt": [3] * 2040, "max_new": 64}).encode()))
    codes, lat = {}, []
    for what, body in load:
        code, dt = post(port, body)
        codes[code] = codes.get(code, 0) + 1
        if code == 200:
            lat.append(dt * 1000)
    srv.shutdown()
    srv.server_close()
    del kv
    print(f"\nload test: {len(load)} requests, " + ", ".join(f"HTTP {c}: {k}" for c, k in sorted(codes.items())))
    if not lat:
        print("server unhealthy: no request succeeded")
        sys.exit(1)
    lat.sort()
    print(f"{'latency ms':<12}{'p50':>9}{'p90':>9}{'max':>9}")
    print(f"{'generate':<12}{statistics.median(lat):9.1f}{lat[int(0.9 * (len(lat) - 1))]:9.1f}{lat[-1]:9.1f}")
    log.info("shutdown complete")


if __name__ == "__main__":
    main()
