# A training run that reports metrics to an experiment tracker over HTTP (TRACKER_URL). The tracker does not answer
# (connection refused): the client logs the error with its traceback, retries with back-off, then goes offline and
# keeps the metrics in a local file; training is not affected. At exit it tries to sync once more, fails, and
# prints the run summary, as hosted trackers' clients do. Healthy. Knobs: TRACKER_URL, STEPS, RETRIES.
import http.client
import json
import logging
import os
import time
import urllib.parse

import torch

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
log = logging.getLogger("tracker")
URL = urllib.parse.urlparse(os.environ.get("TRACKER_URL", "http://127.0.0.1:39517"))
RUN = time.strftime("run-%Y%m%d_%H%M%S")


class Tracker:
    def __init__(self):
        self.offline, self.buf = False, []
        self.path = f"offline-{RUN}.jsonl"
        for attempt in range(1, int(os.environ.get("RETRIES", "3")) + 1):
            try:
                self._post("/api/v1/runs", {"name": RUN, "project": "lm-sweep"})
                log.info("run %s created at %s", RUN, URL.netloc)
                return
            except OSError as e:
                if attempt == 1:
                    log.exception("could not reach %s://%s", URL.scheme, URL.netloc)
                else:
                    log.error("attempt %d failed: %s: %s", attempt, type(e).__name__, e)
                time.sleep(0.5 * 2 ** (attempt - 1))
        self.offline = True
        log.warning("network error, switching to offline mode; metrics are written to %s "
                    "(sync later with `tracker sync %s`)", self.path, self.path)

    def _post(self, path, body):
        conn = http.client.HTTPConnection(URL.hostname, URL.port, timeout=3)
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status >= 300:
                raise OSError(f"HTTP {resp.status} {resp.reason}")
        finally:
            conn.close()

    def log(self, **metrics):
        self.buf.append(metrics)
        if self.offline:
            with open(self.path, "a") as f:
                f.write(json.dumps(metrics) + "\n")
        else:
            self._post(f"/api/v1/runs/{RUN}/history", metrics)

    def finish(self):
        if self.offline:
            try:
                self._post(f"/api/v1/runs/{RUN}/sync", {"rows": len(self.buf)})
            except OSError as e:
                log.warning("final sync failed (%s: %s); run kept offline", type(e).__name__, e)
        bars = " ▁▂▃▄▅▆▇█"
        print("tracker: Run history:")
        for key in ("loss", "lr", "grad_norm"):
            vals = [m[key] for m in self.buf]
            lo, hi = min(vals), max(vals)
            spark = "".join(bars[1 + int(7 * (v - lo) / (hi - lo or 1))] for v in vals[:: max(1, len(vals) // 20)])
            print(f"tracker: {key:>10} {spark}")
        print("tracker: Run summary:")
        for key, val in self.buf[-1].items():
            print(f"tracker: {key:>10} {val}")
        print(f"tracker: offline run {RUN} saved to {self.path}" if self.offline else f"tracker: run {RUN} synced")


tracker = Tracker()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.SiLU(), torch.nn.Linear(2048, 512)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
steps = int(os.environ.get("STEPS", "300"))
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=steps)
w = torch.randn(512, 512, device="cuda") / 512 ** 0.5
for step in range(1, steps + 1):
    x = torch.randn(256, 512, device="cuda")
    loss = (model(x) - x @ w).pow(2).mean()
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    if step % 10 == 0:
        tracker.log(step=step, loss=round(loss.item(), 5), lr=round(sched.get_last_lr()[0], 7), grad_norm=round(gn.item(), 4))
tracker.finish()
