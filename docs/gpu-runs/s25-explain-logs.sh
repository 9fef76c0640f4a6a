#!/usr/bin/env bash
# A seventh set of real logs for `envbuild explain` (issue 25), on one lent GPU in one call, each case labelled by
# what it makes before explain sees it (written blind: the author read neither explain's code nor its knowledge, and
# did not run it on a GPU; `bash -n`, `py_compile`, the two NVRTC kernels compiled for sm_90 with NVRTC 12.9
# off-GPU, and CPU copies run off-GPU with torch 2.14.1 (cuda calls replaced by cpu or stubbed): compile_buckets in
# both modes, tracker_offline, word_lm, finetune_head in both modes, kv_engine's scheduler in both modes (memory
# numbers stubbed), gpu_monitor with a stand-in nvidia-smi, loader_spawn's spawn path in both modes, dp_grid_sync's
# gloo flow with the kernel replaced by a sleep; each behaved as planned. Not tried anywhere: the fork-CUDA error of
# loader_spawn, kernel_autotune's launches, the NCCL, memory-fraction, holder and hang paths).
# Its point, like s23's and s24's, is healthy runs that look like failures, made other ways and ending other ways:
# torch.compile recompiling per bucket length until dynamo's recompile limit, then running eagerly (fairseq-style
# lines); an experiment tracker that refuses connections, the client going offline (a run-summary block); logging's
# '--- Logging error ---' tracebacks from a bad format string (word_language_model-style lines); a kernel autotuner
# whose refused configs come back as CUDA_ERROR_INVALID_VALUE (a results table); a paged-KV rollout engine that
# preempts and recomputes sequences when its pool is full (vLLM's preemption warning, a progress bar); a GPU monitor
# whose nvidia-smi query names an unknown field (timestamped lines); a fine-tune whose checkpoint head does not fit
# (size-mismatch traceback, loaded with strict=False, a metrics table); fork DataLoader workers that cannot use CUDA,
# rebuilt with spawn (silent until one summary line). Beside them, faults made near them or new on one GPU: the
# compile with fullgraph=True and a data-dependent check (U2); the fine-tune without the fallback (U2); the spawn
# fallback that cannot pickle a lambda (U2); DDP over NCCL without set_device, two ranks on one GPU (C11); a rank
# hung in a kernel whose software grid barrier needs more blocks than the GPU holds, its peer timing out (U6); a
# trainer capped by set_per_process_memory_fraction that runs out of its share (U3); the rollout engine finding the
# GPU held by a process left from an earlier run (D7); a flash-attn extension built against another torch,
# undefined symbol (C9); a pinned old Megatron-LM importing torch._six (U5).
# Programs in docs/gpu-runs/explain-progs/, harness in explain-logs-lib.sh; needs only python3 with torch (its NVRTC
# wheel for the two kernel cases) and, for the flash-attn case, a C compiler (skipped without one). NVLink multicast
# stays off; nothing is mounted, no device node or /dev/shm is touched; the one long-lived helper (the GPU holder of
# case kv-engine-stale-holder) sleeps at most 120 s and goes with its case's session; the hanging kernel of case
# rank-hung-grid-barrier gives up by itself after 40 s (its process is ended sooner by torchrun). No host is
# contacted: the tracker address is 127.0.0.1, where nothing listens.
#
#   run (repo root, $OUT set by the device tool):  bash docs/gpu-runs/s25-explain-logs.sh
#   result: $OUT/s25-explain-logs.tar.gz = s25-explain-logs/{gpu-s25-NN.log, cases.toml, summary.txt, node.txt}
set -u
RUN=s25
source "$(dirname "$0")/explain-logs-lib.sh"

# a pinned older Megatron-LM checkout (its optimizer helpers import torch._six, which torch 2.0 removed)
M=$W/megatron-lm-old/megatron
mkdir -p "$M/optimizer"
printf '"""Megatron-LM (pinned checkout)."""\n__version__ = "2.5"\n' > "$M/__init__.py"
cat > "$M/optimizer/__init__.py" <<'PY'
from .clip_grads import clip_grad_norm_fp32, count_zeros_fp32


def get_megatron_optimizer(model):
    raise NotImplementedError
PY
cat > "$M/optimizer/clip_grads.py" <<'PY'
"""Gradient clipping."""

import torch
from torch._six import inf

from apex.multi_tensor_apply import multi_tensor_applier
import amp_C
PY
# a flash-attn install whose extension was built against another torch (c10 symbols this torch does not export)
FA=$W/flash-attn-site; mkdir -p "$FA/flash_attn"
printf '__version__ = "2.7.4.post1"\n\nfrom flash_attn.flash_attn_interface import (\n    flash_attn_func,\n    flash_attn_varlen_func,\n)\n' > "$FA/flash_attn/__init__.py"
printf 'import torch\nimport torch.nn as nn\n\n# isort: off\n# We need to import the CUDA kernels after importing torch\nimport flash_attn_2_cuda as flash_attn_gpu\n\n\ndef flash_attn_func(*a, **k):\n    return flash_attn_gpu.fwd(*a, **k)\n\n\ndef flash_attn_varlen_func(*a, **k):\n    return flash_attn_gpu.varlen_fwd(*a, **k)\n' > "$FA/flash_attn/flash_attn_interface.py"
printf 'def unpad_input(*a, **k):\n    raise NotImplementedError\n' > "$FA/flash_attn/bert_padding.py"
cat > "$FA/fa.c" <<'C'
/* flash_attn_2_cuda, as built against torch 2.1 (c10::cuda::SetDevice(int); pre-C++11 std::string ABI) */
extern int _ZN3c104cuda9SetDeviceEi(int);
extern void _ZN3c105ErrorC2ENS_14SourceLocationESs(void *, void *, void *);
void *PyInit_flash_attn_2_cuda(void) {
  _ZN3c104cuda9SetDeviceEi(0);
  _ZN3c105ErrorC2ENS_14SourceLocationESs(0, 0, 0);
  return 0;
}
C
EXT=$($PY -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX") or ".so")')
CC=$(command -v cc || command -v gcc || true)
FA_OK=0
if [ -n "$CC" ] && "$CC" -shared -fPIC -o "$FA/flash_attn_2_cuda$EXT" "$FA/fa.c" 2>> "$W/node.txt"; then FA_OK=1; fi
echo "flash-attn stand-in built: $FA_OK ($CC, $EXT)" >> "$W/node.txt"

# healthy runs: each prints errors, tracebacks or warnings it recovers from, then finishes with exit 0
case_ healthy-compile-recompile-limit none 75 "torch.compile (aot_eager, dynamic=False, TORCH_LOGS=recompiles) of a small LM on 7 bucket lengths: each new length recompiles (guard-failure lines) until dynamo's recompile_limit of 4, then dynamo warns and runs those calls eagerly; 2 epochs of fairseq-style lines and 'done training'" -- env TORCH_LOGS=recompiles $PY prog/compile_buckets.py
case_ healthy-tracker-offline none 30 "metrics posted to an experiment tracker at 127.0.0.1 where nothing listens: ConnectionRefusedError logged with its traceback, 2 retries, offline mode to a local file; 300 steps; a final sync fails again and a run-history/summary block ends the run" -- $PY prog/tracker_offline.py
case_ healthy-logging-error none 40 "an LSTM language model (word_language_model-style lines, end-of-epoch and end-of-training blocks) whose grad-clip log call has one %-argument too few: Python logging prints '--- Logging error ---' with a TypeError traceback each time, and training goes on" -- $PY prog/word_lm.py
case_ healthy-kernel-autotune none 40 "a fused softmax kernel (NVRTC) autotuned at start-up: 2048-thread blocks and more dynamic shared memory than allowed come back as CUDA_ERROR_INVALID_VALUE from cuLaunchKernel/cuFuncSetAttribute, are logged and skipped (the 48 KiB opt-in retried); results tables, the winner checked against torch.softmax, tuning cache written" -- $PY prog/kernel_autotune.py
case_ healthy-kv-preemption none 40 "a paged-KV rollout engine with num_gpu_blocks_override=96: when the pool is full sequences are preempted and recomputed (vLLM's 'preempted by PreemptionMode.RECOMPUTE ... not enough KV cache space' warning); 32 prompts finish, a progress bar and the rollouts file" -- env NUM_GPU_BLOCKS=96 $PY prog/kv_engine.py
case_ healthy-gpu-monitor-field none 45 "training with a GPU monitor thread whose nvidia-smi query names an unknown field (memory.used_percent): nvidia-smi refuses it, the monitor logs the error and drops the field, then logs a line per second; timestamped step lines and 'Training finished'" -- $PY prog/gpu_monitor.py
case_ healthy-head-reinit none 35 "a fine-tune loads a 1000-class checkpoint into a 10-class model: the size-mismatch RuntimeError is logged with its traceback, the head's keys dropped and the rest loaded with strict=False (_IncompatibleKeys shown); 3 epochs in a metrics table, model exported" -- $PY prog/finetune_head.py
case_ healthy-loader-fork-to-spawn none 60 "a dataset augmenting on the GPU read by fork DataLoader workers after the model is on the GPU: 'Cannot re-initialize CUDA in forked subprocess' (logged with the traceback), the loader rebuilt with spawn workers; silent training, one summary line" -- $PY prog/loader_spawn.py

# faults
case_ compile-fullgraph-break U2 45 "the same LM compiled with fullgraph=True and a debug check in forward that raises on non-finite activations (data-dependent control flow): dynamo cannot capture one graph and the first call raises" -- env FULLGRAPH=1 NAN_CHECK=1 $PY prog/compile_buckets.py
case_ finetune-head-strict U2 30 "the fine-tune without the fallback: load_state_dict(strict=True) of the 1000-class checkpoint into the 10-class model raises the size mismatch" -- env STRICT=1 $PY prog/finetune_head.py
case_ loader-spawn-unpicklable U2 45 "the GPU-augmenting dataset with a per-run transform written as a lambda inside main(): the fork workers fail on CUDA (handled), the spawn rebuild cannot pickle the lambda and the run fails" -- env TRANSFORM=lambda $PY prog/loader_spawn.py
case_ ddp-nccl-no-set-device C11 50 "DDP over NCCL under torchrun with 2 ranks, the script never calls torch.cuda.set_device(LOCAL_RANK): both ranks on cuda:0, NCCL's 'Duplicate GPU detected' (invalid usage) in DDP's first collective" -- env NCCL_DEBUG=WARN $TR prog/ddp_nccl_noset.py
case_ rank-hung-grid-barrier U6 75 "data parallelism by hand (gloo, 2 ranks under torchrun); from step 3 rank 1 gets long batches and its custom kernel's grid (sized from the batch) has more blocks than the GPU can hold, so its software grid barrier never completes and rank 1 hangs in the kernel; rank 0 times out in all_reduce after 12 s" -- env LONG_AT=3 PG_TIMEOUT=12 SPIN_S=40 $TR prog/dp_grid_sync.py
case_ trainer-budget-oom U3 40 "a trainer colocated with a rollout engine caps itself to 10 GiB with set_per_process_memory_fraction; a 1.07 B-parameter fp32 model with AdamW needs 16 GiB: torch.OutOfMemoryError in the first optimizer step" -- $PY prog/oom_budget.py
case_ kv-engine-stale-holder D7 60 "a process left from an earlier run (started beforehand, its output not in the log) holds 92 % of the GPU's free memory; the rollout engine's memory profile finds the KV cache budget negative and raises 'No available memory for the cache blocks'" -- bash -c "rm -f held.txt; $PY prog/hold_gpu.py 0.92 120 > held.txt 2>&1 & for i in \$(seq 160); do [ -s held.txt ] && break; sleep 0.25; done; $PY prog/kv_engine.py"
if [ "$FA_OK" = 1 ]; then
  case_ flash-attn-abi-mismatch C9 30 "packed-sequence SFT importing flash-attn (no fallback) whose flash_attn_2_cuda extension was built against another torch: ImportError 'undefined symbol' for a c10 symbol (a stand-in extension compiled here that references c10::cuda::SetDevice(int) and the pre-C++11-ABI c10::Error constructor)" -- env PYTHONPATH=$FA $PY prog/packed_sft.py
else
  echo "flash-attn-abi-mismatch: not run, no C compiler to build the extension" | tee -a "$W/summary.txt"
fi
case_ old-megatron-torch-six U5 30 "GPT pretraining with a pinned older Megatron-LM checkout on PYTHONPATH whose clip_grads.py imports torch._six (removed in torch 2.0): ModuleNotFoundError when the optimizer is set up" -- env PYTHONPATH=$W/megatron-lm-old MEGATRON_PATH=$W/megatron-lm-old $PY prog/old_megatron.py
finish_
