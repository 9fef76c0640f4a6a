#!/usr/bin/env bash
# Session 13 (issue 26), third call on the lent GPU: the static doctor's first run after the session's three changes
# (the trace's read-ahead process, the copies' versions read beside CUDA's and NCCL's init, the probe started before
# the options are resolved), against 90def50 (carried as .bin/old-90def50.tar):
#   1. static, page cache dropped before each run, ROUNDS rounds interleaved new/old, as benchmarks/bench_doctor.py
#      runs it (no profile), then ROUNDS_P rounds with `--profile slime-v0.3.1-cu130` (how the README runs it);
#   2. static warm, 3 runs a side; 3. the static stack faults with this tree; 4. --quick twice (bench_doctor).
# Repo root, $OUT set, carry .bin/old-90def50.tar and .whl (py-rattler's wheel among them: --profile loads the
# profile's conda specs with it); timeout 590:  LIMIT=575 bash docs/gpu-runs/s13-call-c.sh
# The fourth call was the same script with FAULTS=0 ROUNDS=3 ROUNDS_P=4 QUICK=3. BASE names another baseline
# (.bin/old-$BASE.tar; session 14: BASE=ce7661c).
set -u
OUT=${OUT:?set OUT}; LIMIT=${LIMIT:-575}; ROUNDS=${ROUNDS:-5}; ROUNDS_P=${ROUNDS_P:-3}; FAULTS=${FAULTS:-1}
QUICK=${QUICK:-2}; BASE=${BASE:-90def50}; start=$SECONDS
left() { echo $(( LIMIT - (SECONDS - start) )); }
S=$OUT/s13c-summary.txt; : > "$S"; say() { echo "$*" | tee -a "$S"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >/dev/null 2>&1 || { say "wheel install failed"; exit 1; }
fi
rm -rf /tmp/old && mkdir -p /tmp/old && tar -xf .bin/old-$BASE.tar -C /tmp/old || { say "old tree missing"; exit 1; }
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/tmp/site/bin:$PATH
NEW=$PWD; B=benchmarks/bench_doctor.py; PROFILE=slime-v0.3.1-cu130
R=/tmp/s13c; rm -rf "$R"; mkdir -p "$R/faults" "$R/reports"
say "== $(date -u +%FT%TZ) static cold A/B (new tree vs $BASE) with and without --profile, static faults, quick"
nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv,noheader >> "$S" 2>&1
for d in "$NEW" /tmp/old; do (cd "$d" && python3 -m compileall -q envbuild checks benchmarks >/dev/null 2>&1); done
drop() { sync && echo 3 > /proc/sys/vm/drop_caches; }
ab() {  # ab SET ROUNDS [doctor args...]
  local set=$1 n=$2; shift 2
  for i in $(seq 1 "$n"); do
    for side in new old; do
      if [ $side = new ]; then dir=$NEW; else dir=/tmp/old; fi
      drop
      (cd "$dir" && PYTHONPATH=$dir:/tmp/site python3 $B --modes static --json "$R/$set-$side-$i.json" \
        --keep "$R/reports/$set-$side-$i" -- "$@" > "$R/$set-$side-$i.log" 2>&1)
      say "static $set $side round $i: $(grep -m1 'doctor static' "$R/$set-$side-$i.log")"
    done
  done
}
if drop 2>/dev/null; then
  ab cold "$ROUNDS"
  ab cold-profile "$ROUNDS_P" --profile "$PROFILE"
else
  say "static cold: cannot drop the page cache here: not measured"
fi
for side in new old; do
  if [ $side = new ]; then dir=$NEW; else dir=/tmp/old; fi
  (cd "$dir" && PYTHONPATH=$dir:/tmp/site python3 $B --modes static,static,static --json "$R/warm-$side-1.json" \
    --keep "$R/reports/warm-$side-1" > "$R/warm-$side.log" 2>&1)
done
python3 - "$R" "$OUT/static-ab-c.json" <<'PY' | tee -a "$S"
import glob, json, os, re, statistics, sys
r, out = sys.argv[1], sys.argv[2]
rows = {}
for f in sorted(glob.glob(os.path.join(r, "*-*-[0-9].json"))):
    m = re.match(r"(.+)-(new|old)-(\d+)\.json$", os.path.basename(f))
    for run in json.load(open(f))["runs"]:
        rep = os.path.join(r, "reports", os.path.basename(f)[:-5], run["report"])
        probe = beside = None
        if os.path.exists(rep):
            res = {x["check_id"]: x for x in json.load(open(rep))["results"]}
            evidence = (res.get("stack.torch") or {}).get("evidence", {})
            probe = evidence.get("probe_s")
            beside = "beside_trace_s" in (evidence.get("init") or {})  # the init beside the trace stood (session 14)
        rows.setdefault("%s %s" % (m.group(1), m.group(2)), []).append(
            {"wall_s": run["wall_s"], "summary": run["summary"], "exit": run["exit_code"], "probe_s": probe,
             "init_beside": beside})
json.dump(rows, open(out, "w"), indent=1)
for key in sorted(rows):
    v = rows[key]
    walls = [x["wall_s"] for x in v]
    med = statistics.median(walls)
    print("static %s: walls %s, median %.2f s, max %.2f s (goal 2 s: median %s, every run %s); resolve phases %s;"
          " init beside the trace %s" % (
        key, walls, med, max(walls), "met" if med <= 2 else "MISSED", "met" if max(walls) <= 2 else "MISSED",
        [(x["probe_s"] or {}).get("phases", {}).get("resolve torch libraries") for x in v],
        [x["init_beside"] for x in v]))
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
if [ "$FAULTS" = 1 ]; then
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
fi
if [ "$QUICK" -gt 0 ] && [ "$(left)" -ge 60 ]; then
  PYTHONPATH=$NEW:/tmp/site python3 $B --modes $(printf 'quick,%.0s' $(seq 1 "$QUICK")) --gpus 0 --json "$R/quick.json" --keep "$R/reports/quick" \
    > "$R/quick.log" 2>&1
  grep 'doctor quick' "$R/quick.log" | tee -a "$S"
fi
{ echo "== left after everything (must be empty)"; ps -eo pid,stat,etime,args | grep -E "checks/[a-z_]+\.py" | grep -v grep; } >> "$S"
tar -czf "$OUT/s13c-logs.tar.gz" -C /tmp s13c 2>/dev/null
say "== total $(( SECONDS - start )) s of LIMIT $LIMIT"
