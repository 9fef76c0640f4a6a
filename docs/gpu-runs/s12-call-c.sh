#!/usr/bin/env bash
# Session 12 (issue 26), second doctor call on the lent GPU:
#   1. static on a cold page cache (`echo 3 > /proc/sys/vm/drop_caches` before each run, as root on the lent VM): the
#      tree before the static probe's --resolve-init (b03af26, carried as .bin/old-b03af26.tar) against this one,
#      ROUNDS rounds interleaved; then static warm, new tree, 3 runs;
#   2. the stack faults again, static (the probe that changed): f09s (LD_PRELOAD of the system libnccl), f10s
#      (CUDA_VISIBLE_DEVICES=5), f11 (CUDA_VISIBLE_DEVICES=), f13s (the toolkit's stub libcuda first), f14s
#      (cuda-compat's libcuda first), the last two when the image has those libraries;
#   3. benchmarks/stop_rank.py: a weight-sync rank SIGSTOPped at STOPS random moments of a quick doctor.
# Repo root, $OUT set, carry .bin and .whl; timeout 590:  LIMIT=575 bash docs/gpu-runs/s12-call-c.sh
# Comes back as: s12c-summary.txt (read this first), static-ab.json, stop-rank.json, s8-summary.txt, s8-faults.json,
# s12c-logs.tar.gz.
set -u
OUT=${OUT:?set OUT}
LIMIT=${LIMIT:-575}
ROUNDS=${ROUNDS:-3}
STOPS=${STOPS:-20}
start=$SECONDS
left() { echo $(( LIMIT - (SECONDS - start) )); }
S=$OUT/s12c-summary.txt; : > "$S"
say() { echo "$*" | tee -a "$S"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >/dev/null 2>&1 || { say "wheel install failed"; exit 1; }
fi
rm -rf /tmp/old && mkdir -p /tmp/old && tar -xf .bin/old-b03af26.tar -C /tmp/old || { say "old tree missing"; exit 1; }
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/tmp/site/bin:$PATH
NEW=$PWD
R=/tmp/s12c; rm -rf "$R"; mkdir -p "$R/faults" "$R/reports"
say "== $(date -u +%FT%TZ) static cold A/B, static faults, stop_rank; new tree vs b03af26"
nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv,noheader >> "$S" 2>&1
drop() { sync && echo 3 > /proc/sys/vm/drop_caches; }
if drop 2>/dev/null; then
  for i in $(seq 1 "$ROUNDS"); do
    for side in new old; do
      drop
      if [ $side = new ]; then dir=$NEW; else dir=/tmp/old; fi
      (cd "$dir" && PYTHONPATH=$dir:/tmp/site python3 benchmarks/bench_doctor.py --modes static \
        --json "$R/static-cold-$side-$i.json" --keep "$R/reports/cold-$side-$i" > "$R/static-cold-$side-$i.log" 2>&1)
      say "static cold $side round $i: $(grep -m1 'doctor static' "$R/static-cold-$side-$i.log")"
    done
  done
else
  say "static cold: cannot drop the page cache here: not measured"
fi
PYTHONPATH=$NEW:/tmp/site python3 benchmarks/bench_doctor.py --modes static,static,static --json "$R/static-warm.json" \
  --keep "$R/reports/warm" > "$R/static-warm.log" 2>&1
grep 'doctor static' "$R/static-warm.log" | sed 's/^/static warm new: /' | tee -a "$S"
python3 - "$R" "$OUT/static-ab.json" <<'PY' | tee -a "$S"
import glob, json, os, statistics, sys
r, out = sys.argv[1], sys.argv[2]
rows = {}
for side in ("new", "old"):
    rows[side] = []
    for f in sorted(glob.glob(os.path.join(r, f"static-cold-{side}-*.json"))):
        run = json.load(open(f))["runs"][0]
        rep = glob.glob(os.path.join(r, "reports", os.path.basename(f)[len("static-"):-5], "*.json"))
        probe = None
        if rep:
            res = {x["check_id"]: x for x in json.load(open(rep[0]))["results"]}
            probe = (res.get("stack.torch") or {}).get("evidence", {}).get("probe_s")
        rows[side].append({"wall_s": run["wall_s"], "summary": run["summary"], "probe_s": probe})
json.dump(rows, open(out, "w"), indent=1)
for side, v in rows.items():
    if v:
        print("static cold %s: walls %s, median %.2f s (goal 2 s: %s); probe %s" % (
            side, [x["wall_s"] for x in v], statistics.median(x["wall_s"] for x in v),
            "met" if statistics.median(x["wall_s"] for x in v) <= 2 else "MISSED", v[0]["probe_s"]))
PY
fault() {  # fault NAME "WHAT" ENV... -- DOCTOR_ARGS...
  local name=$1 what=$2; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0=$SECONDS
  (cd "$NEW" && env PYTHONPATH=$NEW:/tmp/site "${envs[@]}" timeout 120 python3 -m envbuild doctor "$@" \
    --json "$R/faults/$name.json" > "$R/faults/$name.log" 2>&1)
  local rc=$?
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( SECONDS - t0 ))" "$what" "${envs[*]} envbuild doctor $*" >> "$R/faults/runs.tsv"
  say "$name: exit $rc after $(( SECONDS - t0 )) s"
}
fault f09s-second-libnccl-preload-static "LD_PRELOAD of the system libnccl 2.28.3, static" \
  LD_PRELOAD=/lib/x86_64-linux-gnu/libnccl.so.2 -- --gpus 0
fault f10s-cuda-visible-devices-5-static "CUDA_VISIBLE_DEVICES=5 on a 1-GPU node, static" CUDA_VISIBLE_DEVICES=5 -- --gpus 0
fault f11-cuda-visible-devices-empty "CUDA_VISIBLE_DEVICES= (empty, static)" CUDA_VISIBLE_DEVICES= -- --gpus 0
stub=$(ls /usr/local/cuda*/lib64/stubs/libcuda.so /usr/local/cuda*/targets/*/lib/stubs/libcuda.so 2>/dev/null | head -1)
if [ -n "$stub" ]; then
  mkdir -p /tmp/s8-stub && ln -sf "$stub" /tmp/s8-stub/libcuda.so.1
  fault f13s-stub-libcuda-first-static "LD_LIBRARY_PATH=/tmp/s8-stub (the toolkit's stub), static" \
    LD_LIBRARY_PATH=/tmp/s8-stub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} -- --gpus 0
else
  say "f13s: not run, no stub libcuda in this image"
fi
compat=$(ls -d /usr/local/cuda*/compat 2>/dev/null | head -1)
if [ -n "$compat" ] && ls "$compat"/libcuda.so.1 >/dev/null 2>&1; then
  fault f14s-compat-libcuda-first-static "LD_LIBRARY_PATH=$compat (cuda-compat's libcuda), static" \
    LD_LIBRARY_PATH=$compat${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} -- --gpus 0
else
  say "f14s: not run, no cuda-compat libcuda in this image"
fi
python3 docs/gpu-runs/s8_summary.py "$R" "$OUT" > "$OUT/s8-summary.txt" 2>&1
grep -E "fault runs:|DIFFERS|NO REPORT" "$OUT/s8-summary.txt" | tee -a "$S"
if [ "$(left)" -ge 100 ]; then
  PAR=5
  (cd "$NEW" && PYTHONPATH=$NEW:/tmp/site timeout $(( $(left) - 15 )) python3 benchmarks/stop_rank.py --stops "$STOPS" \
    --parallel $PAR --json "$OUT/stop-rank.json" -- --quick --gpus 0 --check comm.weight_sync > "$R/stop-rank.log" 2>&1)
  say "stop_rank: exit $? $(tail -3 "$R/stop-rank.log" | tr '\n' ' ' | cut -c1-400)"
else
  say "stop_rank: not run, $(left) s left"
fi
{ echo "== left after everything (must be empty)"; ps -eo pid,stat,etime,args | grep -E "checks/[a-z_]+\.py" | grep -v grep; } >> "$S"
tar -czf "$OUT/s12c-logs.tar.gz" -C /tmp s12c 2>/dev/null
say "== total $(( SECONDS - start )) s of LIMIT $LIMIT"
