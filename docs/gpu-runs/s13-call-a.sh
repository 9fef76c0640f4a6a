#!/usr/bin/env bash
# Session 13 (issue 26), first call: where a static doctor's first run spends its seconds (diagnosis only).
#   1. static doctor timelines (docs/gpu-runs/s13_timeline.py): ROUNDS runs with the page cache dropped before each,
#      one more cold under `python3 -X importtime`, then 3 warm;
#   2. a 1-rank NCCL group outside the doctor (docs/gpu-runs/s13_nccl_init.py), each call timed, warm, per variant of
#      settings (3 runs each), NCCL's own "Init timings" line from NCCL_DEBUG=INFO, and 2 cold runs.
# Repo root, $OUT set, carry .whl; timeout 300:  LIMIT=280 bash docs/gpu-runs/s13-call-a.sh
set -u
OUT=${OUT:?set OUT}; LIMIT=${LIMIT:-280}; ROUNDS=${ROUNDS:-3}; start=$SECONDS
S=$OUT/s13a-summary.txt; : > "$S"; say() { echo "$*" | tee -a "$S"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >/dev/null 2>&1 || { say "wheel install failed"; exit 1; }
fi
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/tmp/site/bin:$PATH PYTHONPATH=$PWD:/tmp/site
R=/tmp/s13a; rm -rf "$R"; mkdir -p "$R"
say "== $(date -u +%FT%TZ) static timelines and NCCL init split; $(python3 -c 'import torch;print(torch.__version__)' 2>&1)"
nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv,noheader >> "$S" 2>&1
drop() { sync && echo 3 > /proc/sys/vm/drop_caches; }
python3 -m compileall -q envbuild checks >/dev/null 2>&1  # a pip-installed envbuild ships its .pyc; so does this one
tl() {  # tl NAME [python flags...]
  local name=$1; shift
  local t0=$(date +%s.%N)
  python3 "$@" docs/gpu-runs/s13_timeline.py doctor --json "$R/$name.json" --quiet 3>"$R/$name.tl" >"$R/$name.log" 2>"$R/$name.err"
  local rc=$? t1=$(date +%s.%N)
  say "$name: exit $rc wall $(python3 -c "print(round($t1-$t0,3))") s"
  python3 - "$R/$name.tl" "$R/$name.json" <<'PY' | tee -a "$S"
import json, sys
marks = json.load(open(sys.argv[1]))
print("   " + ", ".join("%s %.3f" % (n, t) for n, t in marks))
try:
    rep = json.load(open(sys.argv[2]))
    ev = {r["check_id"]: r for r in rep["results"]}["stack.torch"]["evidence"].get("probe_s")
    print("   probe:", json.dumps(ev))
except Exception as exc:
    print("   no report:", exc)
PY
}
if drop 2>/dev/null; then
  for i in $(seq 1 "$ROUNDS"); do drop; tl "cold-$i"; done
  drop; python3 -X importtime docs/gpu-runs/s13_timeline.py doctor --json "$R/cold-it.json" --quiet 3>"$R/cold-it.tl" \
    >/dev/null 2>"$R/importtime-cold.txt"
  say "importtime cold, slowest cumulative imports (us):"
  grep 'import time:' "$R/importtime-cold.txt" | awk -F'|' '{print $2, $3}' | sort -n -r | head -25 | tee -a "$S"
  cat "$R/cold-it.tl" >> "$S"
else
  say "cannot drop the page cache here"
fi
for i in 1 2 3; do tl "warm-$i"; done
nccl() {  # nccl VARIANT ENV...
  local v=$1; shift
  for i in 1 2 3; do
    local t0=$(date +%s.%N)
    local line; line=$(env VARIANT="$v" "$@" python3 docs/gpu-runs/s13_nccl_init.py 2>"$R/nccl-$v-$i.err")
    local t1=$(date +%s.%N)
    say "nccl $v $i: wall $(python3 -c "print(round($t1-$t0,3))") exit-after-done $(python3 -c "import json;print(round($t1-json.loads('''$line''')['done_at'],3))") $line"
  done
}
nccl default
nccl info NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV
grep -h -i "init timings\|Init COMPLETE\|NET/\|Using network\|plugin" "$R"/nccl-info-*.err | head -20 | tee -a "$S"
nccl ib-off NCCL_IB_DISABLE=1
nccl plugin-none NCCL_NET_PLUGIN=none
nccl eager CUDA_MODULE_LOADING=EAGER
nccl cumem-off NCCL_CUMEM_ENABLE=0
if drop 2>/dev/null; then
  for i in 1 2; do drop; t0=$(date +%s.%N); line=$(VARIANT=cold python3 docs/gpu-runs/s13_nccl_init.py 2>/dev/null)
    t1=$(date +%s.%N); say "nccl cold $i: wall $(python3 -c "print(round($t1-$t0,3))") $line"; done
fi
say "== left: $(ps -eo args | grep -c '[s]tack_probe') probes; total $(( SECONDS - start )) s"
tar -czf "$OUT/s13a-logs.tar.gz" -C /tmp s13a 2>/dev/null
