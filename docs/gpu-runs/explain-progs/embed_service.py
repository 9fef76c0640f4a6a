# An embedding microservice on 127.0.0.1 (http.server in a thread, a small encoder on the GPU) and its own
# readiness probe and smoke test. The probe starts before the server has loaded its model and bound the port (its
# connection refusals are retried), the smoke test asks once for a model that is not deployed (404, KeyError logged
# by the server) and sends one body that is not JSON (400). Ends with the /metrics text and "service stopped".
import json
import logging
import os
import threading
import time
import traceback
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)s %(levelname)s %(message)s")
log = logging.getLogger("embed")
PORT = int(os.environ.get("PORT", "29631"))
stats = {"requests_total": 0, "errors_total": 0, "tokens_total": 0}


def serve():
    import torch
    dev = torch.device("cpu") if os.environ.get("DEVICE") == "cpu" else torch.device("cuda", 0)
    time.sleep(2.5)  # weights load
    models = {"mini-enc": torch.nn.Sequential(torch.nn.EmbeddingBag(32000, 384), torch.nn.Linear(384, 384)).to(dev)}
    lock = threading.Lock()

    class H(BaseHTTPRequestHandler):
        def log_message(self, fmt, *a):
            log.info("%s %s", self.address_string(), fmt % a)

        def reply(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code); self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)

        def do_GET(self):
            if self.path == "/metrics":
                text = "".join(f"embed_{k} {v}\n" for k, v in stats.items()).encode()
                self.send_response(200); self.send_header("Content-Length", str(len(text))); self.end_headers()
                self.wfile.write(text)
            else:
                self.reply(200, {"status": "ready"})

        def do_POST(self):
            stats["requests_total"] += 1
            try:
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            except ValueError:
                stats["errors_total"] += 1
                log.error("bad request body:\n%s", traceback.format_exc().rstrip())
                return self.reply(400, {"error": "body is not JSON"})
            try:
                m = models[req["model"]]
            except KeyError:
                stats["errors_total"] += 1
                log.error("unknown model %r:\n%s", req.get("model"), traceback.format_exc().rstrip())
                return self.reply(404, {"error": f"model {req.get('model')!r} not deployed"})
            toks = [[sum(w.encode()) * 131 % 32000 for w in t.split()] for t in req["texts"]]
            ids = torch.tensor([i for t in toks for i in t], device=dev)
            offs = torch.tensor([0] + [len(t) for t in toks[:-1]], device=dev).cumsum(0)
            with lock, torch.no_grad():
                e = torch.nn.functional.normalize(m[1](m[0](ids, offs)), dim=1)
            stats["tokens_total"] += ids.numel()
            self.reply(200, {"dim": e.shape[1], "norms": [round(v, 3) for v in e.norm(dim=1).tolist()]})

    srv = ThreadingHTTPServer(("127.0.0.1", PORT), H)
    log.info("serving on 127.0.0.1:%d (device %s)", PORT, dev)
    threading.Thread(target=srv.serve_forever, name="http", daemon=True).start()
    return srv


box = {}
t = threading.Thread(target=lambda: box.update(srv=serve()), name="loader")
t.start()
url = f"http://127.0.0.1:{PORT}"
for attempt in range(1, 31):
    try:
        urllib.request.urlopen(url + "/ready", timeout=2).read()
        log.info("readiness probe ok after %d attempts", attempt)
        break
    except (urllib.error.URLError, ConnectionError) as e:
        if attempt <= 2:
            log.warning("readiness probe attempt %d failed:\n%s", attempt, traceback.format_exc().rstrip())
        else:
            log.warning("readiness probe attempt %d failed: %s", attempt, e)
        time.sleep(0.5)
t.join()


def post(body):
    r = urllib.request.Request(url + "/embed", data=body, headers={"Content-Type": "application/json"})
    try:
        return 200, json.loads(urllib.request.urlopen(r, timeout=10).read())
    except urllib.error.HTTPError as e:
        log.warning("smoke test: HTTP %d %s: %s", e.code, e.reason, e.read().decode())
        return e.code, None


codes = []
for i in range(20):
    model = "mini-enc-v2" if i == 7 else "mini-enc"
    body = b"{texts: [oops" if i == 13 else json.dumps({"model": model, "texts": ["a b c", f"request {i} x y z"]}).encode()
    codes.append(post(body)[0])
print(f"\nsmoke test: {codes.count(200)} x 200, {codes.count(404)} x 404, {codes.count(400)} x 400")
print(urllib.request.urlopen(url + "/metrics", timeout=5).read().decode().rstrip())
box["srv"].shutdown(); box["srv"].server_close()
print("service stopped")
