#!/usr/bin/env bash
# train.moe_step on the lent 2xH200 (kind nvidia-h200-x2), full mode (10 cycle steps + 3 plain steps):
# EP 2 (TP 1), TP 2 + sequence parallel (EP 2), and one GPU (host-copy offload instead of torch_memory_saver).
# Run from the repository root with $OUT set; .whl carries megatron-core 0.19.2 and torch_memory_saver 0.0.10.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv > "$OUT/train-moe-gpus.csv"
run() {
  local name=$1; shift
  if [ "$SECONDS" -gt 200 ]; then echo "$name: not run, $SECONDS s spent"; return; fi
  local t0=$SECONDS
  python3 -m envbuild doctor --full --check train.moe_step "$@" --json "$OUT/train-moe-$name.json" -q
  echo "$name: exit $? after $((SECONDS - t0)) s"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results'][0]; print(r['status'], r['summary'][:700])" \
    "$OUT/train-moe-$name.json"
}
run ep2 --gpus 0,1 --set train.tp=1 --set train.ep=2 --set train.deadline=110
run tp2sp --gpus 0,1 --set train.tp=2 --set train.sp=1 --set train.ep=2 --set train.deadline=110
run 1gpu --gpus 0 --set train.layers=2 --set train.offload=move --set train.deadline=110
