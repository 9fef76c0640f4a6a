#!/usr/bin/env bash
# The GPU run behind docs/gpu-runs/h5-*.json (engineer H5, issue 6: gpu.basic, comm.nccl_collectives,
# comm.nccl_churn, the faults NCCL_P2P_DISABLE=1 and SIGSTOP mid-collective, and the all_reduce benchmark
# against nccl-tests). Run on the lent 2xH200 machine from the repository root with $OUT set, carrying
# .nccl-tests/bin (all_reduce_perf built here with nvcc 13.0 for sm_90 against nvidia-nccl-cu13 2.28.9,
# cudart static; py-spy 0.4.3 from its PyPI wheel):  bash docs/gpu-runs/h5-probes.sh
set -u
OUT=${OUT:?set OUT}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PATH=$PWD/.nccl-tests/bin:$PATH  # py-spy for hang stacks
# At most 8 files come back from $OUT: the JSONs stay there, everything else (logs, ps, the launcher's
# run dirs with per-rank and NCCL_DEBUG logs) goes into $OUT/h5-logs.tar.gz at the end.
LOGS=/tmp/h5-logs; rm -rf "$LOGS"; mkdir -p "$LOGS/rundirs"
MINE=(--check gpu.basic --check comm.nccl_collectives --check comm.nccl_churn)

run() {  # run NAME TIMEOUT doctor-args...: JSON under $OUT, log and launcher run dirs under $LOGS
  local name=$1 limit=$2; shift 2
  mkdir -p "$LOGS/rundirs/$name"
  local t0; t0=$(date +%s%N)
  TMPDIR="$LOGS/rundirs/$name" timeout "$limit" python3 -m envbuild doctor "$@" --json "$OUT/$name.json" \
    > "$LOGS/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc wall=$(( ($(date +%s%N) - t0) / 1000000 )) ms" | tee -a "$LOGS/summary.txt"
}

{ nvidia-smi topo -m; nvidia-smi nvlink -s | head -24; which py-spy; python3 -c "import torch; print(torch.__version__, torch.cuda.nccl.version())"; } \
  > "$LOGS/h5-node.txt" 2>&1

run h5-probes-2gpu-full 200 --full "${MINE[@]}"
NCCL_P2P_DISABLE=1 run h5-fault-p2p-disable 90 --quick --check comm.nccl_collectives --set comm.cumem=0
ENVBUILD_TEST_SIGSTOP_AT="all_reduce 64MiB" run h5-fault-sigstop 90 --quick --check comm.nccl_collectives \
  --set comm.cumem=0 --set comm.phase_deadline_s=15
# orphans: any process of the run still alive (by command line), and any GPU user, right after the hang
{ echo "## ps after the SIGSTOP run"; ps -eo pid,pgid,stat,etime,args | grep -E "checks/(nccl_|gpu_)" | grep -v grep;
  echo "## count of such processes"; ps -eo args | grep -E "checks/(nccl_|gpu_)" | grep -vc grep;
  echo "## nvidia-smi compute apps"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv; } \
  > "$LOGS/h5-fault-sigstop-ps.txt" 2>&1
NCCL_LIB=$(python3 -c "import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], 'lib'))")
t0=$(date +%s%N)
LD_LIBRARY_PATH=$NCCL_LIB:${LD_LIBRARY_PATH:-} timeout 150 python3 benchmarks/bench_allreduce.py \
  --nccl-tests .nccl-tests/bin/all_reduce_perf --json "$OUT/h5-bench-allreduce.json" > "$LOGS/h5-bench-allreduce.log" 2>&1
echo "h5-bench-allreduce rc=$? wall=$(( ($(date +%s%N) - t0) / 1000000 )) ms" | tee -a "$LOGS/summary.txt"
run h5-probes-1gpu-full 90 --full --gpus 0 "${MINE[@]}"
run h5-probes-2gpu-quick 120 --quick "${MINE[@]}"
tar -czf "$OUT/h5-logs.tar.gz" -C /tmp h5-logs
cat "$LOGS/summary.txt"; cat "$LOGS/h5-bench-allreduce.log"; cat "$LOGS/h5-fault-sigstop-ps.txt"
for f in "$LOGS"/h5-*.log; do echo "=== $f"; tail -12 "$f"; done; ls -la "$OUT"
