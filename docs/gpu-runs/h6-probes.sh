#!/usr/bin/env bash
# The GPU run behind docs/gpu-runs/gpu-{p2p,cumem,offload,weightsync}*-*.json and the h6 fault runs
# (engineer H6, issue 6: probes gpu.p2p, cumem.ipc, offload.cycle, weight.sync).
# Run on the lent 2xH200 machine from the repository root with $OUT set and .whl carried (it holds
# torch_memory_saver 0.0.10): `bash docs/gpu-runs/h6-probes.sh`.
# Faults are injected per process only (per-rank env through --set, a seccomp filter inside one consumer
# process); nothing on the node changes. yama ptrace_scope is read, never written: 3 cannot be undone
# without a reboot (Linux Documentation/admin-guide/LSM/Yama.rst), and root keeps CAP_SYS_PTRACE under 1-2.
set -u
OUT=${OUT:?set OUT}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .whl/torch_memory_saver-*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
RD=/tmp/h6-rundirs; mkdir -p "$RD"
MINE=(--check gpu.p2p --check cumem.ipc --check offload.cycle --check weight.sync)

want() { [ -z "${H6_ONLY:-}" ] || [[ " $H6_ONLY " == *" $1 "* ]]; }  # H6_ONLY="name ...": a subset

run() {  # run NAME doctor-args...: JSON + log under $OUT; launcher run dirs (rank logs) end in $OUT/rundirs.tgz
  local name=$1; shift
  want "$name" || return 0
  mkdir -p "$RD/$name"
  local t0; t0=$(date +%s%N)
  TMPDIR="$RD/$name" timeout 300 python3 -m envbuild doctor "$@" --json "$OUT/$name.json" \
    > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc wall=$(( ($(date +%s%N) - t0) / 1000000 )) ms" | tee -a "$OUT/summary.txt"
}

{ echo "## id"; id; echo "## ptrace_scope"; cat /proc/sys/kernel/yama/ptrace_scope; echo "## status";
  grep -E "Seccomp|CapEff" /proc/self/status; echo "## topo"; nvidia-smi topo -m;
  echo "## ldconfig libnccl"; ldconfig -p | grep libnccl; } > "$OUT/h6-node.txt" 2>&1

run gpu-probes-2gpu-quick --quick "${MINE[@]}"
run gpu-probes-1gpu-quick --quick --gpus 0 "${MINE[@]}"
run gpu-offload-cumem-backend-quick --quick --check offload.cycle --set offload.backend=cumem
run gpu-fault-c5-cumem-mismatch --quick --check weight.sync \
  --set weight.sync.train_env=NCCL_CUMEM_ENABLE=0 --set weight.sync.rollout_env=NCCL_CUMEM_ENABLE=1
SYS_NCCL=$(ldconfig -p | awk '/libnccl\.so\.2 /{print $NF; exit}')
echo "system libnccl: ${SYS_NCCL:-none}" | tee -a "$OUT/summary.txt"
if [ -n "$SYS_NCCL" ]; then
  run gpu-fault-c3-second-libnccl --quick --check weight.sync --set "weight.sync.rollout_env=LD_PRELOAD=$SYS_NCCL"
fi
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ENVBUILD_FAULT_IPC_BLOCK_PTRACE=seccomp \
  run gpu-fault-m3-expandable-pidfd-blocked --quick --check cumem.ipc
tar czf "$OUT/rundirs.tgz" -C "$RD" .
cat "$OUT/summary.txt"
for f in "$OUT"/gpu-*.log; do echo "=== $f"; tail -25 "$f"; done
