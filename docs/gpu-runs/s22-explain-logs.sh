#!/usr/bin/env bash
# A fourth set of real fault logs for `envbuild explain` (issue 25): faults no earlier GPU run made (s6, s20, s21),
# or made another way, on one lent GPU in one call, each labelled by the fault it makes before explain sees them
# (written blind: the author read neither explain's code nor its knowledge). Programs in
# docs/gpu-runs/explain-progs/, harness in explain-logs-lib.sh. Needs only python3 with torch (its NVRTC wheel for
# the custom-kernel cases). NVLink multicast stays off. Two cases work in a private namespace made by unshare, never
# on the machine itself: /dev/nvidia-uvm bind-mounted over by /dev/null (unshare -m), and /dev/shm a 1 MiB tmpfs
# (unshare -m); one rank runs in an empty network namespace (unshare -n) of its own.
# A trial of 15 of these cases (all but healthy-ddp-gloo and reward-pool-fork) on a lent 1xH100 took 153 s: 3 healthy
# runs exit 0, 12 faults each failed as planned; its logs were not kept for the corpus (the lead's run makes them).
#
#   run (repo root, $OUT set by the device tool):  bash docs/gpu-runs/s22-explain-logs.sh
#   result: $OUT/s22-explain-logs.tar.gz = s22-explain-logs/{gpu-s22-NN.log, cases.toml, summary.txt, node.txt}
set -u
RUN=s22
source "$(dirname "$0")/explain-logs-lib.sh"
mkdir -p "$W/oldtriton/triton"
printf '__version__ = "2.1.0"\n' > "$W/oldtriton/triton/__init__.py"  # a stale copy, first on PYTHONPATH
G="$TR prog/ddp_train.py"
PORT=29533

# healthy runs: each prints what a failure would (connect errors, out-of-memory messages, inf/nan gradients)
case_ healthy-retry-rendezvous none 30 "the rendezvous master comes up late: two store connects time out and are retried, then a one-rank NCCL all_reduce" -- $N $PY prog/retry_store.py
case_ healthy-oom-batch-finder none 35 "a batch-size finder catches torch.OutOfMemoryError and halves the batch until it fits, then trains 5 steps" -- $PY prog/oom_probe.py
case_ healthy-fp16-scaler-skips none 20 "fp16 autocast with a GradScaler starting at 2**40: overflowing steps skipped (inf/nan grad norms), then trains on" -- $PY prog/amp_scaler.py

case_ healthy-ddp-gloo none 30 "two DDP ranks over gloo on the one GPU, 20 steps, TORCH_DISTRIBUTED_DEBUG=INFO and NCCL_DEBUG=INFO set, gloo ignores it (not in the trial run)" -- env TORCH_DISTRIBUTED_DEBUG=INFO NCCL_DEBUG=INFO $G

# faults
case_ oom-eval-no-grad U3 30 "a validation loop without torch.no_grad keeps every output (and its graph) on the GPU until memory runs out" -- $PY prog/eval_leak.py
case_ colocated-rollout-oom U3 30 "a rollout engine spawned by the trainer reserves 90 % of the free memory, then the trainer's 1 B-parameter Adam step runs out (both processes of one job: U3, not a stale process)" -- $PY prog/colocate.py
case_ ddp-loss-nan U2 30 "two DDP ranks (gloo) with SGD lr=1e6: the loss goes to inf/nan and the training code raises ValueError" -- env LR=1e6 $G
case_ kernel-illegal-address U2 20 "a custom NVRTC kernel launched with a shard offset 4 TiB past its tensor (illegal memory access, found at the next sync)" -- env SHARD_OFFSET=1099511627776 $PY prog/custom_kernel.py
case_ uneven-batches U1 40 "DDP ranks with uneven data: the last rank has 3 batches fewer and goes on to all_gather_object while rank 0 still all_reduces gradients (gloo, 12 s timeout)" -- env UNEVEN=3 PG_TIMEOUT=12 $G
case_ rank-sigterm U6 30 "rank 1 of a DDP job (gloo) is sent SIGTERM from outside after its first steps; torchrun tears the job down" -- bash -c "rm -f rank.pid; PIDFILE=rank.pid STEPS=400 STEP_SLEEP=0.05 $G & p=\$!; for i in \$(seq 80); do [ -s rank.pid ] && break; sleep 0.5; done; sleep 3; kill -TERM \$(cat rank.pid); wait \$p"
case_ nproc-over-gpus C11 25 "torchrun --nproc-per-node 2 on a one-GPU node, each rank set_device(LOCAL_RANK): rank 1 asks for cuda:1" -- env DEVICE_PER_RANK=1 $G
case_ shm-weights-small O1 20 "a 1 MiB tmpfs over /dev/shm (private mount namespace); the trainer share_memory_()s 64 MiB of weights for a rollout worker" -- unshare -m --propagation private bash -c "mount -t tmpfs -o size=1m tmpfs /dev/shm && $PY prog/shm_weights.py"
if [ -e /dev/nvidia-uvm ]; then
  case_ uvm-node-broken D4 20 "/dev/nvidia-uvm replaced by /dev/null in a private mount namespace (nvidia_uvm unusable), then a CUDA tensor (D5 if the lead counts a lost node there)" -- unshare -m --propagation private bash -c "mount --bind /dev/null /dev/nvidia-uvm && $PY prog/tensor.py"
fi
case_ kernel-arch-sm100 D10 20 "a custom kernel built (NVRTC cubin) for sm_100a only, loaded on this sm_90 GPU: no kernel image for the device" -- env ARCH=sm_100a $PY prog/custom_kernel.py
case_ reward-pool-fork O4 20 "reward workers of a ProcessPoolExecutor (fork) use CUDA after the parent ran the policy on the GPU (not in the trial run)" -- $PY prog/reward_pool.py
case_ rank-netns-unreachable U4 35 "two gloo ranks launched by hand, rank 1 in a network namespace of its own (unshare -n, no route to the master): store connect and wait time out after 10 s" -- bash -c "export MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT WORLD_SIZE=2 PG_TIMEOUT=10 MODE=ok; RANK=0 $PY prog/gloo2.py & p=\$!; RANK=1 unshare -n $PY prog/gloo2.py; r=\$?; wait \$p; r0=\$?; exit \$(( r0 ? r0 : r ))"
case_ old-triton-shadow U5 20 "a stale triton (2.1.0) first on PYTHONPATH, then one torch.compile step" -- env PYTHONPATH=$W/oldtriton $PY prog/compile_step.py
finish_
