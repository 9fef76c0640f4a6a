#!/usr/bin/env bash
# Session 7 (issue 26): where doctor's time goes on the lent 1xH200, against the goals static <= 2 s (first run
# included), --quick <= 15 s, --full <= 180 s; a rank SIGSTOPped at 20 random moments (stop 0 before its first
# phase) against quick's 30 s cap; and f09 (a second libnccl preloaded) re-run for its C3 roots.
#
#   repo root, $OUT set, carry .whl (torch_memory_saver 0.0.10, megatron-core 0.19.2, py-spy, and envbuild's
#   pure-python deps the machine lacks, as in s6-faults.sh); one call, timeout 560:
#     LIMIT=530 bash docs/gpu-runs/s7-doctor.sh
#   DRY=1 bash docs/gpu-runs/s7-doctor.sh   prints the steps it would run (no GPU, no wheels needed)
#   SKIP="full" ...                          leaves the named steps out (room for all 20 stops)
#
# Steps in order; one is skipped (and says so) when fewer seconds are left than it needs:
#   static-cold   bench_doctor static, the first doctor run on the fresh machine (page cache not dropped: the
#                 machine is bare, so this is as cold as a lent node gets)
#   static-warm   bench_doctor static again
#   quick x2      bench_doctor quick,quick --gpus 0
#   full          bench_doctor full --gpus 0
#   stop-rank     benchmarks/stop_rank.py --stops 20 (PARALLEL at a time) on comm.weight_sync
#   f09           LD_PRELOAD of the system libnccl, --quick
# Comes back as: $OUT/s7-summary.txt, $OUT/bench-static-cold.json, bench-static-warm.json, bench-quick.json,
# bench-full.json, stop-rank.json, f09.json (the report), s7-logs.tar.gz (every log and doctor report).
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
set -u
export OUT=${OUT:?set OUT}
LIMIT=${LIMIT:-530}
STOPS=${STOPS:-20}
PARALLEL=${PARALLEL:-5}
DRY=${DRY:-0}
start=$SECONDS
R=/tmp/s7; rm -rf "$R"; mkdir -p "$R/reports"
SUMMARY=$OUT/s7-summary.txt; : > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $(( LIMIT - (SECONDS - start) )); }
step() {  # step NAME MIN_SECONDS_LEFT COMMAND...: run one step with its log, or skip it
  local name=$1 need=$2; shift 2
  case " ${SKIP:-} " in *" $name "*) say "$name: not run (SKIP)"; return;; esac
  if [ "$(left)" -lt "$need" ]; then say "$name: not run, $(left) s left (needs $need)"; return; fi
  if [ "$DRY" = 1 ]; then say "$name: would run: $*"; return; fi
  local t0=$SECONDS
  timeout $(( $(left) - 5 )) "$@" > "$R/$name.log" 2>&1
  local rc=$?
  say "$name: exit $rc after $(( SECONDS - t0 )) s"
  tail -${TAIL:-15} "$R/$name.log" >> "$SUMMARY"
}
if [ "$DRY" != 1 ]; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .whl/*.whl >/dev/null 2>&1 || { echo "wheel install failed"; exit 1; }
  fi
fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  NVSHMEM_DISABLE_NVLS=1 RAY_USAGE_STATS_ENABLED=0
export PATH=/tmp/site/bin:$PATH   # py-spy for hang stacks
if [ "$DRY" != 1 ]; then
  python3 -c 'import click, rich, pynvml, packaging, jinja2, yaml' 2>/dev/null \
    || { echo "envbuild's dependencies are not importable (carry them in .whl)"; exit 1; }
fi
say "== $(date -u +%FT%TZ) $(git log --oneline -1 2>/dev/null | cut -c1-70)"
{ nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv,noheader; } >> "$SUMMARY" 2>&1
B="python3 benchmarks/bench_doctor.py"
step static-cold 20 $B --modes static --json "$OUT/bench-static-cold.json" --keep "$R/reports"
step static-warm 20 $B --modes static --json "$OUT/bench-static-warm.json"
step quick 80 $B --modes quick,quick --gpus 0 --json "$OUT/bench-quick.json" --keep "$R/reports"
step full 320 $B --modes full --gpus 0 --json "$OUT/bench-full.json" --keep "$R/reports"
# a round of PARALLEL stops takes the 30 s cap plus ~8 s; the anchor run ~25 s
rounds=$(( ($(left) - 70) / 40 )); fit=$(( rounds * PARALLEL )); [ "$fit" -lt "$STOPS" ] && STOPS=$fit
if [ "$STOPS" -gt 0 ]; then
  TAIL=25 step stop-rank 60 python3 benchmarks/stop_rank.py --stops "$STOPS" --parallel "$PARALLEL" \
    --json "$OUT/stop-rank.json" -- --quick --gpus 0 --check comm.weight_sync
else
  say "stop-rank: not run, $(left) s left"
fi
step f09 40 env LD_PRELOAD=/lib/x86_64-linux-gnu/libnccl.so.2 timeout 150 python3 -m envbuild doctor --quick \
  --gpus 0 --json "$OUT/f09.json"
if [ "$DRY" != 1 ] && [ -f "$OUT/f09.json" ]; then
  python3 - "$OUT/f09.json" >> "$SUMMARY" 2>&1 <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
for r in rep.get("results") or []:
    if r["status"] in ("fail", "error"):
        tie = (r.get("evidence") or {}).get("consequence_of")
        print(f"   {'CONSEQUENCE' if tie else 'ROOT'} {r['check_id']} {r['causes']}: {r['summary'][:200]}")
PY
fi
{ echo "## left after everything"; ps -eo pid,stat,etime,args | grep -E "checks/[a-z_]+\.py" | grep -v grep
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv; } >> "$SUMMARY" 2>&1
tar -czf "$OUT/s7-logs.tar.gz" -C /tmp s7 2>/dev/null
say "== total $(( SECONDS - start )) s of LIMIT $LIMIT"
