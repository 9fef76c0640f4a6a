#!/usr/bin/env bash
# A ninth set of real logs for `envbuild explain` (issue 25), on one lent GPU in one call, each case labelled by
# what it makes before explain sees it. Written blind: the author read neither explain's code nor its knowledge nor
# the corpus, and did not run anything on a GPU. Checked off-GPU (torch 2.14.1 cu130 wheel on a machine without a
# GPU, Python 3.11, gloo, DEVICE=cpu where a program has that knob; the case helper scripts below copied out and run
# with the CPU programs): `bash -n`; `py_compile` of every program; shard_reader under `ulimit -Sn 256` (EMFILE
# logged, soft limit raised, exit 0) and `ulimit -n 256` (the error re-raised, exit 1); gpu_gate's wait loop and its
# give-up path with the CUDA calls stubbed and a stand-in nvidia-smi; early_stop under torchrun --no-python through
# rank_gpu.sh in both modes (the shared decision stopped both ranks at epoch 10, exit 0; the per-rank decision
# stopped rank 1 at epoch 8 and both ranks hit gloo's 10 s timeout, rank 0 in DDP's backward, rank 1 in the final
# all_gather, exit 1; without `del model` before destroy_process_group about 1 run in 7 of the healthy mode aborted
# at interpreter exit, 'terminate called without an active exception' from a pt_gloo_runloop thread of the group
# that DDP still held: 0 in 26 runs with it); requeue.sh with requeue_job in both modes (SIGTERM, checkpoint,
# requeued step resumed and finished, exit 0; the SIGSTOPped producer seen as 'T (stopped)', exit 1 -- an earlier
# version that sent whole batches over the queue hung the trainer in a pipe read of a half-written message, hence
# the spool files);
# anomaly_fix in both modes ("Function 'SoftmaxBackward0' returned nan values", recovered or raised);
# log_classifier (exit 0) and its TB=1 import with the tensorboard 1.14.0 stand-in (torch's own "TensorBoard logging
# requires TensorBoard version 1.15 or above"); fp8_probe's flow on the CPU (its MXFP8 try refused there too);
# dedup_scan's flow with small sizes (no cap, no memory summary on the CPU); async_ckpt's flow on the CPU (where the
# forked writer works); the whole script once under a stand-in harness run (the CPU torch, DEVICE=cpu, a stand-in
# nvidia-smi) for its plumbing: every case reached, the helper scripts, torchrun --no-python and the tensorboard
# stand-in as planned (the GPU-only programs failing there for want of CUDA, the slow ones timing out on 2 CPUs).
# `py_compile` with Python 3.11 and 3.12.
# Not tried anywhere: anything on a GPU -- CUDA in the forked checkpoint writer (expected "CUDA error: initialization
# error" or torch's "Cannot re-initialize CUDA in forked subprocess"), the memory cap and the allocator's retries,
# the 144 GiB request, the GPU holder and the free-memory numbers the gate reads, _scaled_mm on sm_90 (the MXFP8
# refusal message, the FP8 row-wise/tensor-wise kernels), rank 1 without a GPU under CUDA_VISIBLE_DEVICES=1, gloo
# with CUDA tensors for this program, NaN from a CUDA softmax, every timing.
# Its point, like s23-s26's, is healthy runs that look like failures, made in ways not used before and ending in
# different ways: a data loader that hits EMFILE under a low soft `ulimit -n` and raises its own soft limit (a
# shard table); a job that finds its GPU held by another process and waits for it to go (nvidia-smi's process list
# in WARNING lines); two DDP ranks stopped early by design (Keras-style "early stopping", best weights restored,
# torchrun's end); a preemptible job sent SIGTERM by its submit script, checkpointing and exiting 0, then requeued and
# resumed (two process lifetimes in one log); a focal loss whose NaN backward anomaly mode catches (ERROR, the
# forward traceback), recomputed in a stable form (a JSON summary); an incident-routing classifier whose held-out
# samples are quoted GPU error lines (OOM, NCCL, Xid, undefined symbol, device assert: its data, not its errors); a
# GEMM recipe probe whose MXFP8 try is refused on this GPU (traceback) before FP8 row-wise is picked (a table,
# "server ready"); a memory-capped retrieval job ending with torch.cuda.memory_summary() ("CUDA OOMs", cudaMalloc
# retries). Beside them, faults made with the same programs, one thing changed: the hard `ulimit -n` as low (O2);
# the other process never leaves within the wait (D7); each rank deciding early stopping on its own shard, rank 1
# leaving the training loop first (U1); GPUS_PER_NODE=8 from another cluster's job script, rank 1 bound to a GPU
# the node lacks (C11); the data producer SIGSTOPped from outside, the trainer giving up (U6); the focal loss without
# the fallback (U2); TensorBoard logging with a tensorboard 1.14.0 pinned on PYTHONPATH (U5); the dedup scan's block
# size 0 = all rows, a 144 GiB score matrix (U3); an asynchronous checkpoint writer forked with the model's CUDA
# tensors (O4).
# Programs in docs/gpu-runs/explain-progs/, harness in explain-logs-lib.sh; needs only python3 with torch.
# NVLink multicast stays off; no NCCL communicator is made; nothing is mounted, no device node or /dev/shm size is
# touched; no host is contacted (torchrun's store and gloo stay on 127.0.0.1). Background helpers: the GPU holder
# (hold_gpu.py) sleeps 12 s or 100 s and is killed by gate.sh when the job ends (and by the harness, by name); the
# data producer of requeue_job ends by itself after 600 batches or when told to stop, and the stopped one is
# SIGKILLed by the trainer and again by requeue.sh. GPU memory: at most about 31 GiB (the holder's 20 % of the free
# memory, 28 GiB on an H200, beside the gate's ~3 GiB); dedup_scan is capped at 12 GiB and its 144 GiB request
# fails at once. Case timeouts add up to 420 s.
#
#   run (repo root, $OUT set by the device tool):  bash docs/gpu-runs/s27-explain-logs.sh
#   result: $OUT/s27-explain-logs.tar.gz = s27-explain-logs/{gpu-s27-NN.log, cases.toml, summary.txt, node.txt}
set -u
RUN=s27
source "$(dirname "$0")/explain-logs-lib.sh"
NG=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); [ "${NG:-0}" -ge 1 ] || NG=1
RS="bash prog/rank_gpu.sh $PY prog/early_stop.py"  # torchrun --no-python: each rank through the GPU binding wrapper

# a GPU process left from the job's previous step (its output in a file of its own, not in the log), then this
# step's command; the holder goes when the command ends (or after HOLD seconds by itself)
cat > "$W/gate.sh" <<'SH'
hold=$1; shift
rm -f holder.log
"$1" prog/hold_gpu.py 0.2 "$hold" > holder.log 2>&1 &
h=$!
for i in $(seq 150); do grep -q holding holder.log 2>/dev/null && break; sleep 0.2; done
"$@"; rc=$?
kill "$h" 2>/dev/null; wait "$h" 2>/dev/null
exit $rc
SH

# the job's submit script: job step 1, the scheduler's signal SIG_AFTER s after the first batch, then the requeued
# step 2; with STOP_PRODUCER=1 the data producer is SIGSTOPped instead (silently: a stall from outside the job)
cat > "$W/requeue.sh" <<'SH'
rm -rf requeue-ckpt requeue-spool; rm -f job.pid producer.pid
PIDFILE=job.pid PRODUCER_PIDFILE=producer.pid "$@" & step=$!
for i in $(seq 150); do [ -s job.pid ] && break; sleep 0.2; done
sleep "${SIG_AFTER:-3}"
if [ "${STOP_PRODUCER:-0}" = 1 ]; then
  kill -STOP "$(cat producer.pid)"
else
  echo "[submit] $(date -u +%FT%TZ) preemption notice for job step 1: SIGTERM to pid $(cat job.pid)"
  kill -TERM "$(cat job.pid)"
fi
wait $step; rc=$?
kill -9 "$(cat producer.pid)" 2>/dev/null
echo "[submit] $(date -u +%FT%TZ) job step 1 ended with exit code $rc"
[ "$rc" = 0 ] || exit $rc
[ "${STOP_PRODUCER:-0}" = 1 ] && exit 0
echo "[submit] requeued: starting job step 2"
"$@"; rc=$?
echo "[submit] $(date -u +%FT%TZ) job step 2 ended with exit code $rc"
exit $rc
SH

# tensorboard 1.14.0 (a 2019 requirements pin installed into a target folder that sits on PYTHONPATH)
TB=$W/pinned-site/tensorboard
mkdir -p "$TB"
printf 'VERSION = "1.14.0"\n' > "$TB/version.py"
printf '"""TensorBoard is a webapp for understanding TensorFlow runs and graphs."""\n\nfrom tensorboard import version as _version\n\n__version__ = _version.VERSION\n' > "$TB/__init__.py"

# healthy runs: each prints errors, tracebacks, warnings or error text that it recovers from or that is its data,
# then exits 0
case_ healthy-nofile-soft-raise none 20 "an LM run memory-maps 400 token shards (two descriptors each) under a soft open-file limit of 256 (ulimit -Sn 256, hard limit untouched): OSError [Errno 24] Too many open files logged as a WARNING with its traceback, the soft RLIMIT_NOFILE raised to 4096 (or the hard limit), the shards opened again, 150 steps, a reads-per-shard table and 'run finished'" -- bash -c "ulimit -Sn 256; exec $PY prog/shard_reader.py"
case_ healthy-wait-gpu-free none 35 "a job that wants its GPU to itself finds 20 % of the GPU memory held by a process of the previous job step (started just before, its output not in the log, gone 12 s later): WARNING lines 'GPU 0 busy, N GiB held by other processes; waiting' with nvidia-smi's compute-process list every 3 s, then 'free after N s', 80 bf16 steps and 'GPU released'" -- bash gate.sh 12 $PY prog/gpu_gate.py
case_ healthy-early-stop none 30 "two DDP ranks (gloo, both on the one GPU, CUDA_VISIBLE_DEVICES=LOCAL_RANK % $NG set by a wrapper under torchrun --no-python): Keras-style epochs, the validation loss averaged over the ranks stops improving and both ranks print 'early stopping ... did not improve ... for 3 epochs', restore the best epoch's weights and print a test-accuracy table; torchrun ends normally" -- env GPUS_PER_NODE=$NG $TR --no-python $RS
case_ healthy-preempt-requeue none 35 "a preemptible job step (GPU trainer fed by a spawned data-producer process) is sent SIGTERM by its submit script 3 s in ('preemption notice'): it checkpoints, stops the producer and exits 0; the submit script requeues it, job step 2 resumes from the checkpoint and completes 600 steps ('training complete', exit code 0)" -- bash requeue.sh $PY prog/requeue_job.py
case_ healthy-anomaly-nan-fix none 15 "a hand-written focal loss under torch.autograd.detect_anomaly: at step 17 an unnormalized batch makes softmax underflow, the backward returns NaN and anomaly mode raises \"Function '...Backward0' returned nan values\" (SoftmaxBackward0 on the CPU copy; torch's 'Error detected in ...' warning with the forward traceback, then an ERROR record with the traceback); the loss switches to the log_softmax form, the step is redone, anomaly mode goes off at step 40, 120 steps and a JSON summary" -- $PY prog/anomaly_fix.py
case_ healthy-log-router-samples none 20 "an incident-routing classifier (hashed trigrams, EmbeddingBag) trained on templated GPU-log lines prints its held-out predictions: quoted lines such as 'torch.OutOfMemoryError: CUDA out of memory', 'NCCL WARN ... Connection refused', 'NVRM: Xid ... 79 ... fallen off the bus', 'undefined symbol', 'device-side assert triggered' (its data, not its errors), a precision/recall table, accuracy and 'model saved'" -- $PY prog/log_classifier.py
case_ healthy-gemm-recipe-probe none 20 "an inference server's start-up GEMM probe: MXFP8 (e8m0 block scales, a Blackwell-class recipe) is refused on this sm_90 GPU (WARNING with the exception and traceback), FP8 row-wise and tensor-wise and bf16 are checked against bf16 and timed, a recipe table, the fastest picked, 300 warm-up batches and 'server ready'" -- $PY prog/fp8_probe.py
case_ healthy-capped-memory-report none 25 "a retrieval fine-tune capped at 12 GiB with set_per_process_memory_fraction (the GPU shared with an inference server): in-batch negatives over 16384 pairs, then a near-duplicate scan of 196608 embeddings in row blocks sized from the budget (the first block is expected to need the cached memory flushed under the cap: cudaMalloc retries); ends with torch.cuda.memory_summary() ('CUDA OOMs: 0 | cudaMalloc retries: N'), a note on the retries and 'done ... encoder saved'" -- $PY prog/dedup_scan.py

# faults
case_ nofile-hard-limit O2 15 "the shard-mapping LM run under ulimit -n 256 (hard limit 256 too): opening 400 shards fails with EMFILE, the soft limit cannot be raised past the hard one; the loader logs 'hard RLIMIT_NOFILE is 256' and re-raises OSError [Errno 24] Too many open files" -- bash -c "ulimit -n 256; exec $PY prog/shard_reader.py"
case_ gpu-held-past-wait D7 35 "the exclusive-GPU job with WAIT_S=15: the previous step's process (its output not in the log) keeps 20 % of the GPU memory for 100 s; the job waits, prints nvidia-smi and raises 'GPU 0 ... is in use by another process ... still there after 15 s' with the compute-process list" -- env WAIT_S=15 bash gate.sh 100 $PY prog/gpu_gate.py
case_ early-stop-per-rank U1 35 "the two-rank early-stopping job with each rank deciding on its own validation shard (LOCAL_DECISION=1, gloo timeout 10 s): rank 1's drifted shard stops improving, it leaves the training loop and calls the final all_gather while rank 0 trains on into DDP's gradient all_reduce; the collectives no longer match: gloo's 10 s timeout on both ranks (on the CPU copy; gloo may instead report the size mismatch)" -- env LOCAL_DECISION=1 PG_TIMEOUT=10 GPUS_PER_NODE=$NG $TR --no-python $RS
case_ rank-gpu-binding-8gpu C11 25 "the two-rank early-stopping job launched with GPUS_PER_NODE=8 (copied from an 8-GPU cluster's job script) on this one-GPU node: the wrapper sets CUDA_VISIBLE_DEVICES=1 for rank 1, which then sees no GPU (torch.cuda.set_device(0) fails); rank 0 fails after it" -- env GPUS_PER_NODE=8 $TR --no-python $RS
case_ producer-stopped U6 30 "the preemptible job step whose data-producer process is SIGSTOPped from outside 3 s in (nothing in the log says so): the trainer drains the queue, waits 10 s, reports the producer 'alive=True state=T (stopped)', kills it and raises 'data producer ... sent no batch for 10 s'" -- env STOP_PRODUCER=1 bash requeue.sh $PY prog/requeue_job.py
case_ anomaly-nan-no-fallback U2 15 "the focal-loss run without the stable fallback (FIX=0): at step 17 anomaly mode's \"Function '...Backward0' returned nan values in its 0th output\" (SoftmaxBackward0 on the CPU copy) ends the run (log(softmax) underflowing to log(0) in the code's loss)" -- env FIX=0 $PY prog/anomaly_fix.py
case_ tensorboard-too-old U5 15 "the incident-routing classifier with TensorBoard logging (TB=1) and PYTHONPATH naming a folder where a 2019 requirements pin installed tensorboard 1.14.0: importing torch.utils.tensorboard raises torch's 'TensorBoard logging requires TensorBoard version 1.15 or above'" -- env TB=1 PYTHONPATH=$W/pinned-site $PY prog/log_classifier.py
case_ dedup-scan-unblocked U3 20 "the memory-capped retrieval job with the scan's block size 0 read as 'all rows at once': one 196608 x 196608 float32 score matrix, torch.OutOfMemoryError 'Tried to allocate 144.00 GiB'" -- env SCAN_BLOCK=0 $PY prog/dedup_scan.py
case_ async-ckpt-fork O4 30 "training with asynchronous checkpoints: at step 100 a writer process is forked (fork start method) with the state dict of the model's CUDA tensors; torch.save in the child must copy them from the GPU and CUDA fails in the forked child (the writer's traceback, exit code 1); at step 200 the trainer raises 'async checkpoint writer for step 100 ... failed with exit code 1'" -- $PY prog/async_ckpt.py
finish_
