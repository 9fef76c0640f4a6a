#!/usr/bin/env bash
# A tenth set of real logs for `envbuild explain` (issue 25), on one lent GPU in one call, each case labelled by
# what it makes before explain sees it. Written blind: the author read neither explain's code nor its knowledge nor
# the corpus, and did not run anything on a GPU. Smaller than the earlier sets (11 cases, not 16-18): the set was
# written in a 45-minute slot and only cases whose flow could be checked off-GPU were kept.
# Checked off-GPU (CPU torch 2.13.0 wheel, Python 3.11, 2 CPUs, no GPU; DEVICE=cpu where a program has that knob):
# `bash -n`; `py_compile` of every new program with Python 3.11 and 3.12; drv_report against two stand-in
# libcuda.so.1 built with gcc (one answering like a driver and refusing attribute ids >= 190 with
# CUDA_ERROR_INVALID_VALUE, one returning 34 from every call like the toolkit's stub): the attribute warnings and the
# report table (exit 0), and with LIBCUDA naming the stand-in stub "cuInit(0) returned 34 (CUDA_ERROR_STUB_LIBRARY)"
# (exit 1); that a library loaded by path whose SONAME is libcuda.so.1 is what a later dlopen("libcuda.so.1") gets
# (the stand-in stub answered 34 through the soname, with the "real" stand-in first on LD_LIBRARY_PATH);
# inplace_act in both modes (autograd's "modified by an inplace operation ... output 0 of Sigmoid" logged, out-of-place
# fallback, checkpoint saved; re-raised with INPLACE_FALLBACK=0); gen_server with SERVER=threading and forking (on
# the CPU both serve: 40 x 200, 4 x 400 with their tracebacks, 1 x 503 from a CPU stand-in for the OOM, a latency
# table); shm_ring plainly (the eval helper's resource tracker "leaked shared_memory objects" warning, the trainer's
# FileNotFoundError warning at unlink, exit 0) and under removeipc.sh (the eval helper's FileNotFoundError, the
# trainer's "eval hook ... failed with exit code 1"); store_eval plainly (DistStoreError "wait timeout after 1000ms"
# warnings with tracebacks, a score table, exit 0) and under killhost.sh (DistNetworkError "Failed to recv, got 0
# bytes ... Did the remote server shutdown or crash?" in the evaluator, exit 137); the whole script once under a
# stand-in harness run (the CPU torch, DEVICE=cpu, a stand-in nvidia-smi) for its plumbing.
# Not tried anywhere: anything on a GPU -- the real driver's answers to the attribute ids (expected
# CUDA_ERROR_INVALID_VALUE for ids it does not know), torch's CUDA start on the toolkit's real stub (expected error 34
# "CUDA driver is a stub library" or "Found no NVIDIA driver" from torch), the memory cap with
# set_per_process_memory_fraction(fraction, 0), the oversized batch's real OOM under it (about 4 + 7.4 GiB on top of
# the 6 GiB pool), the 24 GiB pool over the 16 GiB cap, CUDA in a ForkingMixIn child (expected torch's "Cannot
# re-initialize CUDA in forked subprocess"), and every timing.
# Healthy runs that look like failures, each ending its own way: a node prolog's driver-attribute report with
# CUDA_ERROR_INVALID_VALUE warnings for ids from a newer header (a report table, "node accepted"); a gated MLP whose
# in-place activations autograd refuses (ERROR with the traceback, fallback, "checkpoint saved"); a generation server
# whose load test sends malformed, too-long and oversized requests (400s with tracebacks, a caught CUDA OOM answered
# 503, a latency table, "shutdown complete"); a trainer fed through a /dev/shm ring whose eval helper's resource
# tracker reports a leaked segment and unlinks it (UserWarnings, FileNotFoundError at the end, "weights saved"); a
# trainer publishing versions through a TCPStore to an evaluator that logs DistStoreError timeouts with tracebacks
# while it waits (a score table, "best version ... kept"). Faults, one thing changed: LIBCUDA naming the toolkit's
# stub libcuda (a build-time setting; the program loads it by path, and its SONAME libcuda.so.1 then serves torch's
# own dlopen) (C7); the in-place fallback off (U2); the server's KV pool set to 24 GiB under its 16 GiB cap (U3); the
# server switched to a forking server, a child per request using the parent's CUDA model (O4); the ring's
# /dev/shm file removed from outside 1 s after the producers attached, as systemd-logind's RemoveIPC does when the
# user's last session ends, so the eval helper cannot attach (O1); the trainer that hosts the store SIGKILLed
# from outside 7 s in, the evaluator failing after it (U6).
# Programs in docs/gpu-runs/explain-progs/ (drv_report, inplace_act, gen_server, shm_ring, store_eval), harness in
# explain-logs-lib.sh; needs only python3 with torch. No NCCL communicator is made; NVLink multicast stays off
# (cuDeviceGetAttribute reads MULTICAST_SUPPORTED, nothing is created); nothing is mounted, no device node or
# /dev/shm size is touched; /dev/shm holds at most the ring's 32 MiB; no host is contacted (the server, the
# TCPStore and the load test stay on 127.0.0.1). Background processes: shm_ring's producers (spawned, stopped by the
# trainer or killed with the case), the eval helper and the evaluator (ended with their trainer or, after the
# kill, by their own error; the harness kills them by name). GPU memory: at most the server's 16 GiB cap; the rest
# well under 2 GiB. Case timeouts add up to 360 s.
#
#   run (repo root, $OUT set by the device tool):  bash docs/gpu-runs/s28-explain-logs.sh
#   result: $OUT/s28-explain-logs.tar.gz = s28-explain-logs/{gpu-s28-NN.log, cases.toml, summary.txt, node.txt}
set -u
RUN=s28
source "$(dirname "$0")/explain-logs-lib.sh"

# the session clean-up of systemd-logind with RemoveIPC=yes, as it acts when the submitting user's last login
# session closes: the user's POSIX shared-memory files go (here only this job's ring, 1 s after it is ready)
cat > "$W/removeipc.sh" <<'SH'
rm -f ring.ready
"$@" & job=$!
for i in $(seq 300); do [ -s ring.ready ] && break; sleep 0.2; done
sleep 1
rm -f /dev/shm/"$(cat ring.ready)"
wait $job
SH

# the trainer SIGKILLed from outside KILL_AFTER s after it starts (as the kernel's OOM killer or a node agent
# would); the evaluator it started is left to fail on its own (waited for up to 20 s)
cat > "$W/killhost.sh" <<'SH'
rm -f trainer.pid
"$@" & job=$!
for i in $(seq 300); do [ -s trainer.pid ] && break; sleep 0.2; done
sleep "${KILL_AFTER:-7}"
kill -9 "$(cat trainer.pid)"
wait $job; rc=$?
for i in $(seq 100); do pgrep -f "store_eval.py --eval" > /dev/null || break; sleep 0.2; done
exit $rc
SH

# healthy runs: each prints errors, tracebacks, warnings or error text that it recovers from, then exits 0
case_ healthy-driver-attr-probe none 20 "a node prolog reads device attributes through the driver API (ctypes on libcuda.so.1): ids from a newer cuda.h (190, 191, 205) are refused with CUDA_ERROR_INVALID_VALUE and logged as WARNING lines, then a bf16 GEMM timing with torch; a node report table and 'node accepted'" -- $PY prog/drv_report.py
case_ healthy-inplace-act-fallback none 30 "a gated MLP with memory-saving in-place activations (sigmoid_ then mul_): the first backward raises 'one of the variables needed for gradient computation has been modified by an inplace operation' (ERROR with the traceback), the blocks are rebuilt out-of-place and the step redone, 300 steps and 'checkpoint saved: ckpt/... sha256 ...'" -- $PY prog/inplace_act.py
case_ healthy-server-bad-requests none 40 "a generation server on 127.0.0.1 (16 GiB cap, 6 GiB KV pool) and its load test: a malformed JSON body, a body without a prompt and two too-long prompts answered 400 with their tracebacks, an oversized batch (512 x 1900 tokens) running out of memory under the cap answered 503 (torch.OutOfMemoryError traceback, cache emptied), 40 requests served; a latency table and 'shutdown complete'" -- $PY prog/gen_server.py
case_ healthy-shm-ring-tracker-warning none 40 "a trainer fed through a ring of batch slots in /dev/shm by two spawned producers; the mid-run eval helper (a separate python attaching by name) exits and its resource tracker warns 'There appear to be 1 leaked shared_memory objects to clean up at shutdown' and unlinks the ring; the trainer trains on, logs FileNotFoundError when it unlinks the ring, prints an eval table and 'weights saved to ring_head.pt' (more resource_tracker UserWarnings at exit)" -- $PY prog/shm_ring.py
case_ healthy-store-eval-timeouts none 45 "a trainer publishing 8 weight versions (one every 2.5 s) through a TCPStore it hosts on 127.0.0.1 and an evaluator that waits for each with a 1 s timeout: c10d socket.cpp 'timed out after 1000ms' warnings and DistStoreError 'wait timeout after 1000ms, keys: /w/N' logged with tracebacks while it waits, every version scored; a score table and 'best version N ... kept as best.pt'" -- $PY prog/store_eval.py

# faults
if [ -n "$STUB" ]; then
  case_ prolog-libcuda-stub-path C7 20 "the node prolog with LIBCUDA=$STUB (a build container's setting): the program loads the toolkit's stub libcuda by path (cuInit 34, CUDA_ERROR_STUB_LIBRARY) and, its SONAME being libcuda.so.1, torch's CUDA start gets the stub too; the GEMM fails and the report is incomplete" -- env LIBCUDA="$STUB" $PY prog/drv_report.py
fi
case_ inplace-act-no-fallback U2 20 "the gated MLP with the fallback off (INPLACE_FALLBACK=0): autograd's 'modified by an inplace operation ... output 0 of Sigmoid' ends the run at step 0 (the code's in-place sigmoid_ and mul_)" -- env INPLACE_FALLBACK=0 $PY prog/inplace_act.py
case_ server-kv-over-cap U3 25 "the generation server with its KV pool set to 24 GiB (KV_GB=24) under its 16 GiB per-process cap: torch.OutOfMemoryError while preallocating the pool, the server never starts" -- env KV_GB=24 $PY prog/gen_server.py
case_ server-forking-cuda O4 40 "the generation server switched to a forking server (SERVER=forking: socketserver.ForkingMixIn, a child per request) after the model was moved to the GPU: each child's first CUDA use fails (expected \"Cannot re-initialize CUDA in forked subprocess\"), 500s with tracebacks for every generate request, 'server unhealthy: no request succeeded'" -- env SERVER=forking $PY prog/gen_server.py
case_ shm-ring-removeipc O1 40 "the /dev/shm ring trainer whose ring file is removed from outside 1 s after both producers attached (what systemd-logind's RemoveIPC=yes does to a user's POSIX shared memory when the last session closes; nothing in the log says so): the mid-run eval helper cannot attach, FileNotFoundError: [Errno 2] No such file or directory: '/s28ring_N', the trainer raises 'eval hook for step N failed with exit code 1'" -- bash removeipc.sh $PY prog/shm_ring.py
case_ store-host-killed U6 40 "the trainer that hosts the TCPStore SIGKILLed from outside 7 s in (nothing in the log says so); the evaluator waiting for the next version gets DistNetworkError 'Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?' and logs 'lost the trainer's store'; exit 137" -- env KILL_AFTER=7 bash killhost.sh $PY prog/store_eval.py
finish_
