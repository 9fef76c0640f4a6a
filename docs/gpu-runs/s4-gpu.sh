#!/usr/bin/env bash
# Session 4's GPU runs on the lent 1xH200 (kind nvidia-h200), in parts, each skipped when too little of
# LIMIT is left:
#   full    bench_doctor --modes full on its own
#   cold    the same quick run with ENVBUILD_WARM_POOL=0 (every rank cold): the warm pool's anchor
#   facts   nvidia-smi, torch/NCCL versions, the cost of `import torch` (the static doctor's floor)
#   bench   benchmarks/bench_doctor.py: whole `envbuild doctor` runs (MODES, default static,quick) on GPU 0,
#           reports kept (issue 10's doctor --quick with gpu.compute; issue 17's time goals)
#   ray     a one-node Ray cluster on the GPU, `envbuild doctor --ray auto --quick --audit` (issue 11)
#   faults  the recorded faults that one GPU can show, again after the speed work (issue 17): SIGSTOP in
#           comm.offload_cycle's 2nd pause, pidfd blocked under expandable segments (M3), a second libnccl
#           preloaded on the rollout side (C3), NCCL_CUMEM_ENABLE differing between train and rollout (C5);
#           FAULTS picks (sigstop-compute: a warm gpu.compute rank stopped in its bf16 GEMM)
#   stop    benchmarks/stop_doctor.py: the whole doctor --quick stopped at random moments, ps + nvidia-smi after
#   stopstatic  benchmarks/stop_doctor.py on a static run, stops at 0.1-2 s (while the stack probe loads)
#   imports where `import torch` spends its time (-X importtime), what loading torch's native libraries alone
#           costs (ctypes), and the stack probe on its own (session 5: the static doctor's floor)
#   stackcmp the stack probe before the fast path (.bin/old_stack_probe.py = checks/stack_probe.py of 12ab7ed)
#           and after, on the same node, plain and with a second libnccl preloaded: time and every differing fact
# PREFIX names the outputs (default s4; session 5 runs use PREFIX=s5).
# Repo root, $OUT set; carry .whl (torch_memory_saver, megatron-core, py-spy, jsonschema for ray) and .bin
# (ray-slim.tar.xz: the ray 2.60.0 wheel's files without jars/rllib/data/serve/train/tune/llm and the
# dashboard's web build, xz-packed to fit the 64 MiB the tool carries):
#   PARTS="facts bench ray faults stop" LIMIT=540 bash docs/gpu-runs/s4-gpu.sh        (call 1)
#   PARTS=bench MODES=full TAG=call2 bash docs/gpu-runs/s4-gpu.sh                       (call 2)
#   PARTS="bench cold ray faults stop" MODES=static,quick,quick FAULTS=sigstop-compute TAG=call3 bash ...
#   PARTS="facts bench full ray" MODES=static,quick,quick LIMIT=420 TAG=call4 bash ...                     (call 4)
# Writes $OUT/s4-summary-$TAG.txt and $OUT/s4-$TAG.tar.gz (every JSON, log and run dir).
set -u
OUT=${OUT:?set OUT}
LIMIT=${LIMIT:-540}
PARTS=${PARTS:-facts bench ray faults stop}
MODES=${MODES:-static,quick}
TAG=${TAG:-call1}
PREFIX=${PREFIX:-s4}
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  >/dev/null 2>&1 || { echo "wheel install failed"; exit 1; }
[ -d /tmp/site/ray ] || tar -xJf .bin/ray-slim.tar.xz -C /tmp/site || { echo "ray unpack failed"; exit 1; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  NVSHMEM_DISABLE_NVLS=1 RAY_USAGE_STATS_ENABLED=0
export PATH=/tmp/site/bin:$PATH   # py-spy for hang stacks
R=/tmp/$PREFIX-$TAG; rm -rf "$R"; mkdir -p "$R"
SUMMARY=$OUT/$PREFIX-summary-$TAG.txt; : > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $(( LIMIT - (SECONDS - start) )); }
want() { case " $PARTS " in *" $1 "*) [ "$(left)" -ge "$2" ] && return 0; say "$1: not run, $(left) s left";; esac; return 1; }
timed() {  # timed NAME SECONDS CMD...: run, log to $R/NAME.log, one summary line
  local name=$1 lim=$2; shift 2
  local t0=$SECONDS
  timeout "$lim" "$@" > "$R/$name.log" 2>&1
  say "$name: exit $? after $(( SECONDS - t0 )) s (timeout $lim)"
}

say "== $(date -u +%FT%TZ) $(git log --oneline -1 2>/dev/null | cut -c1-60) parts: $PARTS"
if want facts 10; then
  { nvidia-smi --query-gpu=index,name,driver_version,memory.used,clocks.sm,power.draw --format=csv
    python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count(), sys.version.split()[0])'
    TIMEFORMAT="%R s wall, %U s user"
    for i in 1 2 3; do echo -n "import torch: "; { time python3 -c 'import torch'; } 2>&1; done
    echo -n "python3 -c pass: "; { time python3 -c pass; } 2>&1
    echo -n "envbuild --help: "; { time python3 -m envbuild --help >/dev/null; } 2>&1
    ls -la /lib/x86_64-linux-gnu/libnccl.so* 2>&1 | head -3; } >> "$SUMMARY" 2>&1
fi

if want imports 30; then
  python3 -X importtime -c 'import torch' 2> "$R/importtime.txt"
  { echo "## import torch, top cumulative (us)"; grep '^import time:' "$R/importtime.txt" | sed 1d \
      | awk -F'|' '{gsub(/ /,"",$2); print $2, $3}' | sort -rn | head -14
    echo "## import torch, top self (us)"; grep '^import time:' "$R/importtime.txt" | sed 1d \
      | awk -F'|' '{gsub(/import time:| /,"",$1); print $1, $3}' | sort -rn | head -10
    python3 - <<'EOF'
import ctypes, importlib.util, os, time
lib = os.path.join(os.path.dirname(importlib.util.find_spec("torch").origin), "lib")
t0 = time.perf_counter()
for name in ("libtorch_global_deps.so", "libtorch_cuda.so", "libtorch_python.so"):
    t = time.perf_counter()
    ctypes.CDLL(os.path.join(lib, name), mode=ctypes.RTLD_GLOBAL)
    print("ctypes load %-24s %.3f s" % (name, time.perf_counter() - t))
print("ctypes load, all three: %.3f s" % (time.perf_counter() - t0))
t = time.perf_counter()
cuda = ctypes.CDLL("libcuda.so.1")
print("cuInit", cuda.cuInit(0), "%.3f s" % (time.perf_counter() - t))
EOF
    TIMEFORMAT="%R s wall, %U s user"
    for i in 1 2; do echo -n "stack probe alone: "; { time python3 checks/stack_probe.py > "$R/stack-probe-$i.json"; } 2>&1; done
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('stack probe elapsed_s', d['elapsed_s'], 'init', d.get('init',{}).get('method'), 'phase_s', d.get('phase_s'))" "$R/stack-probe-2.json"
  } >> "$SUMMARY" 2>&1
fi

if want stackcmp 40; then
  cp .bin/old_stack_probe.py checks/_old_stack_probe.py
  for case in plain preload; do
    pre=""; [ $case = preload ] && pre=/lib/x86_64-linux-gnu/libnccl.so.2
    for which in old new; do
      script=checks/stack_probe.py; [ $which = old ] && script=checks/_old_stack_probe.py
      LD_PRELOAD=$pre python3 "$script" > "$R/stackcmp-$case-$which.json" 2> "$R/stackcmp-$case-$which.err"
    done
    python3 - "$R/stackcmp-$case-old.json" "$R/stackcmp-$case-new.json" "$case" <<'EOF' >> "$SUMMARY" 2>&1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print("## stackcmp %s: old %.2f s, new %.2f s; errors old %s new %s" % (sys.argv[3], a["elapsed_s"], b["elapsed_s"],
      a.get("errors"), b.get("errors")))
for part in ("torch", "init", "cuda_runtime", "cuda_driver"):
    x, y = a.get(part) or {}, b.get(part) or {}
    for k in sorted(set(x) | set(y)):
        if x.get(k) != y.get(k):
            print("  %s.%s: old %r | new %r" % (part, k, x.get(k), y.get(k)))
for part in ("mapped", "reachable"):
    x = [(m["family"], m["path"], m.get("version") or m.get("api_version")) for m in a.get(part) or []]
    y = [(m["family"], m["path"], m.get("version") or m.get("api_version")) for m in b.get(part) or []]
    print("  %s: %s" % (part, "same" if x == y else "old %s | new %s" % (x, y)))
EOF
  done
  rm -f checks/_old_stack_probe.py
  LD_PRELOAD=/lib/x86_64-linux-gnu/libnccl.so.2 timed stack-preload 60 python3 -m envbuild doctor --check 'stack.*' \
    --check node.driver_version --json "$R/doctor-stack-preload-1gpu.json"
  tail -12 "$R/stack-preload.log" >> "$SUMMARY"
fi

if want bench 100; then
  timed bench "$(( $(left) > 420 ? 420 : $(left) - 5 ))" python3 benchmarks/bench_doctor.py --modes "$MODES" --gpus 0 \
    --keep "$R/bench" --json "$R/bench-doctor-$TAG.json"
  cat "$R/bench.log" >> "$SUMMARY"
fi

if want full 260; then  # the whole --full on its own, after the quick runs (part "bench" with MODES=...,full does the same)
  timed full "$(( $(left) > 330 ? 330 : $(left) - 5 ))" python3 benchmarks/bench_doctor.py --modes full --gpus 0 \
    --keep "$R/full" --json "$R/bench-doctor-full-$TAG.json"
  cat "$R/full.log" >> "$SUMMARY"
fi

if want cold 60; then  # the same quick run with every rank started cold: the warm pool's anchor, same call
  ENVBUILD_WARM_POOL=0 timed cold "$(( $(left) > 150 ? 150 : $(left) - 5 ))" python3 benchmarks/bench_doctor.py \
    --modes quick --gpus 0 --keep "$R/cold" --json "$R/bench-doctor-cold-$TAG.json"
  cat "$R/cold.log" >> "$SUMMARY"
fi

if want ray 90; then
  python3 -m ray.scripts.scripts start --head --num-gpus 1 --num-cpus 8 --include-dashboard=false \
    --port 6380 > "$R/ray-start.log" 2>&1
  say "ray start: exit $?"
  RAY_ADDRESS=127.0.0.1:6380 timed ray-quick 150 python3 -m envbuild doctor --ray 127.0.0.1:6380 --quick --audit \
    --deadline 140 --json "$R/doctor-ray-1gpu-quick.json" --junit "$R/doctor-ray-1gpu-quick.junit.xml"
  tail -25 "$R/ray-quick.log" >> "$SUMMARY"
  python3 -m ray.scripts.scripts stop --force > "$R/ray-stop.log" 2>&1
fi

FAULTS=${FAULTS:-sigstop-offload m3 c3 c5}
has() { case " $FAULTS " in *" $1 "*) return 0;; esac; return 1; }
if want faults 60; then
  has sigstop-compute && ENVBUILD_TEST_SIGSTOP_AT="gemm.bf16" timed fault-sigstop-compute 90 python3 -m envbuild \
    doctor --quick --gpus 0 --check gpu.compute --json "$R/fault-sigstop-compute.json"
  has sigstop-offload && ENVBUILD_TEST_SIGSTOP_AT="pause 1" timed fault-sigstop-offload 90 python3 -m envbuild doctor --quick --gpus 0 \
    --check comm.offload_cycle --json "$R/fault-sigstop-offload.json"
  has m3 && PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ENVBUILD_FAULT_IPC_BLOCK_PTRACE=seccomp timed fault-m3-pidfd 60 \
    python3 -m envbuild doctor --quick --gpus 0 --check gpu.cumem_ipc --json "$R/fault-m3-pidfd.json"
  has c3 && timed fault-c3-second-libnccl 60 python3 -m envbuild doctor --quick --gpus 0 --check comm.weight_sync \
    --set weight.sync.rollout_env=LD_PRELOAD=/lib/x86_64-linux-gnu/libnccl.so.2 --json "$R/fault-c3-second-libnccl.json"
  has c5 && timed fault-c5-cumem-mismatch 60 python3 -m envbuild doctor --quick --gpus 0 --check comm.weight_sync \
    --set weight.sync.train_env=NCCL_CUMEM_ENABLE=0 --set weight.sync.rollout_env=NCCL_CUMEM_ENABLE=1 \
    --json "$R/fault-c5-cumem-mismatch.json"
  for f in "$R"/fault-*.log; do echo "## $(basename "$f")"; tail -6 "$f"; done >> "$SUMMARY"
fi

if want stopstatic 40; then  # early stops of a static run: the gated stack probe, NVML's snapshot
  timed stopstatic 60 python3 benchmarks/stop_doctor.py --stops 6 --after 0.1,2 --json "$R/stop-doctor-static-1gpu.json" \
    -- --gpus 0
  cat "$R/stopstatic.log" >> "$SUMMARY"
fi

if want stop 80; then
  n=$(( ($(left) - 20) / 16 )); [ "$n" -gt 12 ] && n=12
  timed stop "$(( $(left) - 5 ))" python3 benchmarks/stop_doctor.py --stops "$n" --after 2,22 \
    --json "$R/stop-doctor-1gpu.json" -- --quick --gpus 0
  cat "$R/stop.log" >> "$SUMMARY"
fi

{ echo "## left after everything"; ps -eo pid,stat,etime,args | grep -E "checks/[a-z_]+\.py|raylet|gcs_server" | grep -v grep
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv; } >> "$SUMMARY" 2>&1
tar -czf "$OUT/$PREFIX-$TAG.tar.gz" -C /tmp "$PREFIX-$TAG" 2>/dev/null
say "== total $(( SECONDS - start )) s of LIMIT $LIMIT"
