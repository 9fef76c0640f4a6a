#!/usr/bin/env bash
# Session 13 (issue 26), last call: the final tree once more on a fresh machine.
#   1. docs/gpu-runs/s13-call-c.sh without faults or --quick (static cold A/B against 90def50, with and without
#      --profile, and warm);
#   2. benchmarks/stop_rank.py: a weight-sync rank SIGSTOPped at STOPS random moments of a quick doctor (the probe
#      is now started before the options are resolved);
#   3. --full once (goal 180 s).
# Repo root, $OUT set, carry .bin/old-90def50.tar and .whl; timeout 590:  LIMIT=575 bash docs/gpu-runs/s13-call-f.sh
set -u
OUT=${OUT:?set OUT}; LIMIT=${LIMIT:-575}; STOPS=${STOPS:-20}; start=$SECONDS
left() { echo $(( LIMIT - (SECONDS - start) )); }
FAULTS=0 QUICK=0 ROUNDS=${ROUNDS:-4} ROUNDS_P=${ROUNDS_P:-4} LIMIT=200 bash docs/gpu-runs/s13-call-c.sh
S=$OUT/s13c-summary.txt; say() { echo "$*" | tee -a "$S"; }
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/tmp/site/bin:$PATH PYTHONPATH=$PWD:/tmp/site
if [ "$(left)" -ge 200 ]; then
  timeout $(( $(left) - 170 )) python3 benchmarks/stop_rank.py --stops "$STOPS" --parallel 5 --json "$OUT/stop-rank.json" \
    -- --quick --gpus 0 --check comm.weight_sync > /tmp/s13c/stop-rank.log 2>&1
  say "stop_rank: exit $? $(tail -3 /tmp/s13c/stop-rank.log | tr '\n' ' ' | cut -c1-400)"
fi
if [ "$(left)" -ge 160 ]; then
  timeout $(( $(left) - 5 )) python3 benchmarks/bench_doctor.py --modes full --gpus 0 --json "$OUT/bench-full.json" \
    > /tmp/s13c/full.log 2>&1
  say "full: $(grep -m1 'doctor full' /tmp/s13c/full.log)"
else
  say "full: not run, $(left) s left"
fi
{ echo "== left after everything (must be empty)"; ps -eo pid,stat,etime,args | grep -E "checks/[a-z_]+\.py" | grep -v grep; } >> "$S"
tar -czf "$OUT/s13c-logs.tar.gz" -C /tmp s13c 2>/dev/null
say "== total $(( SECONDS - start )) s of LIMIT $LIMIT"
