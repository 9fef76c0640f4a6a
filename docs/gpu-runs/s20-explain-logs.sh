#!/usr/bin/env bash
# A second set of real fault logs for `envbuild explain` (issue 25), made on one lent GPU (H100 or H200) in one call
# of < 9 min, and scored by explain only after the labels below were written (a blind GPU slice). The programs are
# in docs/gpu-runs/explain-progs/; each case runs one under a timeout, with NCCL_DEBUG=INFO where NCCL is used, and
# its cause is the fault the case makes. Healthy runs that must come out clean sit beside them. Needs only python3
# with torch; no envbuild. NVLink multicast stays off (NCCL_NVLS_ENABLE=0; nothing calls cuMulticastCreate). The
# full-/dev/shm case mounts a 1 MiB tmpfs over /dev/shm in a private mount namespace (unshare -m), never the
# machine's own.
#
#   run (repo root, $OUT set by the device tool):  bash docs/gpu-runs/s20-explain-logs.sh
#   result: $OUT/s20-explain-logs.tar.gz = s20-explain-logs/{gpu-s20-NN.log, cases.toml, summary.txt, node.txt}
#   tests/explain/corpus/add_run.py takes the tarball (tests/explain/corpus/README.md, "H200 fault logs").
set -u
RUN=s20
source "$(dirname "$0")/explain-logs-lib.sh"

# healthy runs: the verdict must be ok, no cause above "low"
case_ healthy-train none 90 "an MLP trained 20 steps from a DataLoader with 2 workers, bf16 autocast" -- $PY prog/train.py
case_ healthy-nccl-verbose none 60 "one-rank NCCL all_reduce with INIT,ENV,GRAPH debug and TORCH_DISTRIBUTED_DEBUG=DETAIL" -- env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,GRAPH TORCH_DISTRIBUTED_DEBUG=DETAIL TORCH_CPP_LOG_LEVEL=INFO $PY prog/pg1.py
case_ healthy-gloo2-ifname none 60 "two gloo ranks all_reduce with GLOO_SOCKET_IFNAME=lo (a valid interface)" -- env MODE=ok GLOO_SOCKET_IFNAME=lo $TR prog/gloo2.py
case_ healthy-smi-train none 90 "nvidia-smi, then the MLP trained with 0 DataLoader workers" -- bash -c "nvidia-smi; WORKERS=0 $PY prog/train.py"

# the faults s6 had written but never reached (its call ran out of time)
case_ collective-mismatch U1 60 "ranks all_reduce tensors of different sizes, TORCH_DISTRIBUTED_DEBUG=DETAIL (gloo)" -- env MODE=mismatch TORCH_DISTRIBUTED_DEBUG=DETAIL $TR prog/gloo2.py
case_ expandable-ipc M3 90 "expandable_segments:True and a CUDA tensor sent to a child over CUDA IPC" -- env NCCL_DEBUG=INFO PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $PY prog/ipc.py
case_ device-assert U2 60 "an out-of-bounds GPU index, then an NCCL all_reduce on the poisoned context" -- $N $PY prog/assert_then_nccl.py
case_ fork-after-init O4 60 "CUDA used in a child forked after the parent initialised CUDA" -- $PY prog/fork_after_init.py
if [ -n "$STUB" ]; then
  case_ stub-libcuda C7 60 "LD_PRELOAD=$STUB (the toolkit's stub libcuda)" -- env NCCL_DEBUG=INFO LD_PRELOAD="$STUB" $PY prog/tensor.py
fi
# new faults
case_ shm-full O1 90 "a 1 MiB tmpfs over /dev/shm (private mount namespace) and DataLoader workers sending 4 MiB samples" -- unshare -m --propagation private bash -c "mount -t tmpfs -o size=1m tmpfs /dev/shm && SAMPLE_MIB=4 STEPS=5 $PY prog/train.py"
case_ nofile-low O2 90 "ulimit -n 64 and DataLoader workers (file_descriptor sharing)" -- bash -c "ulimit -n 64; SAMPLE_MIB=0.5 STEPS=10 WORKERS=4 $PY -c 'import torch.multiprocessing as m; m.set_sharing_strategy(\"file_descriptor\"); import runpy; runpy.run_path(\"prog/train.py\", run_name=\"__main__\")'"
case_ gpu-held D7 120 "another process holds 95 % of the GPU's memory while training doubles its batch" -- bash -c "$PY prog/hold_gpu.py 0.95 100 & sleep 12; nvidia-smi; GROW=1 STEPS=30 WORKERS=0 $PY prog/train.py; rc=\$?; kill %1; exit \$rc"
case_ gloo-ifname-bad U4 60 "GLOO_SOCKET_IFNAME=nonexistent0 (two gloo ranks)" -- env MODE=ok GLOO_SOCKET_IFNAME=nonexistent0 $TR prog/gloo2.py
case_ rank-stopped U6 90 "rank 1 SIGSTOPs itself before the all_reduce; rank 0 times out after 15 s (gloo)" -- env MODE=stop PG_TIMEOUT=15 $TR prog/gloo2.py
if [ -n "$COMPAT" ]; then
  case_ compat-libcuda C8 60 "LD_PRELOAD=$COMPAT (cuda-compat's libcuda over the installed driver)" -- env NCCL_DEBUG=INFO LD_PRELOAD="$COMPAT" $PY prog/pg1.py
fi
case_ cvd-minus-one C11 60 "CUDA_VISIBLE_DEVICES=-1 and init_process_group(device_id=cuda:0)" -- env NCCL_DEBUG=INFO CUDA_VISIBLE_DEVICES=-1 $PY prog/pg1.py
case_ oom-growing U3 90 "a training step whose batch doubles until the GPU is out of memory (expandable segments)" -- env GROW=1 STEPS=40 WORKERS=0 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $PY prog/train.py

finish_
