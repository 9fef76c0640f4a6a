#!/usr/bin/env bash
# The GPU run for the issue-6 follow-up (comm probes): the whole `envbuild doctor --quick` on two GPUs,
# timed as a whole (goal <= 60 s); benchmarks/bench_allreduce.py twice (busbw within 0.95-1.05 of
# nccl-tests, measurement time <= 1/3 of its; two calls show the run-to-run spread); and the edited
# payloads (collectives, churn, weight sync, p2p, cumem IPC) once more on their own.
# Lent 2xH200 (kind nvidia-h200-x2), repo root, $OUT set; carry .whl (megatron-core, torch_memory_saver)
# and .nccl-tests/bin (all_reduce_perf, py-spy):  LIMIT=230 bash docs/gpu-runs/s2-comm.sh
# Writes 5 files under $OUT: doctor-quick-2gpu.json, bench-allreduce-s2.json, bench-allreduce-s2-run2.json,
# comm-probes-s2.json and s2-logs.tar.gz (summary, every step's output, the launcher run dirs).
# Each step runs only while the whole command stays inside LIMIT seconds.
set -u
OUT=${OUT:?set OUT}
LIMIT=${LIMIT:-230}
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PATH=$PWD/.nccl-tests/bin:$PATH  # py-spy for hang stacks
LOGS=/tmp/s2-logs; rm -rf "$LOGS"; mkdir -p "$LOGS/rundirs"

step() {  # step NAME NEED_S TIMEOUT_S command...: output to $LOGS/NAME.log, wall seconds to the summary
  local name=$1 need=$2 limit=$3; shift 3
  local left=$(( LIMIT - (SECONDS - start) ))
  if [ "$left" -lt "$need" ]; then echo "$name: not run, $left s left < $need s needed" | tee -a "$LOGS/summary.txt"; return; fi
  [ "$limit" -gt $(( left - 5 )) ] && limit=$(( left - 5 ))
  mkdir -p "$LOGS/rundirs/$name"
  local t0; t0=$(date +%s%N)
  TMPDIR="$LOGS/rundirs/$name" timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  echo "$name: exit $rc after $(( ms / 1000 )).$(printf %03d $(( ms % 1000 ))) s wall (timeout $limit)" | tee -a "$LOGS/summary.txt"
}

{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; python3 -c "import torch; print(torch.__version__, torch.cuda.nccl.version())"; } \
  > "$LOGS/node.txt" 2>&1
NCCL_LIB=$(python3 -c "import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], 'lib'))")
BENCH=(env LD_LIBRARY_PATH="$NCCL_LIB:${LD_LIBRARY_PATH:-}" python3 benchmarks/bench_allreduce.py
       --nccl-tests .nccl-tests/bin/all_reduce_perf)

step bench-allreduce-run1 40 90 "${BENCH[@]}" --json "$OUT/bench-allreduce-s2.json"
step doctor-quick-2gpu 90 150 python3 -m envbuild doctor --quick --gpus 0,1 --json "$OUT/doctor-quick-2gpu.json"
step bench-allreduce-run2 40 90 "${BENCH[@]}" --json "$OUT/bench-allreduce-s2-run2.json"
step comm-probes 60 120 python3 -m envbuild doctor --quick --check comm.nccl_collectives --check comm.nccl_churn \
  --check weight.sync --check gpu.p2p --check cumem.ipc --gpus 0,1 --json "$OUT/comm-probes-s2.json"

{ echo "## envbuild payload processes left after the runs"; ps -eo pid,stat,etime,args | grep -E "checks/[a-z_]+\.py" | grep -v grep
  echo "## GPU compute apps"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv; } > "$LOGS/leftovers.txt" 2>&1
# where the whole doctor's time went: every result's own duration, longest first
python3 - "$OUT/doctor-quick-2gpu.json" "$OUT/comm-probes-s2.json" > "$LOGS/durations.txt" 2>&1 <<'EOF'
import json, sys
for path in sys.argv[1:]:
    try:
        results = json.load(open(path))["results"]
    except (OSError, ValueError, KeyError) as exc:
        print(f"{path}: {exc}")
        continue
    print(f"## {path}: {len(results)} results, sum of durations {sum(r.get('duration_s') or 0 for r in results):.1f} s")
    for r in sorted(results, key=lambda r: -(r.get("duration_s") or 0))[:14]:
        print(f"{r.get('duration_s') or 0:7.1f} s  {r['status']:5} {r['check_id']} {r.get('subject') or ''}: {r['summary'][:110]}")
EOF
tar -czf "$OUT/s2-logs.tar.gz" -C /tmp s2-logs
echo "== summary (total $(( SECONDS - start )) s of LIMIT $LIMIT)"; cat "$LOGS/summary.txt"
echo "== benchmark"; for r in run1 run2; do echo "-- $r"; cat "$LOGS/bench-allreduce-$r.log"; done
cat "$LOGS/durations.txt" "$LOGS/leftovers.txt"
for f in "$LOGS"/doctor-quick-2gpu.log "$LOGS"/comm-probes.log; do echo "=== $f"; tail -25 "$f"; done
ls -la "$OUT"
