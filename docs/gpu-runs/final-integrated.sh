#!/usr/bin/env bash
# The lead's integrated run on the lent 2xH200 (kind nvidia-h200-x2): the whole doctor in --full and
# --quick on two GPUs (JSON, JUnit, Prometheus), and train.moe_step in full mode (10 cycle steps) for
# TP 2 + SP + EP 2, one GPU, and EP 2. Repo root, $OUT set; carry .whl (megatron-core 0.19.2,
# torch_memory_saver 0.0.10) and .nccl-tests/bin (py-spy for hang stacks).
# Each step runs only while the whole command stays inside LIMIT seconds (the device call's limit).
set -u
OUT=${OUT:?set OUT}
LIMIT=${LIMIT:-545}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PATH=$PWD/.nccl-tests/bin:$PATH
LOGS=/tmp/final-logs; rm -rf "$LOGS"; mkdir -p "$LOGS/rundirs"
start=$SECONDS
step() {  # step NAME NEED_S TIMEOUT_S doctor-args...
  local name=$1 need=$2 limit=$3; shift 3
  local left=$(( LIMIT - (SECONDS - start) ))
  if [ "$left" -lt "$need" ]; then echo "$name: not run, $left s left < $need s needed" | tee -a "$LOGS/summary.txt"; return; fi
  [ "$limit" -gt $(( left - 10 )) ] && limit=$(( left - 10 ))
  mkdir -p "$LOGS/rundirs/$name"
  local t0=$SECONDS
  TMPDIR="$LOGS/rundirs/$name" timeout "$limit" python3 -m envbuild doctor "$@" > "$LOGS/$name.log" 2>&1
  echo "$name: exit $? after $(( SECONDS - t0 )) s (timeout $limit)" | tee -a "$LOGS/summary.txt"
}
{ nvidia-smi; python3 -c "import torch, megatron.core as m; print(torch.__version__, torch.cuda.nccl.version(), m.__version__)"; } > "$LOGS/node.txt" 2>&1
step doctor-full-2gpu 150 230 --full --skip train.moe_step --json "$OUT/doctor-full-2gpu.json" \
  --junit "$OUT/doctor-full-2gpu.junit.xml" --prometheus "$OUT/doctor-full-2gpu.prom"
T=(--full --check train.moe_step --set train.layers=2)
step train-tp2sp 100 140 "${T[@]}" --gpus 0,1 --set train.tp=2 --set train.sp=1 --set train.ep=2 \
  --set train.offload=move --set train.deadline=130 --json "$OUT/train-moe-tp2sp-final.json"
step train-1gpu 70 100 "${T[@]}" --gpus 0 --set train.offload=move --set train.deadline=90 \
  --json "$OUT/train-moe-1gpu-final.json"
step train-ep2 100 150 "${T[@]}" --gpus 0,1 --set train.tp=1 --set train.ep=2 --set train.deadline=140 \
  --json "$OUT/train-moe-ep2-final.json"
step doctor-quick-2gpu 90 120 --quick --json "$OUT/doctor-quick-2gpu.json"
{ echo "## processes of envbuild payloads left after the runs"; ps -eo pid,stat,etime,args | grep -E "checks/[a-z_]+\.py" | grep -v grep; 
  echo "## GPU compute apps"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv; } > "$LOGS/leftovers.txt" 2>&1
tar -czf "$OUT/final-logs.tar.gz" -C /tmp final-logs
cat "$LOGS/summary.txt" "$LOGS/leftovers.txt"
for f in "$LOGS"/*.log; do echo "=== $f"; tail -8 "$f"; done
