#!/usr/bin/env bash
# train.moe_step on the lent 2xH200 (kind nvidia-h200-x2), full mode (10 cycle steps + 3 plain steps).
# Usage (repo root, $OUT set): bash docs/gpu-runs/train-moe.sh [RUN ...]; no RUN = ep2 tp2sp 1gpu.
#   ep2       EP 2, TP 1, offload auto (torch_memory_saver when carried)      [first call: 4 layers]
#   tp2sp     TP 2 + sequence parallel, EP 2, offload auto                      [first call: 4 layers]
#   1gpu      one GPU, host-copy offload
#   tp2sp-move  TP 2 + SP, EP 2, host-copy offload (second call, DEADLINE=70)
# .whl carries megatron-core 0.19.2 and torch_memory_saver 0.0.10. DEADLINE (s) bounds each run; LAYERS
# (default 2) sets the depth. The first call used DEADLINE=110 and 4 layers for ep2/tp2sp; torch_memory_saver
# cycles took about 30 s each at 4 layers there, host-copy cycles 6-8 s at 2 layers, so budget ~150-250 s
# per run and keep one call under its 600 s limit (e.g. `DEADLINE=180 ... ep2`, then `... tp2sp 1gpu`).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv > "$OUT/train-moe-gpus.csv"
D=${DEADLINE:-180}
L=${LAYERS:-2}
run() {
  local name=$1; shift
  local t0=$SECONDS
  python3 -m envbuild doctor --full --check train.moe_step --set train.layers="$L" "$@" --set train.deadline="$D" \
    --json "$OUT/train-moe-$name.json" -q
  echo "$name: exit $? after $((SECONDS - t0)) s"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results'][0]; print(r['status'], r['summary'][:900])" \
    "$OUT/train-moe-$name.json"
}
for name in ${@:-ep2 tp2sp 1gpu}; do
  case $name in
    ep2) run ep2 --gpus 0,1 --set train.tp=1 --set train.ep=2 ;;
    tp2sp) run tp2sp --gpus 0,1 --set train.tp=2 --set train.sp=1 --set train.ep=2 ;;
    1gpu) run 1gpu --gpus 0 --set train.offload=move ;;
    tp2sp-move) run tp2sp-move --gpus 0,1 --set train.tp=2 --set train.sp=1 --set train.ep=2 \
                  --set train.offload=move ;;
    *) echo "unknown run $name"; exit 2 ;;
  esac
done
