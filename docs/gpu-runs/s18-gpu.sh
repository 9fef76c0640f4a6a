#!/usr/bin/env bash
# Session 18 on the lent GPU, three calls (repo root, $OUT set, no wheels needed: the image has what the doctor imports):
#   bash docs/gpu-runs/s18-gpu.sh probe     # timeout 420
#   bash docs/gpu-runs/s18-gpu.sh stops     # timeout 560
# probe: the stack probe's mends of sessions 16 and 18 (docs/gpu-runs/s16-probe-mends.sh: static x3 with the page
#   cache dropped first, --quick, the probe's `import torch` path whose FileStore file now lives in the NCCL banner's
#   directory, what /tmp keeps), then a whole static run on this node with NVML made to hang (a libnvidia-ml.so.1
#   first on the loader path whose init never returns; the deadline cut to 5 s), then 15 static doctors stopped by
#   SIGINT/SIGTERM/SIGHUP 0.05-1.5 s in (session 17's import-lock hang came from a stop in the first 0.25 s).
# stops: 6 --quick doctors stopped by INT/TERM/HUP/KILL 2-15 s in, the GPU probes running.
# fold (timeout 400): after node.driver_version's D3 fold, the hung-NVML static run again (its terminal report's verdict
#   and root-cause lines kept), then a plain static and a plain --quick run of the final tree.
set -u
OUT=${OUT:?set OUT}; S=$OUT/summary.txt; : > "$S"; say() { echo "$*" | tee -a "$S"; }
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD
say "== $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null) part ${1:-probe}"
nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv,noheader >> "$S" 2>&1

hang_nvml() {  # $1: output name; a libnvidia-ml.so.1 whose init never returns, first on the loader path
  local lib; lib=$(mktemp -d)
  cc -shared -fPIC -o "$lib/libnvidia-ml.so.1" -x c - <<'C'
#include <unistd.h>
static int hang(void) { for (;;) pause(); return 0; }
int nvmlInit(void) { return hang(); }
int nvmlInit_v2(void) { return hang(); }
int nvmlInitWithFlags(unsigned int flags) { (void)flags; return hang(); }
int nvmlShutdown(void) { return 0; }
C
  local t0; t0=$(date +%s%N)
  LD_LIBRARY_PATH=$lib timeout 150 python3 -c "import sys, envbuild.facts.nvml as nvml; nvml.NVML_ANSWER_S = 5; \
from envbuild.cli import main; sys.argv[0] = 'envbuild'; main()" doctor --gpus 0 --json "$OUT/$1.json" \
    > "$OUT/$1.log" 2>&1; local rc=$?
  say "-- NVML made to hang (deadline 5 s): rc $rc, $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  python3 - "$OUT/$1.json" >> "$S" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    print("  %-28s %-5s %s" % (r["check_id"], r["status"], r["summary"][:110]))
PY
}

if [ "${1:-probe}" = fold ]; then
  hang_nvml nvml-hung-fold
  grep -E "^(FAIL|OK|root cause)" "$OUT/nvml-hung-fold.log" | sed 's/^/  /' >> "$S"
  for mode in static quick; do
    t0=$(date +%s%N)
    python3 -m envbuild doctor --gpus 0 $([ $mode = quick ] && echo --quick) --json "$OUT/$mode-final.json" \
      > "$OUT/$mode-final.log" 2>&1; rc=$?
    say "$mode: rc $rc, $(( ($(date +%s%N) - t0) / 1000000 )) ms; $(grep -E '^(FAIL|OK)' "$OUT/$mode-final.log")"
  done
elif [ "${1:-probe}" = probe ]; then
  mkdir -p "$OUT/s16"
  OUT=$OUT/s16 timeout 240 bash docs/gpu-runs/s16-probe-mends.sh > /dev/null 2>&1
  say "-- s16-probe-mends.sh (rc $?):"; cat "$OUT/s16/summary.txt" >> "$S"

  hang_nvml nvml-hung
  ps -eo pid,args | grep -E "stack_probe|envbuild" | grep -v grep | sed 's/^/  left: /' >> "$S"

  say "-- 15 static doctors stopped 0.05-1.5 s in"
  timeout 300 python3 benchmarks/stop_doctor.py --stops 15 --signals INT,TERM,HUP --after 0.05,1.5 --grace 5 \
    --json "$OUT/stop-static.json" -- --gpus 0 >> "$S" 2>&1
  say "stop_doctor rc $?"
else
  say "-- 6 quick doctors stopped 2-15 s in"
  timeout 540 python3 benchmarks/stop_doctor.py --stops 6 --signals INT,TERM,HUP,KILL --after 2,15 --grace 10 \
    --json "$OUT/stop-quick.json" -- --quick --gpus 0 >> "$S" 2>&1
  say "stop_doctor rc $?"
fi
ls -d /tmp/envbuild-stackprobe* 2>/dev/null | sed 's/^/left in \/tmp: /' >> "$S"
say "== end $(date -u +%FT%TZ)"
