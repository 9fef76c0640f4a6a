#!/usr/bin/env bash
# Session 12 (issue 26) on the lent GPU, one call: the doctor's speed goals after a probe's teardown started to run
# behind the next check (envbuild/doctor/launcher.py Drain) and gpu.cumem_ipc's two torch.multiprocessing pairs
# to run side by side, against the tree before them (b03af26, carried as .bin/old-b03af26.tar: `git archive b03af26
# -o .bin/old-b03af26.tar`) on the same card in the same call:
#   1. static cold (the first doctor run on the fresh machine) and warm, new tree;
#   2. --quick --gpus 0, new and old interleaved, ROUNDS rounds (default 3);
#   3. faults through docs/gpu-runs/s8-doctor.sh: the healthy node, f01, f07, f15, f16 (new: a weight-sync rank
#      SIGSTOPped in its teardown, after its result), f05, f06;
#   4. --full --gpus 0 with the time left (needs 170 s).
# Repo root, $OUT set, carry .bin and .whl; timeout 590:  LIMIT=580 bash docs/gpu-runs/s12-call-b.sh
# Comes back as (at most 8 files a call): quick-ab.json, bench-full.json (when run), s12-logs.tar.gz (the static
# benches, every quick report and log),
# s8-summary.txt, s8-faults.json, s8-logs.tar.gz, s12-summary.txt (read this first).
set -u
OUT=${OUT:?set OUT}
LIMIT=${LIMIT:-580}
ROUNDS=${ROUNDS:-3}
start=$SECONDS
left() { echo $(( LIMIT - (SECONDS - start) )); }
S=$OUT/s12-summary.txt; : > "$S"
say() { echo "$*" | tee -a "$S"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >/dev/null 2>&1 || { say "wheel install failed"; exit 1; }
fi
rm -rf /tmp/old && mkdir -p /tmp/old && tar -xf .bin/old-b03af26.tar -C /tmp/old || { say "old tree missing"; exit 1; }
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/tmp/site/bin:$PATH
NEW=$PWD
say "== $(date -u +%FT%TZ) new $(git log --oneline -1 2>/dev/null | cut -c1-60) vs old b03af26"
nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv,noheader >> "$S" 2>&1
R=/tmp/s12; rm -rf "$R"; mkdir -p "$R"
B=benchmarks/bench_doctor.py
PYTHONPATH=$NEW:/tmp/site python3 $B --modes static --json "$R/bench-static-cold.json" > "$R/static-cold.log" 2>&1
say "static cold: $(grep -m1 'doctor static' "$R/static-cold.log")"
PYTHONPATH=$NEW:/tmp/site python3 $B --modes static,static,static --json "$R/bench-static-warm.json" > "$R/static-warm.log" 2>&1
grep 'doctor static' "$R/static-warm.log" | sed 's/^/static warm: /' | tee -a "$S"
for i in $(seq 1 "$ROUNDS"); do
  PYTHONPATH=$NEW:/tmp/site python3 $B --modes quick --gpus 0 --json "$R/quick-new-$i.json" --keep "$R/reports/new-$i" \
    > "$R/quick-new-$i.log" 2>&1
  say "quick new round $i: $(grep -m1 'doctor quick' "$R/quick-new-$i.log")"
  (cd /tmp/old && PYTHONPATH=/tmp/old:/tmp/site python3 $B --modes quick --gpus 0 --json "$R/quick-old-$i.json" \
    --keep "$R/reports/old-$i" > "$R/quick-old-$i.log" 2>&1)
  say "quick old round $i: $(grep -m1 'doctor quick' "$R/quick-old-$i.log")"
done
python3 - "$R" "$OUT/quick-ab.json" "$ROUNDS" <<'PY' | tee -a "$S"
import json, os, statistics, sys
r, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
runs = {side: [json.load(open(os.path.join(r, f"quick-{side}-{i}.json")))["runs"][0]
               for i in range(1, n + 1) if os.path.exists(os.path.join(r, f"quick-{side}-{i}.json"))]
        for side in ("new", "old")}
json.dump(runs, open(out, "w"), indent=1)
med = {s: statistics.median(x["wall_s"] for x in v) if v else None for s, v in runs.items()}
print("quick medians: new %s s, old %s s; new/old %.3f; goal 15 s -> new %s" % (
    med["new"], med["old"], med["new"] / med["old"] if med["new"] and med["old"] else float("nan"),
    "met" if med["new"] and med["new"] <= 15 else "MISSED"))
print("quick fails: new %s, old %s" % ([x["summary"]["fail"] for x in runs["new"]], [x["summary"]["fail"] for x in runs["old"]]))
PY
SKIP="static-cold static-warm quick full cold-ab f02 f03 f04 f08 f09 f10 f11 f12 f13 f14" LIMIT=$(( $(left) - 175 )) \
  PYTHONPATH=$NEW:/tmp/site bash docs/gpu-runs/s8-doctor.sh > "$R/s8.log" 2>&1
say "faults: $(grep -E 'fault runs:' "$OUT/s8-summary.txt")"
if [ "$(left)" -ge 170 ]; then
  PYTHONPATH=$NEW:/tmp/site timeout $(( $(left) - 5 )) python3 $B --modes full --gpus 0 --json "$OUT/bench-full.json" \
    > "$R/full.log" 2>&1
  say "full: $(grep -m1 'doctor full' "$R/full.log")"
else
  say "full: not run, $(left) s left"
fi
{ echo "== left after everything (must be empty)"; ps -eo pid,stat,etime,args | grep -E "checks/[a-z_]+\.py" | grep -v grep; } >> "$S"
tar -czf "$OUT/s12-logs.tar.gz" -C /tmp s12 2>/dev/null
say "== total $(( SECONDS - start )) s of LIMIT $LIMIT"
