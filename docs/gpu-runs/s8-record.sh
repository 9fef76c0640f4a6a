#!/usr/bin/env bash
# Session 8 (issue 22): `envbuild record` on the lent 1xH200, in one call (LIMIT s, default 450).
#   1. a one-node Ray cluster on the GPU (`ray start --head --num-gpus 1`, as python3 -m ray.scripts.scripts: the
#      carried Ray has no console script), NVLS off;
#   2. docs/gpu-runs/s8_record_job.py once per fault (JOBS, default: none preload expandable sigstop ncclhang):
#      a trainer and a rollout actor sharing the GPU, NCCL group rebuilt every step, CUDA IPC weight handoff,
#      torch_memory_saver pause/resume when installed, a gloo sync group; each job records into its own run dir;
#   3. `envbuild explain RUN_DIR --json` and `envbuild report html RUN_DIR` of each; `envbuild record collect`;
#   4. benchmarks/bench_record.py gpu (train steps/s with and without recording and the flight recorder).
# Repo root, $OUT set by the device tool. Carry .bin (ray-slim.tar.xz: docs/gpu-runs/make-ray-slim.sh builds
# it) and, for the TMS part, .whl (torch_memory_saver 0.0.10; without it the rollout says "not installed").
# Writes $OUT/s8-summary.txt, $OUT/s8-explain.json ({fault: explain's JSON}), $OUT/s8-bench-record-gpu.json and
# $OUT/s8-runs.tar.gz (every run dir, driver result, page, log, and the flight-recorder dumps: the fixtures).
set -u
OUT=${OUT:?set OUT}
LIMIT=${LIMIT:-450}
JOBS=${JOBS:-none preload expandable sigstop ncclhang}
start=$SECONDS
left() { echo $(( LIMIT - (SECONDS - start) )); }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >/dev/null 2>&1 || { echo "wheel install failed"; exit 1; }
fi
mkdir -p /tmp/site
[ -d /tmp/site/ray ] || tar -xJf .bin/ray-slim.tar.xz -C /tmp/site || { echo "ray unpack failed"; exit 1; }
# Ray's binaries (gcs_server, raylet, ...): a tar made before make-ray-slim.sh kept the wheel's modes has none
find /tmp/site/ray/core -type f -exec chmod u+x {} +
python3 -c 'import detect_secrets' 2>/dev/null || PYTHONPATH=/tmp/site python3 -c 'import detect_secrets' 2>/dev/null \
  || { echo "detect-secrets missing (the recorder scrubs with it): rerun make-ray-slim.sh, which puts it in .whl"; exit 1; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  NVSHMEM_DISABLE_NVLS=1 RAY_USAGE_STATS_ENABLED=0 TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=8000
export PATH=/tmp/site/bin:$PATH
R=/tmp/s8; rm -rf "$R"; mkdir -p "$R"
SUMMARY=$OUT/s8-summary.txt; : > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
say "== $(date -u +%FT%TZ) $(git log --oneline -1 2>/dev/null | cut -c1-60) jobs: $JOBS"
{ nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv,noheader
  python3 -c 'import torch, ray; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "ray", ray.__version__)'
  ls -la /lib/x86_64-linux-gnu/libnccl.so.2 2>&1
  python3 -c 'import torch_memory_saver' 2>&1 | tail -1 || true; } >> "$SUMMARY" 2>&1
timeout 90 python3 -m ray.scripts.scripts start --head --port=6380 --num-gpus=1 --num-cpus=8 --include-dashboard=false --disable-usage-stats \
  --temp-dir=/tmp/s8ray > "$R/ray-start.log" 2>&1 || { say "ray start failed: $(tail -3 "$R/ray-start.log")"; exit 1; }
declare -A WANT=([none]="-" [preload]="C3" [expandable]="M3" [sigstop]="U6" [ncclhang]="U6")
for f in $JOBS; do
  if [ "$(left)" -lt 75 ]; then say "$f: not run, $(left) s left"; continue; fi
  mkdir -p "$R/$f"; t0=$SECONDS
  timeout 150 python3 docs/gpu-runs/s8_record_job.py 127.0.0.1:6380 "$f" "$R/$f/run" "$R/$f" > "$R/$f/driver.log" 2>&1
  rc=$?
  python3 -m envbuild explain "$R/$f/run" --json "$R/$f/explain.json" > "$R/$f/explain.txt" 2>&1; erc=$?
  python3 -m envbuild report html "$R/$f/run" -o "$R/$f/run.html" >> "$R/$f/explain.txt" 2>&1
  top=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r.get('top') or '-')" "$R/$f/explain.json" 2>/dev/null)
  say "$f: driver exit $rc after $(( SECONDS - t0 )) s; explain exit $erc, top $top (want ${WANT[$f]:-?}): $(tail -1 "$R/$f/driver.log" | cut -c1-300)"
  grep -m3 -E '^ 1\.|\+[0-9.]+ record' "$R/$f/explain.txt" | cut -c1-400 >> "$SUMMARY"
  ls "$R/$f/run"/*/fr/ 2>/dev/null | sed 's/^/  fr dump: /' >> "$SUMMARY"
done
python3 -m envbuild record collect "$R/sigstop/run" -o "$R/sigstop/collected" > "$R/sigstop/collect.txt" 2>&1 || true
timeout 20 python3 -m ray.scripts.scripts stop --force > /dev/null 2>&1
python3 - "$R" "$OUT/s8-explain.json" $JOBS <<'PY'
import json, os, sys
out = {}
for f in sys.argv[3:]:
    p = os.path.join(sys.argv[1], f, "explain.json")
    out[f] = json.load(open(p)) if os.path.exists(p) else None
json.dump(out, open(sys.argv[2], "w"), indent=1)
PY
if [ "$(left)" -ge 70 ]; then
  timeout $(( $(left) - 20 )) python3 benchmarks/bench_record.py gpu --steps 100 --rounds 3 --shapes bucketed,micro \
    --json "$OUT/s8-bench-record-gpu.json" > "$R/bench.log" 2>&1
  say "bench gpu: exit $? $(tail -1 "$R/bench.log" | cut -c1-300)"
else
  say "bench gpu: not run, $(left) s left"
fi
ps -eo pid,stat,etime,args | grep -E 'ray::|s8_record_job|raylet|gcs_server' | grep -v grep > "$R/ps-after.txt"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader >> "$R/ps-after.txt" 2>&1
say "left behind: $(wc -l < "$R/ps-after.txt") line(s) (ps + nvidia-smi compute apps, in the tar)"
tar -czf "$OUT/s8-runs.tar.gz" -C /tmp s8
say "done in $(( SECONDS - start )) s"
