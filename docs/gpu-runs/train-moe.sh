#!/usr/bin/env bash
# train.moe_step on the lent H200s (kind nvidia-h200-x2), full mode (10 cycle steps + 3 plain steps) unless said.
# Usage (repo root, $OUT set): bash docs/gpu-runs/train-moe.sh [RUN ...]; no RUN = ep2 tp2sp 1gpu.
#   ep2       EP 2, TP 1, offload auto (torch_memory_saver when carried)
#   tp2sp     TP 2 + sequence parallel, EP 2, offload auto
#   1gpu      one GPU, host-copy offload
#   tp2sp-move  TP 2 + SP, EP 2, host-copy offload
#   pp2       PP 2 (one layer per stage), TP 1, EP 1, host-copy offload
#   cp2       CP 2: refused before any launch without Transformer Engine (none on the lent machine)
#   mlm       TP 2 + SP, EP 2, host-copy offload, 3 cycles, with slime v0.3.1's Megatron-LM commit 1dcf0daf
#             (megatron/core exported into .mlm/ by `git archive 1dcf0daf megatron/core`; carry .mlm) first on
#             PYTHONPATH instead of the megatron-core wheel
#   big1      one GPU at 8 layers, the deepest the pre-flight estimate lets through (128.5 of 140.4 GiB; its
#             10 % headroom says 7): 1 cycle + 1 plain step, no offload: a real out-of-memory or the peak it took
#   big1-fit  one GPU at the depth big1's result named (docs/gpu-runs/train-moe-big1.json), 2 cycles + 1 plain step
#   default   what `envbuild doctor --full` runs on two GPUs: no --set at all (4 layers, TP 2 + SP, EP 2,
#             torch_memory_saver when carried, the default deadline)
#   held      a second process holds HOLD_GIB (default 80) GiB of GPU 0, then one GPU at 6 layers: an
#             out-of-memory that must say what others held and name the depth that fits the rest; then that
#             depth with the holder still there (held-fit), then the holder is killed
# .whl carries megatron-core 0.19.2 and torch_memory_saver 0.0.10. DEADLINE (s) bounds each run (default 180);
# LAYERS (default 2) sets the depth. Each run's launcher logs (stderr, phases) go to $OUT/train-moe-logs.tar.gz.
# torch_memory_saver cycles took 23-25 s each at 2 layers (EP 2), host-copy cycles 6-8 s.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv > "$OUT/train-moe-gpus.csv"
D=${DEADLINE:-180}
L=${LAYERS:-2}
run() {  # run NAME ARGS...: the check at depth $L with deadline $D
  local name=$1; shift
  run_as_is "$name" --set train.layers="$L" "$@" --set train.deadline="$D"
}
run_as_is() {
  local name=$1; shift
  local t0=$SECONDS
  python3 -m envbuild doctor --full --check train.moe_step "$@" --json "$OUT/train-moe-$name.json" -q
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
    pp2) run pp2 --gpus 0,1 --set train.pp=2 --set train.tp=1 --set train.ep=1 --set train.offload=move ;;
    cp2) run cp2 --gpus 0,1 --set train.cp=2 --set train.tp=1 ;;
    mlm) PYTHONPATH=$PWD/.mlm:$PWD run mlm --gpus 0,1 --set train.tp=2 --set train.sp=1 --set train.ep=2 \
           --set train.offload=move --set train.steps=3 ;;
    big1-fit) fit=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results'][0]; \
print(r['remediation'].split('train.layers=')[1].split(';')[0].split()[0])" docs/gpu-runs/train-moe-big1.json) || exit 1
          echo "big1 named depth $fit"
          L=$fit run big1-fit --gpus 0 --set train.offload=none --set train.steps=2 --set train.plain_steps=1 ;;
    default) run_as_is default --gpus 0,1 ;;
    big1) L=8 run big1 --gpus 0 --set train.offload=none --set train.steps=1 --set train.plain_steps=1 ;;
    held)
      rm -f /tmp/holder.ready
      python3 -c "import torch, time; x = torch.empty(${HOLD_GIB:-80} << 30, dtype=torch.uint8, device='cuda:0'); \
open('/tmp/holder.ready', 'w').close(); time.sleep(900)" &
      holder=$!
      for _ in $(seq 60); do [ -e /tmp/holder.ready ] && break; sleep 1; done
      nvidia-smi --query-gpu=index,memory.used --format=csv,noheader
      L=6 run held --gpus 0 --set train.offload=none --set train.steps=1 --set train.plain_steps=1
      fit=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results'][0]; \
print(r['remediation'].split('train.layers=')[1].split(';')[0].split()[0])" "$OUT/train-moe-held.json") \
        && { echo "held: the result named depth $fit"; \
             L=$fit run held-fit --gpus 0 --set train.offload=none --set train.steps=1 --set train.plain_steps=1; }
      kill $holder; wait $holder 2>/dev/null ;;
    *) echo "unknown run $name"; exit 2 ;;
  esac
done
tar -czf "$OUT/train-moe-logs.tar.gz" --exclude='*.pt' /tmp/envbuild-* 2>/dev/null
true
