#!/usr/bin/env bash
# An eleventh set of real logs for `envbuild explain` (issue 25), on one lent GPU in one call, each case labelled by
# what it makes before explain sees it. Written blind: the author read neither explain's code nor its knowledge nor
# the corpus, and did not run anything on a GPU. 14 cases (7 healthy, 7 faults), written in a 40-minute slot: only
# cases whose flow could be checked off-GPU were kept.
# Checked off-GPU (CPU torch 2.13.0 wheel, Python 3.11, 2 CPUs, no GPU; DEVICE=cpu where a program has that knob):
# `bash -n`; `py_compile` of every new program with Python 3.11 and 3.12; wsync_churn with gloo in both modes (the
# handshake, the latency table; per-step groups made and destroyed, the over-budget stop with a 1 ms budget);
# sweep_trials plainly (a trial diverging to NaN with its FloatingPointError traceback, the 256 GiB trial refused --
# on the CPU as a crash, on a GPU it is caught as torch.OutOfMemoryError --, a leaderboard, exit 0); shard_pool
# plainly (UnicodeDecodeError logged, 16 shards, manifest); rank0_save under torchrun in both modes (the s3 fallback
# and the barrier; with SAVE_BARRIER=rank0 gloo's "Timed out waiting 10000ms for recv operation" on rank 0 and
# "Connection closed by peer" on rank 1); gemm_table at SIZE=512 (the CPU refuses none of the cells); gradcheck_op
# in both modes (float32 GradcheckError then float64 pass; with BACKWARD_BUG=1 re-raised, exit 1); embed_service
# (refused probes, 18 x 200, 1 x 404, 1 x 400, /metrics, exit 0); the whole script once under a stand-in harness run
# (the CPU torch, DEVICE=cpu, a stand-in nvidia-smi and a stand-in pkill on PATH) for its plumbing, including
# killworker.sh (the pool stall: "no shard finished in 10 s (15/16 done, missing [5])") and the CPU-time case
# (bash's "CPU time limit exceeded", exit 152; a first try with `ulimit -t`, soft and hard limit equal, got SIGKILL
# and bash's bare "Killed" instead, so the case sets the soft limit only). On the CPU the GEMM table's fp8 cells are
# emulated and slow: that case ran past its timeout there (SIZE=512); on a GPU 5 x 5 GEMMs of 8192 take well under 1 s.
# Not tried anywhere: anything on a GPU -- NCCL's refusal of the host tensor in the handshake (expected "No backend
# type associated with device type cpu"), the cost of a one-rank NCCL init and teardown per step against the 5 ms
# budget (assumed well above it; the healthy sync, an in-place one-rank broadcast, well under it), the 256 GiB
# trial's torch.OutOfMemoryError, a trial under CUDA_VISIBLE_DEVICES=1 on a one-GPU node (expected
# is_available() False), the fp8 _scaled_mm and int8 _int_mm refusals ("mat2 must be col_major", "self.size(0)
# needs to be greater than 16"; if the GPU accepts a cell it is timed, the run is healthy either way), gradcheck on
# CUDA tensors, the main process's CPU time on the lent node's CPUs under ulimit -St 4 (import torch, CUDA start and
# about 4-6 s of shard verification; the pool workers use about 2.5 s each), and every timing.
# Healthy runs that look like failures, each ending its own way: a trainer publishing weights through a one-rank
# NCCL group whose first handshake sends a host tensor (ERROR with the traceback, moved to the GPU; a sync-latency
# table, "rollout weights version 40 published"); a hyperparameter sweep with a diverging trial and an OOM trial (a
# leaderboard, "best trial ... -> best_trial.json"); corpus packing with broken UTF-8 documents (manifest written);
# two ranks whose s3:// checkpoint upload fails and falls back to local disk ("training done"); a GEMM acceptance
# table with refused fp8/int8 cells (gemm_table.csv); a custom op whose float32 gradcheck fails and float64 passes
# ("saved gate_model.pt"); an embedding microservice whose readiness probe starts too early (refusals, a 404 and a
# 400 in its smoke test, /metrics, "service stopped"). Faults, one thing changed: a new NCCL group made and destroyed
# for every weight sync (M4); the sweep's GPU list copied from a two-GPU node (C11); failed trials put into the
# ranking (U2); a pool worker SIGKILLed from outside, the pool stalls (U6); a soft CPU-time ulimit of 4 s (O2); the
# checkpoint barrier inside the writer only rank 0 runs (U1); a custom op's backward missing a term (U2).
# Programs in docs/gpu-runs/explain-progs/ (wsync_churn, sweep_trials, shard_pool, rank0_save, gemm_table,
# gradcheck_op, embed_service), harness in explain-logs-lib.sh; needs only python3 with torch. The only NCCL
# communicators are one-rank ones (NCCL_DEBUG=INFO); NVLink multicast stays off (the lib's NCCL_NVLS_ENABLE=0);
# nothing is mounted, no device node, driver setting or /dev/shm is touched (nothing is written there); no host is
# contacted (the store, gloo, the service on 127.0.0.1). Background processes: the sweep's trials, the pool's
# workers and torchrun's ranks end with their parent or with the case's process group. GPU memory: the sweep's
# 256 GiB request fails without allocating; the GEMM table holds at most two 8192^2 fp64 matrices (1 GiB) at once;
# everything else well under 2 GiB. Disk: the packed shards (1.3 MB), small checkpoints. Case timeouts add up to
# 420 s.
#
#   run (repo root, $OUT set by the device tool):  bash docs/gpu-runs/s29-explain-logs.sh
#   result: $OUT/s29-explain-logs.tar.gz = s29-explain-logs/{gpu-s29-NN.log, cases.toml, summary.txt, node.txt}
set -u
RUN=s29
source "$(dirname "$0")/explain-logs-lib.sh"

# one corpus-packing pool worker SIGKILLed from outside 1 s after the pool is up (as the kernel's OOM killer
# would); the pool quietly replaces it and the shard it held is never finished
cat > "$W/killworker.sh" <<'SH'
rm -f pool.pids
"$@" & job=$!
for i in $(seq 300); do [ "$(wc -l < pool.pids 2>/dev/null || echo 0)" -ge 4 ] && break; sleep 0.1; done
sleep 1.0
kill -9 "$(sed -n 2p pool.pids)"
wait $job
SH

# healthy runs: each prints errors, tracebacks, warnings or error text that it recovers from, then exits 0
case_ healthy-weight-sync-nccl none 30 "a trainer publishing its weights every step to a colocated rollout copy through a one-rank NCCL group (NCCL_DEBUG=INFO); the rollout handshake first sends its version counter as a host tensor, NCCL refuses it (ERROR with the traceback), the counter is moved to the GPU; 40 syncs, a sync-latency table and 'rollout weights version 40 published'" -- $N $PY prog/wsync_churn.py
case_ healthy-sweep-diverge-oom none 35 "a 4-trial hyperparameter sweep, each trial its own python process on the GPU, 2 at a time: one trial diverges (FloatingPointError traceback, 'diverged'), one asks for a 256 GiB activation (torch.OutOfMemoryError, 'oom'); a leaderboard and 'best trial N ... -> best_trial.json'" -- $PY prog/sweep_trials.py
case_ healthy-corpus-pack-bad-utf8 none 30 "corpus packing with a fork pool of 4 workers: documents with broken UTF-8 are logged (UnicodeDecodeError, the first with its traceback) and skipped; the main process verifies the shards and computes token statistics on the GPU; 'packed 16 shards ...' and 'manifest written'" -- $PY prog/shard_pool.py
case_ healthy-ckpt-s3-fallback none 30 "two data-parallel ranks by hand (gloo, model on the GPU) under torchrun: rank 0's checkpoint upload to s3:// fails (OSError 'no storage handler registered for scheme s3' with the traceback), written locally, both ranks meet at a barrier; 'training done: 30 steps x 2 ranks'" -- $TR prog/rank0_save.py
case_ healthy-gemm-table-refusals none 30 "a node acceptance GEMM table (fp64, fp32, bf16, fp16, fp8 _scaled_mm, int8 _int_mm at 8192): a row-major fp8 B operand and an 8-row int8 GEMM are expected to be refused (RuntimeError with tracebacks) and are retried with the layout the kernels want; a TFLOP/s table and 'gemm_table.csv written'" -- $PY prog/gemm_table.py
case_ healthy-gradcheck-fp64-retry none 25 "a custom autograd op (scaled SiLU gate, hand-written backward) checked with gradcheck: the float32 check fails (GradcheckError 'Jacobian mismatch' with numerical and analytical tensors) as float32 finite differences are too coarse, the float64 check passes; 200 training steps and 'saved gate_model.pt'" -- $PY prog/gradcheck_op.py
case_ healthy-embed-service-probe none 30 "an embedding microservice on 127.0.0.1 (http.server, an encoder on the GPU) and its readiness probe started before the server bound its port: ConnectionRefusedError/URLError tracebacks and retries, then a smoke test with one unknown model (404, KeyError logged by the server) and one non-JSON body (400, JSONDecodeError); the /metrics text and 'service stopped'" -- $PY prog/embed_service.py

# faults
case_ weight-sync-group-per-step M4 25 "the weight-sync trainer with SYNC_GROUP=per_step: each step makes a new one-rank NCCL group for the broadcast and destroys it (NCCL init and teardown lines every step); the syncs go over the 5 ms budget three times and the trainer stops ('weight sync over budget 3 times')" -- env SYNC_GROUP=per_step NCCL_DEBUG=INFO $PY prog/wsync_churn.py
case_ sweep-gpus-two-gpu-list C11 35 "the sweep with GPUS=0,1 (taken from a two-GPU node's config) on this one-GPU node: trials 1 and 3 get CUDA_VISIBLE_DEVICES=1, see no GPU and crash ('no CUDA device visible ... device_count=0'); 'sweep aborted: 2 of 4 trials crashed'" -- env GPUS=0,1 $PY prog/sweep_trials.py
case_ sweep-rank-failed-trials U2 35 "the sweep with RANK_FAILED=1: the diverged and out-of-memory trials (loss None) are sorted with the finished ones, TypeError \"'<' not supported between instances of ... 'NoneType'\" after every trial ended" -- env RANK_FAILED=1 $PY prog/sweep_trials.py
case_ corpus-pack-worker-killed U6 30 "corpus packing whose second pool worker is SIGKILLed from outside 1 s after the pool started (nothing in the log says so): multiprocessing.Pool replaces it silently, its shard never comes back, 'packing stalled: no shard finished in 10 s ... missing [N]'" -- bash killworker.sh $PY prog/shard_pool.py
case_ corpus-pack-cpu-time-limit O2 30 "corpus packing under a CPU-time limit of 4 s per process (soft limit, ulimit -St 4, as a batch system's default could set; core dumps off): the pool workers finish, the main process is killed by SIGXCPU while it imports torch, starts CUDA or verifies shards; bash reports 'CPU time limit exceeded'" -- bash -c "ulimit -c 0; ulimit -St 4; $PY prog/shard_pool.py; exit \$?"
case_ ckpt-barrier-in-writer U1 35 "the two-rank run with SAVE_BARRIER=rank0: the barrier sits inside the checkpoint writer that only rank 0 runs; rank 1 goes on to its next gradient all_reduce, rank 0 waits in the barrier: gloo 'Timed out waiting 10000ms for recv operation' on rank 0, 'Connection closed by peer' on rank 1, torchrun's ChildFailedError" -- env SAVE_BARRIER=rank0 $TR prog/rank0_save.py
case_ gradcheck-wrong-backward U2 20 "the custom op with BACKWARD_BUG=1 (the backward drops the sigmoid's derivative term): gradcheck fails in float32 and again in float64, the GradcheckError is re-raised before training" -- env BACKWARD_BUG=1 $PY prog/gradcheck_op.py
finish_
