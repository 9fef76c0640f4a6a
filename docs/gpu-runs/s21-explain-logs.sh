#!/usr/bin/env bash
# A third set of real fault logs for `envbuild explain` (issue 25): faults no earlier GPU run made, or made another
# way, on one lent GPU in one call, labelled by the fault each case makes before explain sees them (held-out slice
# 33). Programs in docs/gpu-runs/explain-progs/, harness in explain-logs-lib.sh. Needs only python3 with torch.
# NVLink multicast stays off. The hidden-device case bind-mounts /dev/null over /dev/nvidia0 inside a private mount
# namespace (unshare -m), never on the machine itself.
#
#   run (repo root, $OUT set by the device tool):  bash docs/gpu-runs/s21-explain-logs.sh
#   result: $OUT/s21-explain-logs.tar.gz = s21-explain-logs/{gpu-s21-NN.log, cases.toml, summary.txt, node.txt}
set -u
RUN=s21
source "$(dirname "$0")/explain-logs-lib.sh"
mkdir -p "$W/stubdir" "$W/shadow"
[ -n "$STUB" ] && ln -sf "$STUB" "$W/stubdir/libcuda.so.1"
printf 'VERSION = "3.7.4"\ndef final(f):\n    return f\n' > "$W/shadow/typing_extensions.py"  # an old copy, shadowing the env's

# healthy runs
case_ healthy-timeouts-set none 60 "one-rank NCCL and gloo groups created with a 30-minute timeout, a broadcast and a barrier" -- $N $PY prog/pg_timeout.py
case_ healthy-train-4workers none 90 "the MLP trained 30 steps from 4 DataLoader workers" -- env STEPS=30 WORKERS=4 $PY prog/train.py
case_ healthy-gloo2-nccl-warn none 60 "two gloo ranks all_reduce with NCCL_DEBUG=WARN set (gloo ignores it)" -- env MODE=ok NCCL_DEBUG=WARN $TR prog/gloo2.py
case_ healthy-pip-then-train none 90 "pip list of the env, then the MLP trained with 0 workers" -- bash -c "$PY -m pip list 2>/dev/null | head -60; WORKERS=0 STEPS=10 $PY prog/train.py"

# faults
case_ device-node-hidden D5 60 "/dev/nvidia0 replaced by /dev/null in a private mount namespace, then a CUDA tensor" -- unshare -m --propagation private bash -c "mount --bind /dev/null /dev/nvidia0 && $PY prog/tensor.py"
case_ ulimit-v O2 60 "ulimit -v 16 GiB (virtual memory), then a CUDA tensor" -- bash -c "ulimit -v 16777216; $PY prog/tensor.py"
case_ shadowed-module U5 60 "an old typing_extensions first on PYTHONPATH, then import torch" -- env PYTHONPATH=$W/shadow $PY prog/tensor.py
case_ rank-killed U6 75 "rank 1 SIGKILLs itself before the all_reduce; rank 0 fails after it (gloo)" -- env MODE=kill PG_TIMEOUT=20 $TR prog/gloo2.py
case_ cvd-out-of-range C11 60 "CUDA_VISIBLE_DEVICES=3 on a one-GPU node, then a CUDA tensor" -- env CUDA_VISIBLE_DEVICES=3 $PY prog/tensor.py
case_ dataset-cuda-fork O4 60 "a Dataset touching CUDA in forked DataLoader workers after the parent used CUDA" -- $PY prog/dataset_cuda.py
case_ label-out-of-range U2 60 "cross_entropy with a label past the last class (device-side assert)" -- $PY prog/ce_assert.py
case_ collective-order U1 75 "rank 1 calls barrier before all_reduce, rank 0 the other way round (gloo, 20 s timeout)" -- env MODE=order PG_TIMEOUT=20 $TR prog/gloo2.py
if [ -n "$STUB" ]; then
  case_ stub-on-library-path C7 60 "the toolkit's stub libcuda first on LD_LIBRARY_PATH (as libcuda.so.1)" -- env NCCL_DEBUG=INFO LD_LIBRARY_PATH=$W/stubdir $PY prog/pg1.py
fi
if [ -n "$COMPAT" ]; then
  case_ compat-on-library-path C8 60 "cuda-compat's folder first on LD_LIBRARY_PATH over the installed driver" -- env NCCL_DEBUG=INFO LD_LIBRARY_PATH=$(dirname "$COMPAT") $PY prog/train.py
fi
finish_
