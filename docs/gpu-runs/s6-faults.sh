#!/usr/bin/env bash
# Session 6 (issue 26): a healthy `doctor --quick` and at least 12 injected faults on the lent 1xH200
# (kind nvidia-h200), each a whole doctor run of this checkout (`python3 -m envbuild doctor ...`), then, with the
# time left, benchmarks/stop_rank.py (a rank SIGSTOPped at 20 random moments of comm.weight_sync).
#
#   repo root, $OUT set, carry .whl (what s4-gpu.sh carried: torch_memory_saver, py-spy, envbuild's pure-python
#   deps the machine lacks); one call, timeout 480:
#     LIMIT=450 bash docs/gpu-runs/s6-faults.sh
#   (STOPS=0 skips the benchmark; STOPS=20 PARALLEL=5 are the defaults: 4 rounds of 5 stops, ~40 s each)
#
# Each run: name, the fault, the command; its report JSON, log and exit code. Comes back as three files:
#   $OUT/s6-summary.txt        one block per run: exit, wall, counts, the root(s) (fails not folded) and each
#                              consequence ("consequence of ...") with the causes it was blamed on before
#   $OUT/s6-faults.json        {run name: {fault, command, exit_code, wall_s, report}} (every report whole)
#   $OUT/s6-faults.tar.gz      every JSON, log and the stop_rank output
# NVLink multicast stays off in every run (NCCL_NVLS_ENABLE=0, and the launcher pins it off for every rank).
set -u
export OUT=${OUT:?set OUT}
LIMIT=${LIMIT:-450}
STOPS=${STOPS:-20}
PARALLEL=${PARALLEL:-5}
start=$SECONDS
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >/dev/null 2>&1 || { echo "wheel install failed"; exit 1; }
fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  NVSHMEM_DISABLE_NVLS=1 RAY_USAGE_STATS_ENABLED=0
export PATH=/tmp/site/bin:$PATH   # py-spy for hang stacks
python3 -c 'import click, rich, pynvml, packaging, jinja2, yaml' 2>/dev/null \
  || { echo "envbuild's dependencies are not importable (carry them in .whl)"; exit 1; }
R=/tmp/s6; rm -rf "$R"; mkdir -p "$R"
SUMMARY=$OUT/s6-summary.txt; : > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $(( LIMIT - (SECONDS - start) )); }
: > "$R/runs.tsv"

run() {  # run NAME MIN_SECONDS_LEFT "FAULT" ENV_ASSIGNMENTS... -- DOCTOR_ARGS...: one doctor run
  local name=$1 need=$2 fault=$3; shift 3
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  if [ "$(left)" -lt "$need" ]; then say "$name: not run, $(left) s left"; return; fi
  local t0=$SECONDS
  env "${envs[@]}" timeout 150 python3 -m envbuild doctor "$@" --json "$R/$name.json" > "$R/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( SECONDS - t0 ))" "$fault" "${envs[*]} envbuild doctor $*" \
    >> "$R/runs.tsv"
  say "$name: exit $rc after $(( SECONDS - t0 )) s"
}

say "== $(date -u +%FT%TZ) $(git log --oneline -1 2>/dev/null | cut -c1-70)"
{ nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv,noheader
  ls /sys/class/net /sys/class/infiniband 2>&1 | tr '\n' ' '; echo
  grep -i "locked" /proc/self/limits; } >> "$SUMMARY" 2>&1

Q="--quick --gpus 0"
run healthy-quick 40 "none (the node as lent)" X=1 -- $Q
# 1. the interface fault issue 26 measured: NCCL's bootstrap finds no interface
run f01-nccl-ifname-nonexistent 40 "NCCL_SOCKET_IFNAME=nonexistent0" NCCL_SOCKET_IFNAME=nonexistent0 -- $Q
# 2. Gloo's interface (exact names)
run f02-gloo-ifname-nonexistent 10 "GLOO_SOCKET_IFNAME=nonexistent0" GLOO_SOCKET_IFNAME=nonexistent0 -- --gpus 0
# 3. NCCL's `=` exact rule: the first interface's name without its digits is a prefix, not a name
nic=$(ls /sys/class/net | grep -v '^lo$' | head -1); exact="=${nic%%[0-9]*}"
run f03-nccl-ifname-exact-prefix 10 "NCCL_SOCKET_IFNAME=$exact (exact match of a prefix)" \
  NCCL_SOCKET_IFNAME="$exact" -- --gpus 0
# 4. an HCA on a node without RDMA devices (a warning: NCCL falls back to sockets)
run f04-ib-hca-absent 10 "NCCL_IB_HCA=mlx5_9" NCCL_IB_HCA=mlx5_9 -- --gpus 0
# 5. a weight-sync rank SIGSTOPped before its first phase (issue 26: ran 117 s, until the run deadline)
run f05-sigstop-weight-sync-start 45 "a comm.weight_sync rank SIGSTOPped before its first phase" \
  ENVBUILD_TEST_SIGSTOP_AT='<start>' -- $Q --check comm.weight_sync
# 6. a gpu.compute rank SIGSTOPped 1.5 s after it started, wherever it is then
run f06-sigstop-compute-timer 45 "a gpu.compute rank SIGSTOPped 1.5 s after its start" \
  ENVBUILD_TEST_SIGSTOP_AFTER_S=1.5 -- $Q --check gpu.compute
# 7. an offload rank crashing (exit 3) in its 2nd pause
run f07-crash-offload-pause 30 "a comm.offload_cycle rank exits 3 in phase 'pause 1'" \
  ENVBUILD_TEST_CRASH_AT='pause 1' -- $Q --check comm.offload_cycle
# 8. memlock 64 KiB on a node without RDMA devices (issue 26: failed, single-node NCCL works with it)
if [ "$(left)" -ge 40 ]; then
  t0=$SECONDS
  bash -c "ulimit -l 64 && exec timeout 150 python3 -m envbuild doctor $Q --json $R/f08-ulimit-memlock-64k.json" \
    > "$R/f08-ulimit-memlock-64k.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\t%s\t%s\n' f08-ulimit-memlock-64k "$rc" "$(( SECONDS - t0 ))" "ulimit -l 64" \
    "ulimit -l 64; envbuild doctor $Q" >> "$R/runs.tsv"
  say "f08-ulimit-memlock-64k: exit $rc after $(( SECONDS - t0 )) s"
fi
# 9. the system libnccl preloaded in front of torch's (two copies mapped, C3)
run f09-second-libnccl-preload 40 "LD_PRELOAD of the system libnccl 2.28.3" \
  LD_PRELOAD=/lib/x86_64-linux-gnu/libnccl.so.2 -- $Q
# 10. CUDA_VISIBLE_DEVICES naming a GPU this node lacks
run f10-cuda-visible-devices-5 40 "CUDA_VISIBLE_DEVICES=5 on a 1-GPU node" CUDA_VISIBLE_DEVICES=5 -- $Q
# 11. CUDA_VISIBLE_DEVICES hiding every GPU
run f11-cuda-visible-devices-empty 10 "CUDA_VISIBLE_DEVICES= (empty)" CUDA_VISIBLE_DEVICES= -- --gpus 0
# 12. expandable segments + pidfd_getfd blocked (M3/O3), as in sessions 4 and 5
run f12-m3-pidfd-blocked 30 "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True + pidfd_getfd blocked (seccomp)" \
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ENVBUILD_FAULT_IPC_BLOCK_PTRACE=seccomp -- $Q --check gpu.cumem_ipc
# 13. the toolkit's stub libcuda first on the library path (C7), when this image has the stub
stub=$(ls /usr/local/cuda*/lib64/stubs/libcuda.so /usr/local/cuda*/targets/*/lib/stubs/libcuda.so 2>/dev/null | head -1)
if [ -n "$stub" ]; then
  mkdir -p /tmp/s6-stub && ln -sf "$stub" /tmp/s6-stub/libcuda.so.1
  run f13-stub-libcuda-first 40 "LD_LIBRARY_PATH=/tmp/s6-stub (libcuda.so.1 -> $stub)" \
    LD_LIBRARY_PATH=/tmp/s6-stub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} -- $Q
else
  say "f13-stub-libcuda-first: not run, no stub libcuda in this image"
fi
# 14. a forward-compat libcuda first on the library path (C8), when this image has cuda-compat
compat=$(ls -d /usr/local/cuda*/compat 2>/dev/null | head -1)
if [ -n "$compat" ] && ls "$compat"/libcuda.so.1 >/dev/null 2>&1; then
  run f14-compat-libcuda-first 40 "LD_LIBRARY_PATH=$compat (cuda-compat's libcuda)" \
    LD_LIBRARY_PATH=$compat${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} -- $Q
else
  say "f14-compat-libcuda-first: not run, no cuda-compat libcuda in this image"
fi

python3 - "$R" >> "$SUMMARY" 2>&1 <<'EOF'
import json, os, sys
R = sys.argv[1]
combined = {}
for line in open(os.path.join(R, "runs.tsv")):
    name, rc, wall, fault, cmd = line.rstrip("\n").split("\t")
    try:
        report = json.load(open(os.path.join(R, name + ".json")))
    except (OSError, ValueError) as exc:
        report = {"error": f"no report: {exc}"}
    combined[name] = {"fault": fault, "command": cmd, "exit_code": int(rc), "wall_s": int(wall), "report": report}
    results = report.get("results") or []
    counts = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print(f"## {name}: {fault}\n   exit {rc}, {wall} s wall, doctor {report.get('duration_s')} s, {counts}")
    for r in results:
        if r["status"] not in ("fail", "error", "warn"):
            continue
        ev = r.get("evidence") or {}
        tie = ev.get("consequence_of")
        mark = "   CONSEQUENCE" if tie else ("   ROOT" if r["status"] in ("fail", "error") else "   warn")
        sub = f" [{r['subject']}]" if r.get("subject") else ""
        extra = f" (blamed before: {tie['blamed_before']}, tied by {tie['signature']})" if tie else ""
        extra += f" -> consequences {ev['consequences']}" if ev.get("consequences") else ""
        print(f"{mark} {r['status'].upper()} {r['check_id']}{sub} {r['causes']}: {r['summary'][:260]}{extra}")
json.dump(combined, open(os.environ.get("OUT") + "/s6-faults.json", "w"), indent=1)
EOF

# as many stops as the time left allows: a round of PARALLEL stops takes the 30 s cap plus ~8 s
rounds=$(( ($(left) - 40) / 40 )); fit=$(( rounds * PARALLEL )); [ "$fit" -lt "$STOPS" ] && STOPS=$fit
if [ "$STOPS" -gt 0 ]; then
  t0=$SECONDS
  timeout $(( $(left) - 5 )) python3 benchmarks/stop_rank.py --stops "$STOPS" --parallel "$PARALLEL" \
    --json "$R/stop-rank-weight-sync.json" -- --quick --gpus 0 --check comm.weight_sync > "$R/stop-rank.log" 2>&1
  say "stop_rank: exit $? after $(( SECONDS - t0 )) s"
  tail -25 "$R/stop-rank.log" >> "$SUMMARY"
else
  say "stop_rank: not run, $(left) s left (STOPS=$STOPS)"
fi

{ echo "## left after everything"; ps -eo pid,stat,etime,args | grep -E "checks/[a-z_]+\.py" | grep -v grep
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv; } >> "$SUMMARY" 2>&1
tar -czf "$OUT/s6-faults.tar.gz" -C /tmp s6 2>/dev/null
say "== total $(( SECONDS - start )) s of LIMIT $LIMIT"
