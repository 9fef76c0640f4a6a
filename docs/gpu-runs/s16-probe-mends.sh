#!/usr/bin/env bash
# Session 16, one call: the stack probe after this session's mends (one running()/family_of in checks/_common.py and
# the banner sweep's 10-minute age guard) on the GPU: three
# static runs (the first with the page cache dropped), one --quick, the probe's `import torch` path (its FileStore group,
# used when the native path steps aside) called directly, then what the probe left in /tmp.
# Repo root, $OUT set, carry .whl; timeout 240:
#   bash docs/gpu-runs/s16-probe-mends.sh
set -u
OUT=${OUT:?set OUT}; S=$OUT/summary.txt; : > "$S"; say() { echo "$*" | tee -a "$S"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >/dev/null 2>&1 || { say "wheel install failed"; exit 1; }
fi
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/tmp/site/bin:$PATH PYTHONPATH=$PWD:/tmp/site
say "== $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null)"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader >> "$S" 2>&1
ls -d /tmp/envbuild-stackprobe* 2>/dev/null | sed 's/^/before: /' >> "$S"
sync && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && say "page cache dropped"
for i in 1 2 3; do
  t0=$(date +%s%N)
  python3 -m envbuild doctor --gpus 0 --json "$OUT/static-$i.json" > "$OUT/static-$i.log" 2>&1; rc=$?
  say "static $i: rc $rc, $(( ($(date +%s%N) - t0) / 1000000 )) ms"
done
t0=$(date +%s%N)
python3 -m envbuild doctor --gpus 0 --quick --json "$OUT/quick.json" > "$OUT/quick.log" 2>&1; rc=$?
say "quick: rc $rc, $(( ($(date +%s%N) - t0) / 1000000 )) ms"
TMPDIR=/tmp python3 - > "$OUT/import-torch.json" 2> "$OUT/import-torch.err" <<'PY'
import json, sys, time
sys.path.insert(0, "checks")
import stack_probe as sp
result, errors, state = {}, {}, {}
t0 = time.monotonic()
present = sp.import_torch(result, errors, state, lambda: None)
print(json.dumps({"present": present, "init": result.get("init"), "errors": errors,
                  "seconds": round(time.monotonic() - t0, 2)}))
PY
say "import_torch path: $(cat "$OUT/import-torch.json") $(tail -c 300 "$OUT/import-torch.err")"
python3 - "$OUT" >> "$S" <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f))
    if "results" not in d:
        continue
    rows = {r["check_id"]: r for r in d["results"]}
    fails = [c for c, r in rows.items() if r["status"] == "fail"]
    t = rows.get("stack.torch", {})
    init = (t.get("evidence") or {}).get("init") or {}
    print("%s: fails %s; stack.torch %s: %s; init %s" % (f.rsplit("/", 1)[1], fails, t.get("status"),
          t.get("summary", "")[:160], json.dumps(init)[:400]))
PY
ls -d /tmp/envbuild-stackprobe* 2>/dev/null | sed 's/^/left: /' >> "$S" || true
say "left in /tmp: $(ls -d /tmp/envbuild-stackprobe* 2>/dev/null | wc -l) envbuild-stackprobe* entries"
