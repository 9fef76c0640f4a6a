#!/usr/bin/env bash
# An eighth set of real logs for `envbuild explain` (issue 25), on one lent GPU in one call, each case labelled by
# what it makes before explain sees it. Written blind: the author read neither explain's code nor its knowledge nor
# the corpus, and did not run anything on a GPU. Checked off-GPU (torch 2.14.1 cu130 wheel on a machine without a
# GPU, Python 3.11, gloo, DEVICE=cpu where a program has that knob; this script's setup run with a stand-in harness):
# `bash -n`; `py_compile` of every program; elastic_fetch under torchrun in its three modes (the restart resumed
# and finished with exit 0; the FIFO read hung rank 1 and rank 0's gloo recv timed out, exit 1; the rank-0-only
# eval hit gloo's "op.preamble.length <= op.nbytes ... Is there a distributed collective mismatch", exit 1);
# longseq_train's split and no-split paths (a raised OutOfMemoryError standing in for the GPU's); hf_resume in
# its three modes (numpy's stand-in failed `import torch` itself: torch.storage imports numpy); deprec_flood
# (use_reentrant still only warned on 2.14); prolog_job with the prolog, under `ulimit -f 20480` (OSError
# [Errno 27] File too large, then PytorchStreamWriter's "unexpected pos") and with CUDA_VISIBLE_DEVICES empty (on
# the CPU copy only the report: no GPU to hide); exit_leaks (a sink kept in a module global was never collected
# with torch loaded, so the sink lives in main()); sdpa_probe's math path and its FUSED_LN import of the apex
# stand-in (ImportError: libcudart.so.12: cannot open shared object file); the Triton kernel compiled offline for
# sm_90 with Triton 3.8 (BLOCK=5120: CompilationError "arange's range must be a power of 2"; 4096 and 8192 built).
# Not tried anywhere: anything on a GPU (the real OOM and memory summary, the flash/efficient SDPA probe, Triton's
# launcher build and launches, CUDA_VISIBLE_DEVICES='' under a driver, the driver-API copy from a thread without a
# current context, gloo with CUDA tensors, every timing).
# Its point, like s23-s25's, is healthy runs that look like failures, made in ways not used before: a torchrun job
# whose rank raises ConnectionResetError -> RuntimeError on a shard fetch and is restarted once by design; a
# length-bucketed LM whose one long batch runs out of memory mid-run (OutOfMemoryError traceback, the allocator's
# memory summary) and is redone as micro-batches; a Trainer-style resume whose checkpoint has no optimizer,
# scheduler or RNG state (FileNotFoundError traceback, fresh states); a torch-1.x script flooding deprecation
# warnings (old TF32 flags, torch.cuda.amp, sdp_kernel, checkpoint without use_reentrant, get_lr, non-leaf .grad);
# a job prolog printing ulimit -a, nvidia-smi -L/topo, ldconfig's libcuda, the CUDA stubs and cuda-compat folders
# and the CUDA_*/NCCL_*/LIBRARY_PATH environment (stubs on LIBRARY_PATH, the link-time path, harmless); a Triton
# kernel warm-up whose tuning table asks for a non-power-of-two block (CompilationError traceback) and recompiles;
# a run that ends with a resource_tracker leaked-shared_memory warning and "Exception ignored in ... __del__"; an
# attention-backend probe whose flash-with-fp32 try raises "No available kernel. Aborting execution." (C++ stack
# frames shown) before bf16 flash is chosen. Beside them, faults made with the same programs, one thing changed:
# rank 1's shard read blocks on a named pipe, rank 0 times out (U6); rank 0 alone calls an eval that all_reduces
# (U1); the long batch without the micro-batch fallback (U3); the resume with an optimizer state of two param groups
# for a one-group optimizer (U2); PYTHONPATH naming a Python 3.10 env's site-packages whose numpy cannot import its
# C extension (U5); the prolog's CUDA_VISIBLE_DEVICES empty (C11); the prolog's `ulimit -f` 20 MiB under 200 MiB
# checkpoints (O2); the driver-API staging moved to a thread with no current context (O4); apex's fused layer norm
# extension built against a CUDA 12 torch, needing libcudart.so.12 (C9).
# Programs in docs/gpu-runs/explain-progs/, harness in explain-logs-lib.sh; needs python3 with torch (its Triton for
# the warm-up, which falls back to PyTorch without it) and, for the apex case, a C compiler (skipped without one).
# NVLink multicast stays off; no NCCL communicator is made; nothing is mounted, no device node or /dev/shm size is
# touched (exit_leaks makes one 1 MiB shared-memory segment, removed by the resource tracker at exit); no host is
# contacted (torchrun's store and gloo stay on 127.0.0.1; the shard server URL is only printed). The one process that
# can block (rank 1 of rank-hung-shard-read, in open() of a FIFO) ends itself with SIGALRM after 60 s and is ended
# sooner by torchrun and by the harness. GPU memory: at most about 20 GiB (the micro-batches of longseq_train; its
# 256 GiB request fails at once). Case timeouts add up to 420 s.
#
#   run (repo root, $OUT set by the device tool):  bash docs/gpu-runs/s26-explain-logs.sh
#   result: $OUT/s26-explain-logs.tar.gz = s26-explain-logs/{gpu-s26-NN.log, cases.toml, summary.txt, node.txt}
set -u
RUN=s26
source "$(dirname "$0")/explain-logs-lib.sh"
NS=TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1  # torchrun restarts: each attempt's workers get a store of their own (s23)

# the job prolog of the three prolog cases (cwd $W); the job's command follows it
cat > "$W/prolog.sh" <<'SH'
echo "=== job prolog on $(hostname) at $(date -u +%FT%TZ)"
echo "--- limits"; ulimit -a
echo "--- GPUs"; nvidia-smi -L; nvidia-smi topo -m
echo "--- driver and CUDA libraries"
ldconfig -p | grep -E 'libcuda\.so|libnvidia-ml\.so'
ls -d /usr/local/cuda/lib64/stubs /usr/local/cuda*/compat 2>/dev/null
echo "--- environment"; env | grep -E '^(CUDA_|NCCL_|LD_LIBRARY_PATH=|LIBRARY_PATH=)' | sort
echo "=== prolog done, starting: $*"
exec "$@"
SH
JOBENV="LIBRARY_PATH=/usr/local/cuda/lib64/stubs NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=WARN CUDA_DEVICE_MAX_CONNECTIONS=1 CUDA_MODULE_LOADING=LAZY"

# a numpy installed for Python 3.10 (a conda env's site-packages, left on PYTHONPATH): its C extension is a
# cpython-310 module, which this Python does not load, so numpy's own import-error message comes up
NP=$W/conda-py310/lib/python3.10/site-packages/numpy
mkdir -p "$NP/core"
printf 'version = "1.26.4"\n__version__ = version\nfull_version = version\n' > "$NP/version.py"
cat > "$NP/__init__.py" <<'PY'
"""
NumPy
=====

Provides
  1. An array object of arbitrary homogeneous items
  2. Fast mathematical operations over arrays
"""
from .version import version as __version__

from . import core
from .core import *
PY
cat > "$NP/core/__init__.py" <<'PY'
"""
Contains the core of NumPy: ndarray, ufuncs, dtypes, etc.
"""
from numpy.version import version as __version__

import os
import warnings

env_added = []
for envkey in ['OPENBLAS_MAIN_FREE', 'GOTOBLAS_MAIN_FREE']:
    if envkey not in os.environ:
        os.environ[envkey] = '1'
        env_added.append(envkey)

try:
    from . import multiarray
except ImportError as exc:
    import sys
    msg = """

IMPORTANT: PLEASE READ THIS FOR ADVICE ON HOW TO SOLVE THIS ISSUE!

Importing the numpy C-extensions failed. This error can happen for
many reasons, often due to issues with your setup or how NumPy was
installed.

We have compiled some common reasons and troubleshooting tips at:

    https://numpy.org/devdocs/user/troubleshooting-importerror.html

Please note and check the following:

  * The Python version is: Python%d.%d from "%s"
  * The NumPy version is: "%s"

and make sure that they are the versions you expect.
Please carefully study the documentation linked above for further help.

Original error was: %s
""" % (sys.version_info[0], sys.version_info[1], sys.executable,
        __version__, exc)
    raise ImportError(msg)
finally:
    for envkey in env_added:
        del os.environ[envkey]
del envkey
del env_added
del os
PY
printf 'from . import overrides\nfrom . import _multiarray_umath\nfrom ._multiarray_umath import *\n' > "$NP/core/multiarray.py"
printf 'import collections\nimport functools\n\nfrom numpy.core._multiarray_umath import (\n    add_docstring,  _get_implementing_args, _ArrayFunctionDispatcher)\n' > "$NP/core/overrides.py"
: > "$NP/core/_multiarray_umath.cpython-310-x86_64-linux-gnu.so"  # the py310 build (empty here; never loaded)

# apex built from source against a torch for CUDA 12: fused_layer_norm_cuda needs libcudart.so.12, which this
# torch (CUDA 13) does not ship; the stand-in extension is linked here against a throw-away libcudart.so.12
AP=$W/apex-site
mkdir -p "$AP/apex/normalization" "$W/cudart12"
printf '__version__ = "0.1"\n' > "$AP/apex/__init__.py"
printf 'from .fused_layer_norm import FusedLayerNorm, MixedFusedLayerNorm, FusedRMSNorm, MixedFusedRMSNorm\n' \
  > "$AP/apex/normalization/__init__.py"
cat > "$AP/apex/normalization/fused_layer_norm.py" <<'PY'
import importlib
import numbers

import torch
from torch.nn import init
from torch.nn.parameter import Parameter

global fused_layer_norm_cuda
fused_layer_norm_cuda = None


class FusedLayerNorm(torch.nn.Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True):
        super().__init__()

        global fused_layer_norm_cuda
        fused_layer_norm_cuda = importlib.import_module("fused_layer_norm_cuda")

        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = torch.Size(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if self.elementwise_affine:
            self.weight = Parameter(torch.empty(*normalized_shape))
            self.bias = Parameter(torch.empty(*normalized_shape))
            init.ones_(self.weight)
            init.zeros_(self.bias)


MixedFusedLayerNorm = FusedRMSNorm = MixedFusedRMSNorm = FusedLayerNorm
PY
printf 'int cudaGetDevice(int *d) { *d = 0; return 0; }\n' > "$W/cudart12/cudart.c"
printf 'extern int cudaGetDevice(int *);\nvoid *PyInit_fused_layer_norm_cuda(void) { int d; cudaGetDevice(&d); return 0; }\n' > "$AP/fln.c"
EXT=$($PY -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX") or ".so")')
CC=$(command -v cc || command -v gcc || true)
SONAME=libcudart.so.12  # unless this node's loader finds one (then the CUDA 11 soname, which it surely lacks)
if $PY -c 'import ctypes; ctypes.CDLL("libcudart.so.12")' 2>/dev/null; then SONAME=libcudart.so.11.0; fi
AP_OK=0
if [ -n "$CC" ] && "$CC" -shared -fPIC -Wl,-soname,$SONAME -o "$W/cudart12/$SONAME" "$W/cudart12/cudart.c" 2>> "$W/node.txt" \
   && "$CC" -shared -fPIC -o "$AP/fused_layer_norm_cuda$EXT" "$AP/fln.c" -L"$W/cudart12" -l:$SONAME 2>> "$W/node.txt"; then
  AP_OK=1
fi
rm -rf "$W/cudart12"
echo "apex stand-in built: $AP_OK ($CC, $EXT, needs $SONAME)" >> "$W/node.txt"

# healthy runs: each prints errors, tracebacks or warnings it recovers from or that do not matter, then exits 0
case_ healthy-restart-after-fetch-error none 50 "torchrun --max-restarts 1, two DDP ranks (gloo): in the first attempt rank 1's fetch of a data shard fails (ConnectionResetError: Connection reset by peer, re-raised as RuntimeError 'failed to fetch shard', traceback), torchrun restarts the group, it resumes from rank 0's checkpoint and finishes ('training complete')" -- env $NS FLAKY_ON=1 CKPT=fetch-ok.pt $TR --max-restarts 1 prog/elastic_fetch.py
case_ healthy-oom-microbatch-split none 30 "a length-bucketed attention LM: at step 6 one bucket of 128 x 8192 tokens needs a 256 GiB score matrix, torch.OutOfMemoryError is logged with its traceback and torch.cuda.memory_summary(), the batch is redone as 64 micro-batches of 2 with gradient accumulation, 14 steps and 'training finished'" -- $PY prog/longseq_train.py
case_ healthy-resume-no-optimizer-state none 20 "a Trainer-style resume from checkpoint-200 saved with save_only_model: optimizer.pt missing (FileNotFoundError, logged with its traceback, fresh optimizer and scheduler), no RNG file (the Trainer's reproducibility warning), 100 steps, checkpoint-300 and 'Training completed'" -- $PY prog/hf_resume.py
case_ healthy-deprecation-flood none 25 "a torch-1.x training script with warnings.simplefilter('always'): the old TF32 flags, torch.cuda.amp.autocast/GradScaler, torch.backends.cuda.sdp_kernel, checkpoint without use_reentrant (refused or warned; the shim passes use_reentrant=False), scheduler.get_lr(), a non-leaf .grad read: warnings every step, 25 steps, model saved" -- $PY prog/deprec_flood.py
case_ healthy-job-prolog-env-dump none 25 "a job prolog prints ulimit -a, nvidia-smi -L and topo -m, ldconfig's libcuda entries, the CUDA stubs and cuda-compat folders and the CUDA_*/NCCL_*/LIBRARY_PATH environment (LIBRARY_PATH=/usr/local/cuda/lib64/stubs, link time only); the job's environment report, 40 steps, two 200 MiB checkpoints and 'job finished OK'" -- env $JOBENV CUDA_VISIBLE_DEVICES=0 bash prolog.sh $PY prog/prolog_job.py
case_ healthy-triton-block-fallback none 35 "an inference server's warm-up compiles a Triton RMSNorm per hidden size; the tuning table's BLOCK=5120 is not a power of two (CompilationError 'arange's range must be a power of 2', logged with its traceback), recompiled with 8192, each kernel checked against PyTorch, 200 warm-up batches, 'server ready' (without Triton every size uses PyTorch)" -- $PY prog/triton_fallback.py
case_ healthy-exit-time-noise none 20 "a 300-step run prints 'run complete', then at shutdown the resource tracker warns of 1 leaked shared_memory object (a progress board never unlinked) and a metrics sink's __del__ writes into its closed file: 'Exception ignored in: <function MetricsSink.__del__>', ValueError: I/O operation on closed file; exit status 0" -- $PY prog/exit_leaks.py
case_ healthy-sdpa-probe-fallback none 25 "an LM probes attention backends: flash with fp32 inputs warns why each kernel was not used and raises 'No available kernel. Aborting execution.' (traceback with C++ frames: TORCH_SHOW_CPP_STACKTRACES=1), then bf16 flash works; 40 bf16 steps and 'training finished'" -- env TORCH_SHOW_CPP_STACKTRACES=1 $PY prog/sdpa_probe.py

# faults
case_ rank-hung-shard-read U6 40 "two DDP ranks (gloo, 10 s timeout) under torchrun: rank 1's read of its step-5 shard blocks in open() of a named pipe no one writes (as a read from a hung network mount); rank 0 times out in the gradient all_reduce, torchrun ends rank 1" -- env HANG_AT=5 PG_TIMEOUT=10 CKPT=fetch-hang.pt $TR prog/elastic_fetch.py
case_ eval-collective-rank0-only U1 35 "two DDP ranks (gloo, 10 s timeout): every 3 steps rank 0 alone runs an eval whose metrics all_reduce (2 floats) meets rank 1's next gradient all_reduce; the ranks' collectives no longer match and the job fails" -- env EVAL_RANK0=1 EVAL_EVERY=3 PG_TIMEOUT=10 CKPT=fetch-eval.pt $TR prog/elastic_fetch.py
case_ long-batch-oom-no-split U3 20 "the length-bucketed LM without the micro-batch fallback: the 128 x 8192-token bucket at step 6 needs 256 GiB for its scores, torch.OutOfMemoryError ends the run" -- env SPLIT=0 $PY prog/longseq_train.py
case_ resume-param-groups-mismatch U2 15 "the Trainer-style resume where the earlier job saved optimizer.pt with two parameter groups (weight decay and none) and this code builds one: optimizer.load_state_dict raises ValueError (different number of parameter groups)" -- env OPTIM_MISMATCH=1 $PY prog/hf_resume.py
case_ numpy-from-other-python U5 15 "the Trainer-style resume with PYTHONPATH naming a Python 3.10 conda env's site-packages: its numpy 1.26.4 cannot import its cpython-310 C extension: import torch (whose storage module imports numpy) fails with numpy's ImportError 'Importing the numpy C-extensions failed ... No module named numpy.core._multiarray_umath'" -- env PYTHONPATH=$W/conda-py310/lib/python3.10/site-packages $PY prog/hf_resume.py
case_ prolog-cvd-empty C11 15 "the job prolog with CUDA_VISIBLE_DEVICES set empty (an allocation variable that was empty): nvidia-smi still lists the GPU, torch sees none (cuda available False, device count 0) and the first .to('cuda') raises" -- env $JOBENV CUDA_VISIBLE_DEVICES= bash prolog.sh $PY prog/prolog_job.py
case_ prolog-file-size-limit O2 20 "the job under ulimit -f 20480 (20 MiB files; ulimit -a in the prolog shows it): the first 200 MiB checkpoint write fails with OSError [Errno 27] File too large (Python ignores SIGXFSZ)" -- env $JOBENV CUDA_VISIBLE_DEVICES=0 bash -c "ulimit -f 20480; exec bash prolog.sh $PY prog/prolog_job.py"
case_ staging-thread-no-context O4 15 "batches copied to the GPU with the driver API's cuMemcpyHtoD: the self-test on the main thread passes, then the staging moves to a ThreadPoolExecutor thread that never makes the context current: CUDA_ERROR_INVALID_CONTEXT (invalid device context) from the thread, raised by future.result()" -- $PY prog/stage_thread.py
if [ "$AP_OK" = 1 ]; then
  case_ apex-ext-other-cuda C9 15 "the attention LM with apex's FusedLayerNorm (apex on PYTHONPATH, built from source against a torch for CUDA 12): after the backend probe, importing fused_layer_norm_cuda fails, ImportError '$SONAME: cannot open shared object file' (a stand-in extension compiled here that needs $SONAME)" -- env FUSED_LN=1 PYTHONPATH=$AP $PY prog/sdpa_probe.py
else
  echo "apex-ext-other-cuda: not run, no C compiler to build the extension" | tee -a "$W/summary.txt"
fi
finish_
