#!/usr/bin/env bash
# The GPU run for the doctor --quick time goal (<= 60 s wall on the lent 2xH200): the whole
# `envbuild doctor --quick --gpus 0,1` twice, timed, then `ps` for leftover payload processes. Session 2 ran
# it at `e41833f` (a warm pool of probe interpreters, since taken out: ranks it handed out were killed) and
# cumem.ipc's five helpers started at once (kept).
# Lent 2xH200 (kind nvidia-h200-x2), repo root, $OUT set; carry .whl (megatron-core, torch_memory_saver)
# and .nccl-tests/bin (py-spy):  bash docs/gpu-runs/s3-quick.sh   (timeout_s 200; LIMIT defaults to 190)
# Writes 4 files under $OUT: doctor-quick-2gpu-s3.json, doctor-quick-2gpu-s3-run2.json, s3-summary.txt and
# s3-logs.tar.gz (each run's output, the launcher run dirs, durations, leftovers).
set -u
OUT=${OUT:?set OUT}
LIMIT=${LIMIT:-190}
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PATH=$PWD/.nccl-tests/bin:$PATH  # py-spy for hang stacks
LOGS=/tmp/s3-logs; rm -rf "$LOGS"; mkdir -p "$LOGS/rundirs"
SUMMARY=$OUT/s3-summary.txt; : > "$SUMMARY"

run_doctor() {  # run_doctor NAME JSON: the whole doctor --quick, its wall seconds to the summary
  local name=$1 json=$2 left=$(( LIMIT - (SECONDS - start) ))
  if [ "$left" -lt 70 ]; then echo "$name: not run, $left s left" | tee -a "$SUMMARY"; return; fi
  local limit=$(( left - 10 )); [ "$limit" -gt 120 ] && limit=120
  mkdir -p "$LOGS/rundirs/$name"
  local t0; t0=$(date +%s%N)
  TMPDIR="$LOGS/rundirs/$name" timeout "$limit" python3 -m envbuild doctor --quick --gpus 0,1 --json "$json" \
    > "$LOGS/$name.log" 2>&1
  local rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  echo "$name: exit $rc after $(( ms / 1000 )).$(printf %03d $(( ms % 1000 ))) s wall (timeout $limit)" | tee -a "$SUMMARY"
}

{ nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader; git log --oneline -1 2>/dev/null; } \
  >> "$SUMMARY" 2>&1
run_doctor quick-run1 "$OUT/doctor-quick-2gpu-s3.json"
run_doctor quick-run2 "$OUT/doctor-quick-2gpu-s3-run2.json"

{ echo "## envbuild payload processes left after the runs (must be none)"
  ps -eo pid,stat,etime,args | grep -E "checks/[a-z_]+\.py" | grep -v grep
  echo "## GPU compute apps"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv; } > "$LOGS/leftovers.txt" 2>&1
# where each run's time went: per check (its results' durations summed), then the result counts
python3 - "$OUT/doctor-quick-2gpu-s3.json" "$OUT/doctor-quick-2gpu-s3-run2.json" > "$LOGS/durations.txt" 2>&1 <<'EOF'
import collections, json, sys
for path in sys.argv[1:]:
    try:
        doc = json.load(open(path))
    except (OSError, ValueError) as exc:
        print(f"{path}: {exc}")
        continue
    per = collections.OrderedDict()
    for r in doc["results"]:
        per[r["check_id"]] = per.get(r["check_id"], 0.0) + (r.get("duration_s") or 0)
    print(f"## {path}: duration_s {doc.get('duration_s')}, exit {doc.get('exit_code')}, {doc.get('summary')}")
    for cid, s in sorted(per.items(), key=lambda kv: -kv[1])[:12]:
        print(f"{s:7.2f} s  {cid}")
    for r in doc["results"]:
        if r["status"] in ("fail", "error", "warn"):
            print(f"  {r['status']:5} {r['check_id']} {r.get('subject') or ''}: {r['summary'][:140]}")
EOF
cat "$LOGS/durations.txt" "$LOGS/leftovers.txt" >> "$SUMMARY"
tar -czf "$OUT/s3-logs.tar.gz" -C /tmp s3-logs
echo "== total $(( SECONDS - start )) s of LIMIT $LIMIT" | tee -a "$SUMMARY"
cat "$SUMMARY"
tail -20 "$LOGS/quick-run1.log"
ls -la "$OUT"
