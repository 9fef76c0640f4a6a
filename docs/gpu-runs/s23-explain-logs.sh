#!/usr/bin/env bash
# A fifth set of real logs for `envbuild explain` (issue 25), on one lent GPU in one call, each case labelled by
# what it makes before explain sees it (written blind: the author read neither explain's code nor its knowledge, and
# did not run it on a GPU; copies made to run on the CPU of elastic_train, ckpt_barrier, ddp_unused, reward_server,
# flaky_loader, ckpt_resume, nan_guard, warn_storm, pg_cycles (gloo) and gloo2 ran as planned off-GPU with torch
# 2.13 CPU; eval_chunks, fragment_oom and the NCCL and memory paths were not tried anywhere).
# Its point is healthy runs that look like failures: runs that hit an error, handle it and finish (a checkpoint
# that does not load, DataLoader workers that raise, a worker SIGKILLed under torchrun --max-restarts,
# an eval that runs out of memory, NaN batches, a reward helper that segfaults, a store wait that times out) or print
# warnings that do not matter; beside them, faults made near them (the restart that fails again, the stale server
# left by the first attempt, the out-of-memory eval that gives up, the helper killed with no respawn, the rank that
# never reports). Programs in docs/gpu-runs/explain-progs/, harness in explain-logs-lib.sh; needs only python3 with
# torch. NVLink multicast stays off; nothing is mounted, no device node or /dev/shm is touched; the one detached
# process (a rollout server of case restart-stale-server, in a session of its own) exits by itself after 60 s and is
# ended by name with the case (the harness's pkill of prog/*.py).
#
#   run (repo root, $OUT set by the device tool):  bash docs/gpu-runs/s23-explain-logs.sh
#   result: $OUT/s23-explain-logs.tar.gz = s23-explain-logs/{gpu-s23-NN.log, cases.toml, summary.txt, node.txt}
set -u
RUN=s23
source "$(dirname "$0")/explain-logs-lib.sh"
PORT=29543
# torchrun restarts: each attempt's workers get a TCPStore of their own. With the agent's shared store (the default)
# a restarted gloo group read the first attempt's addresses and could not connect (torch 2.13 CPU, tried by the
# author off-GPU), which would make the healthy restart fail for a reason that is not its case's.
NS=TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1

# healthy runs: each prints errors, tracebacks or warnings it recovers from, then finishes with exit 0
case_ healthy-ckpt-fallback none 40 "resume: the newest checkpoint is truncated (PytorchStreamReader error, logged with its traceback), the next was saved from cuda:1 (RuntimeError, loaded again with map_location), then 10 steps and a save" -- $PY prog/ckpt_resume.py
case_ healthy-loader-restart none 45 "DataLoader workers raise OSError (EIO) on two samples; the loop logs the re-raised error with its traceback, drops the sample and starts a new loader, and finishes the epoch" -- $PY prog/flaky_loader.py
case_ healthy-torchrun-restart none 75 "torchrun --max-restarts 2, two DDP ranks (gloo): rank 1 is SIGKILLed at step 3 of the first attempt (exitcode -9), the group restarts, resumes from rank 0's checkpoint and finishes" -- env $NS DIE_ON=1 CKPT=elastic-ok.pt $TR --max-restarts 2 prog/elastic_train.py
case_ healthy-nccl-unclean-exit none 40 "one-rank NCCL with NCCL_DEBUG=INFO and NCCL_TOPO_FILE naming a file that is not there, init without device_id (torch's unknown-device warning at the barrier), exit without destroy_process_group (torch's warning)" -- env NCCL_DEBUG=INFO NCCL_TOPO_FILE=/opt/cluster/nccl-topo.xml NO_DEVICE_ID=1 NO_DESTROY=1 CYCLES=1 $PY prog/pg_cycles.py
case_ healthy-eval-oom-chunks none 45 "an eval of 512 K tokens x 128 K vocab runs out of memory in one batch (logged with the OutOfMemoryError traceback), then in halved chunks until they fit, and reports loss/ppl" -- $PY prog/eval_chunks.py
case_ healthy-nan-guard none 30 "3 of 60 batches hold NaN features; a guard skips the steps with non-finite loss and grad norm, the epoch completes" -- $PY prog/nan_guard.py
case_ healthy-reward-respawn none 45 "the RL loop's reward helper (spawn) segfaults in native code on batch 5 (faulthandler's 'Fatal Python error: Segmentation fault', exitcode -11); the trainer respawns it and finishes 12 iterations" -- env CRASH_ON=5 $PY prog/reward_server.py
case_ healthy-warning-storm none 45 "a fine-tune printing FutureWarning (torch.cuda.amp.GradScaler), 'newly initialized' heads, more DataLoader workers than CPUs, a broadcast mse_loss target, a tensor copy-construct, the scheduler stepped first; trains one epoch and saves" -- $PY prog/warn_storm.py
case_ healthy-pg-rebuild none 40 "a one-rank NCCL weight-sync group (NCCL_DEBUG=INFO) made, used and destroyed 4 times over fresh stores" -- env NCCL_DEBUG=INFO CYCLES=4 $PY prog/pg_cycles.py
case_ healthy-store-wait-retry none 50 "two ranks (gloo) save checkpoint shards; rank 1's takes 7 s, rank 0's 2 s store waits time out (DistStoreError, the first with its traceback) and are retried, then both train on" -- env SLOW=7 $TR prog/ckpt_barrier.py

# faults
case_ restart-bug-gives-up U2 60 "torchrun --max-restarts 1, two DDP ranks (gloo): rank 1 reads a config key that does not exist at step 3 (KeyError) in both attempts; torchrun gives up" -- env $NS BUG=1 CKPT=elastic-bug.pt $TR --max-restarts 1 prog/elastic_train.py
case_ restart-stale-server D7 75 "torchrun --max-restarts 1: rank 0 starts a detached rollout server taking 75 % of the GPU; rank 1 is SIGKILLed; the first attempt's server survives the restart, the second attempt's server runs out of memory (the old one still holds it) and the job gives up" -- env $NS DIE_ON=1 SERVER=1 SERVE_S=60 CKPT=elastic-srv.pt $TR --max-restarts 1 prog/elastic_train.py
case_ store-port-mismatch U2 40 "two gloo ranks launched by hand, rank 1 given MASTER_PORT one above the master's (a launch-config error): its connects are refused until the 10 s timeout, the master times out waiting for it" -- bash -c "export MASTER_ADDR=127.0.0.1 WORLD_SIZE=2 PG_TIMEOUT=10 MODE=ok; RANK=0 MASTER_PORT=$PORT $PY prog/gloo2.py & p=\$!; RANK=1 MASTER_PORT=$((PORT + 1)) $PY prog/gloo2.py; r=\$?; wait \$p; r0=\$?; exit \$(( r0 ? r0 : r ))"
case_ eval-oom-gives-up U3 45 "the chunked eval of 1 M tokens x 128 K vocab, at most 2 halvings: still out of memory at 256 K-token chunks, the OutOfMemoryError is re-raised" -- env EVAL_TOKENS=1048576 RETRIES=2 $PY prog/eval_chunks.py
case_ allocator-fragmentation U3 40 "6 MiB buffers fill 80 % of the free memory, two thirds are freed (each 20 MiB segment keeps one), then a workspace larger than the device's free memory but half the reserved-unallocated memory: out of memory" -- $PY prog/fragment_oom.py
case_ reward-worker-killed U6 45 "the RL loop's reward helper is SIGKILLed from outside 3 s into the run (as the kernel's OOM killer does); the trainer, with no respawn allowed, fails on the closed pipe" -- bash -c "rm -f reward.pid; PIDFILE=reward.pid RESPAWN=0 BATCHES=60 PAUSE=0.2 $PY prog/reward_server.py & p=\$!; for i in \$(seq 120); do [ -s reward.pid ] && break; sleep 0.25; done; sleep 3; kill -KILL \$(cat reward.pid); wait \$p"
case_ rank-hung-checkpoint U6 50 "two ranks (gloo): rank 1's checkpoint writer deadlocks on its own lock and never reports; rank 0's three 2 s store waits time out and it raises; torchrun ends rank 1" -- env HANG=1 RETRIES=3 $TR prog/ckpt_barrier.py
case_ ddp-unused-params U2 45 "two DDP ranks (gloo, TORCH_DISTRIBUTED_DEBUG=INFO: the error names the unused parameters) on an actor-critic whose critic head the loss never uses, without find_unused_parameters: the second forward raises" -- env TORCH_DISTRIBUTED_DEBUG=INFO $TR prog/ddp_unused.py
finish_
