#!/usr/bin/env bash
# Session 13 (issue 26), second call on the lent GPU:
#   1. static on a cold page cache (drop_caches before each run): the tree before the trace's read-ahead (90def50,
#      carried as .bin/old-90def50.tar) against this one, ROUNDS rounds interleaved, through benchmarks/bench_doctor.py
#      and each with the timeline (docs/gpu-runs/s13_timeline.py); then static warm, 3 runs each side;
#   2. a 1-rank NCCL group outside the doctor (docs/gpu-runs/s13_nccl_init.py), each call timed, with NCCL's own
#      init timings (NCCL_DEBUG=INFO);
#   3. the static stack faults again with this tree (f09s, f10s, f11, f13s, f14s);
#   4. through docs/gpu-runs/s8-doctor.sh: the healthy node (--quick), f01, f07 and f16, after session 12's review
#      mends (the drain's late failure judged by the check itself), then --quick twice more (bench_doctor).
# Repo root, $OUT set, carry .bin and .whl; timeout 590:  LIMIT=575 bash docs/gpu-runs/s13-call-b.sh
set -u
OUT=${OUT:?set OUT}; LIMIT=${LIMIT:-575}; ROUNDS=${ROUNDS:-4}; start=$SECONDS
left() { echo $(( LIMIT - (SECONDS - start) )); }
S=$OUT/s13b-summary.txt; : > "$S"; say() { echo "$*" | tee -a "$S"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >/dev/null 2>&1 || { say "wheel install failed"; exit 1; }
fi
rm -rf /tmp/old && mkdir -p /tmp/old && tar -xf .bin/old-90def50.tar -C /tmp/old || { say "old tree missing"; exit 1; }
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/tmp/site/bin:$PATH
NEW=$PWD; B=benchmarks/bench_doctor.py
R=/tmp/s13b; rm -rf "$R"; mkdir -p "$R/faults" "$R/reports"
say "== $(date -u +%FT%TZ) static cold A/B (new tree vs 90def50), NCCL init split, static faults, quick faults"
nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv,noheader >> "$S" 2>&1
for d in "$NEW" /tmp/old; do (cd "$d" && python3 -m compileall -q envbuild checks benchmarks >/dev/null 2>&1); done
drop() { sync && echo 3 > /proc/sys/vm/drop_caches; }
if drop 2>/dev/null; then
  for i in $(seq 1 "$ROUNDS"); do
    for side in new old; do
      if [ $side = new ]; then dir=$NEW; else dir=/tmp/old; fi
      drop
      (cd "$dir" && PYTHONPATH=$dir:/tmp/site python3 $B --modes static --json "$R/static-cold-$side-$i.json" \
        --keep "$R/reports/cold-$side-$i" > "$R/static-cold-$side-$i.log" 2>&1)
      say "static cold $side round $i: $(grep -m1 'doctor static' "$R/static-cold-$side-$i.log")"
      drop
      (cd "$dir" && PYTHONPATH=$dir:/tmp/site python3 $NEW/docs/gpu-runs/s13_timeline.py doctor --quiet \
        --json "$R/tl-cold-$side-$i.json" 3>"$R/tl-cold-$side-$i.tl" >/dev/null 2>&1)
      say "   timeline: $(cat "$R/tl-cold-$side-$i.tl" | cut -c1-900)"
    done
  done
else
  say "static cold: cannot drop the page cache here: not measured"
fi
for side in new old; do
  if [ $side = new ]; then dir=$NEW; else dir=/tmp/old; fi
  (cd "$dir" && PYTHONPATH=$dir:/tmp/site python3 $B --modes static,static,static --json "$R/static-warm-$side.json" \
    --keep "$R/reports/warm-$side" > "$R/static-warm-$side.log" 2>&1)
  grep 'doctor static' "$R/static-warm-$side.log" | sed "s/^/static warm $side: /" | tee -a "$S"
done
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
    rows["warm-" + side] = [x["wall_s"] for x in json.load(open(os.path.join(r, f"static-warm-{side}.json")))["runs"]] \
        if os.path.exists(os.path.join(r, f"static-warm-{side}.json")) else []
json.dump(rows, open(out, "w"), indent=1)
for side in ("new", "old"):
    v = rows[side]
    if v:
        med = statistics.median(x["wall_s"] for x in v)
        print("static cold %s: walls %s, median %.2f s (goal 2 s: %s); resolve phases %s" % (
            side, [x["wall_s"] for x in v], med, "met" if med <= 2 else "MISSED",
            [(x["probe_s"] or {}).get("phases", {}).get("resolve torch libraries") for x in v]))
    print("static warm %s: %s" % (side, rows["warm-" + side]))
PY
for i in 1 2 3; do
  line=$(VARIANT=default python3 docs/gpu-runs/s13_nccl_init.py 2>/dev/null); say "nccl default $i: $line"
done
for i in 1 2; do
  VARIANT=info NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH,ENV python3 docs/gpu-runs/s13_nccl_init.py \
    > "$R/nccl-info-$i.out" 2> "$R/nccl-info-$i.err"
  say "nccl info $i: $(tail -1 "$R/nccl-info-$i.out")"
done
grep -h -i "timings\|Init COMPLETE\|Using network\|NET/Plugin\|comm 0x" "$R"/nccl-info-1.err | head -12 | tee -a "$S"
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
fi
compat=$(ls -d /usr/local/cuda*/compat 2>/dev/null | head -1)
if [ -n "$compat" ] && ls "$compat"/libcuda.so.1 >/dev/null 2>&1; then
  fault f14s-compat-libcuda-first-static "LD_LIBRARY_PATH=$compat (cuda-compat's libcuda), static" \
    LD_LIBRARY_PATH=$compat${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} -- --gpus 0
fi
python3 docs/gpu-runs/s8_summary.py "$R" "$OUT" > "$OUT/s8-summary-static.txt" 2>&1
grep -E "fault runs:|DIFFERS|NO REPORT" "$OUT/s8-summary-static.txt" | tee -a "$S"
mv "$OUT/s8-faults.json" "$OUT/s8-faults-static.json" 2>/dev/null
SKIP="static-cold static-warm quick full cold-ab f02 f03 f04 f05 f06 f08 f09 f10 f11 f12 f13 f14 f15" \
  LIMIT=$(( $(left) - 60 )) PYTHONPATH=$NEW:/tmp/site bash docs/gpu-runs/s8-doctor.sh > "$R/s8.log" 2>&1
say "quick faults: $(grep -E 'fault runs:' "$OUT/s8-summary.txt")"
grep -E "DIFFERS|NO REPORT|^f|^healthy" "$OUT/s8-summary.txt" | head -12 | tee -a "$S"
if [ "$(left)" -ge 40 ]; then
  PYTHONPATH=$NEW:/tmp/site python3 $B --modes quick,quick --gpus 0 --json "$R/quick.json" --keep "$R/reports/quick" \
    > "$R/quick.log" 2>&1
  grep 'doctor quick' "$R/quick.log" | tee -a "$S"
fi
{ echo "== left after everything (must be empty)"; ps -eo pid,stat,etime,args | grep -E "checks/[a-z_]+\.py" | grep -v grep; } >> "$S"
tar -czf "$OUT/s13b-logs.tar.gz" -C /tmp s13b 2>/dev/null
say "== total $(( SECONDS - start )) s of LIMIT $LIMIT"
