#!/usr/bin/env bash
# A sixth set of real logs for `envbuild explain` (issue 25), on one lent GPU in one call, each case labelled by
# what it makes before explain sees it (written blind: the author read neither explain's code nor its knowledge, and
# did not run it on a GPU or anywhere else; `bash -n` and `py_compile` only).
# Its point, like s23's, is healthy runs that look like failures, made other ways and ending other ways: a
# Megatron-style run that finds no checkpoint and skips overflowing fp16 iterations; missing optional kernels
# (flash_attn, apex, Transformer Engine: ImportError tracebacks) with an eager-attention fallback and a tqdm-style
# bar; DDP on uneven data finished with join() and find_unused_parameters warnings, a JSON line per step; an eval
# worker process that crashes (FileNotFoundError) while training goes on, a metrics table; a stall watchdog whose
# faulthandler dumps every thread's stack while a data read blocks, Trainer-style dict lines; an on-demand
# checkpoint asked for with SIGUSR1, silence until a summary; checkpoints that do not fit node-local scratch
# (No space left on device, traceback) written to a fallback, Lightning-style; a prolog dumping nvidia-smi's ECC,
# row-remapper and clock-event sections and the kernel log before a Keras-style run. Beside them, faults made near
# them: the eager attention at 64 K tokens (U3), the eval worker pinned to a GPU UUID the node does not have (C11),
# a DDP rank building another model size (U2), a NaN guard that gives up (U2), a rank SIGKILLed in every torchrun
# attempt (U6), a DataLoader worker SIGKILLed from outside (U6), NCCL_SOCKET_IFNAME naming no interface (U4), a
# rendezvous host that never answers (U4), a checkpoint that torch 2.6+'s weights_only load refuses (U5).
# Programs in docs/gpu-runs/explain-progs/, harness in explain-logs-lib.sh; needs only python3 with torch.
# NVLink multicast stays off; the one mount (a 1 MiB tmpfs over the case's own scratch folder) is made in a private
# mount namespace (unshare -m); /dev/shm and device nodes are not touched; nothing is left running (the harness
# kills each case's session and the programs by name). No host is contacted: the unreachable rendezvous host is
# 192.0.2.10 (TEST-NET-1, RFC 5737, held by no host), and every other connection stays on the node.
#
#   run (repo root, $OUT set by the device tool):  bash docs/gpu-runs/s24-explain-logs.sh
#   result: $OUT/s24-explain-logs.tar.gz = s24-explain-logs/{gpu-s24-NN.log, cases.toml, summary.txt, node.txt}
set -u
RUN=s24
source "$(dirname "$0")/explain-logs-lib.sh"
# torchrun restarts: each attempt's workers get a TCPStore of their own (see s23-explain-logs.sh)
NS=TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
IFBAD=ib9  # an interface name this node does not have, for NCCL_SOCKET_IFNAME (exact match with "=")
for i in ib0 ibp12s0 bond0 ens1f0np0; do [ -e "/sys/class/net/$i" ] || { IFBAD=$i; break; }; done

# healthy runs: each prints errors, tracebacks, stack dumps or warnings it recovers from, then finishes with exit 0
case_ healthy-megatron-fresh-start none 35 "Megatron-style GPT pretraining on one GPU: no checkpoint tracker file (Megatron's 'could not find the metadata file ... will start from random'), fp16 loss scale from 2**32 so the first iterations overflow and are counted as skipped, 60 iterations, validation, checkpoint saved" -- $PY prog/megatron_like.py
case_ healthy-optional-kernels-missing none 35 "a small causal LM tries flash_attn (ImportError logged with its traceback), apex and Transformer Engine (missing, warnings), falls back to eager attention and torch's fused AdamW, trains 30 steps at 2 K tokens with a tqdm-style bar and saves the model" -- $PY prog/attn_lm.py
case_ healthy-ddp-join-jsonl none 40 "two DDP ranks (gloo, TORCH_DISTRIBUTED_DEBUG=INFO, TORCH_CPP_LOG_LEVEL=INFO), rank 1 with 5 batches fewer finishes through DDP's join(); find_unused_parameters=True with none unused (DDP may warn about it); a JSON line per step and a final summary" -- env TORCH_DISTRIBUTED_DEBUG=INFO TORCH_CPP_LOG_LEVEL=INFO $TR prog/ddp_json.py
case_ healthy-eval-worker-fails none 50 "training prints a metrics table and runs an eval worker process every 20 steps; the worker scores one benchmark, then crashes on a missing benchmark file (FileNotFoundError traceback, exit 1); the trainer warns and trains on to step 40 and saves" -- env BENCH=heldout,gsm8k STEPS=40 EVAL_EVERY=20 $PY prog/eval_worker.py
case_ healthy-stall-watchdog none 30 "a Trainer-style loop with a stall watchdog: one data read blocks 7 s, faulthandler dumps every thread's stack ('Timeout (0:00:03)!'), the step completes and the run ends with its train_runtime summary" -- $PY prog/stall_watchdog.py
case_ healthy-ondemand-checkpoint none 30 "a quiet training loop gets SIGUSR1 twice from outside (an on-demand checkpoint request), saves a checkpoint each time and trains on; one summary line at the end" -- bash -c "rm -f ready.pid; READY=ready.pid $PY prog/ondemand_ckpt.py & p=\$!; for i in \$(seq 150); do [ -s ready.pid ] && break; sleep 0.2; done; sleep 1; kill -USR1 \$(cat ready.pid); sleep 2; kill -USR1 \$(cat ready.pid); wait \$p"
case_ healthy-scratch-full-fallback none 30 "a Lightning-style fit whose per-epoch checkpoints do not fit node-local scratch (a 1 MiB tmpfs in a private mount namespace): 'No space left on device'/PytorchStreamWriter errors logged with tracebacks, each checkpoint written to a fallback folder, 3 epochs, '\`Trainer.fit\` stopped'" -- unshare -m --propagation private bash -c "mkdir -p scratch && mount -t tmpfs -o size=1m tmpfs scratch && $PY prog/lit_scratch.py"
case_ healthy-health-prolog none 40 "a job prolog dumps nvidia-smi -q's ECC, page-retirement, row-remapper and performance (clock event reasons) sections and any Xid lines of the kernel log, then a Keras-style classifier trains 3 epochs from 4 DataLoader workers" -- bash -c "nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE; { dmesg 2>&1 || true; } | grep -iE 'xid|not permitted' | tail -5; $PY prog/keras_like.py"

# faults
case_ eager-attention-oom U3 30 "the same LM with attn_implementation=eager at 64 K tokens, 32 heads: the (batch, heads, seq, seq) score matrix needs 256 GiB, torch.OutOfMemoryError" -- env ATTN_IMPL=eager SEQ=65536 BATCH=1 HEADS=32 STEPS=5 $PY prog/attn_lm.py
case_ eval-worker-wrong-gpu C11 40 "the trainer with the eval worker pinned by CUDA_VISIBLE_DEVICES to a GPU UUID this node does not have (left in the job config from another node), eval required: the worker sees no GPU, the trainer raises" -- env EVAL_CVD=GPU-5f2c7e1a-0b3d-4c8e-9a61-3e2f1d0c9b87 REQUIRE_EVAL=1 BENCH=heldout STEPS=40 EVAL_EVERY=20 $PY prog/eval_worker.py
case_ ddp-model-mismatch U2 40 "two DDP ranks (gloo), rank 1 builds the model with hidden size 1536 instead of 1024 (it read another config): DDP's parameter-shape check across ranks raises in the constructor" -- env RANK1_HIDDEN=1536 $TR prog/ddp_json.py
case_ nan-guard-gives-up U2 25 "the non-finite-loss guard with every batch from step 20 on holding NaN features (a corrupted shard): 5 skipped steps, then the guard raises" -- env NAN_BATCHES=$(seq -s, 20 59) MAX_SKIPS=5 $PY prog/nan_guard.py
case_ restart-killed-every-attempt U6 85 "torchrun --max-restarts 2, two DDP ranks (gloo): rank 1 is SIGKILLed at step 3 in all three attempts (as the kernel's OOM killer does); torchrun gives up with exitcode -9" -- env $NS DIE_ON=9 CKPT=elastic-kill.pt $TR --max-restarts 2 prog/elastic_train.py
case_ loader-worker-killed U6 35 "the Keras-style run with 4 DataLoader workers; one worker is SIGKILLed from outside 3 s in (as the kernel's OOM killer does): the main process fails on the dead worker" -- bash -c "rm -f workers.pid; PIDFILE=workers.pid DECODE_MS=2 $PY prog/keras_like.py & p=\$!; for i in \$(seq 160); do [ -s workers.pid ] && break; sleep 0.25; done; sleep 3; kill -KILL \$(head -1 workers.pid); wait \$p"
case_ nccl-ifname-missing U4 30 "one-rank NCCL group (NCCL_DEBUG=INFO) with NCCL_SOCKET_IFNAME==$IFBAD, an interface this node does not have (a cluster's setting carried to another node): NCCL's bootstrap finds no socket interface" -- env NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME="=$IFBAD" $PY prog/pg1.py
case_ rendezvous-unreachable U4 35 "a worker (rank 1 of 2) retries the rendezvous store at 192.0.2.10:29544 (a head node it cannot reach) 3 times with 3 s timeouts, then gives up" -- env MASTER_ADDR=192.0.2.10 MASTER_PORT=29544 ATTEMPTS=3 TRY_S=3 $PY prog/rdzv_retry.py
case_ ckpt-weights-only U5 25 "fine-tuning loads a pretraining checkpoint holding an argparse.Namespace with a plain torch.load, code written before torch 2.6 made weights_only=True the default: UnpicklingError 'Weights only load failed'" -- $PY prog/ckpt_legacy.py
finish_
