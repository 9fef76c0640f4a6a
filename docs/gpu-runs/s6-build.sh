#!/usr/bin/env bash
# Session 6 (issue 28): the pieces `envbuild create` compiled on the CPU-only development machine, run on the
# lent 1xH200. .whl holds the wheels the builds wrote into the wheel cache (torch_memory_saver, apex,
# megatron-core from the Megatron-LM checkout at the profile's commit); the node's own torch 2.11.0+cu130 is
# what they were compiled against.
#   carry .whl; from the repo root: bash docs/gpu-runs/s6-build.sh
# Parts: facts (what imports, from where), apex (its CUDA kernels against torch on the GPU), offload (the
# doctor's comm.offload_cycle with the source-built torch_memory_saver, preload hook and torch hook), train
# (the doctor's train.moe_step with offload through torch_memory_saver), each JSON into $OUT.
set -u
OUT=${OUT:?set OUT}
PARTS=${PARTS:-facts apex offload train}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  >/dev/null 2>&1 || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  NVSHMEM_DISABLE_NVLS=1
S=$OUT/s6-build-summary.txt; : > "$S"
say() { echo "$*" | tee -a "$S"; }
want() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
say "== $(date -u +%FT%TZ) $(git log --oneline -1 2>/dev/null | cut -c1-70)"
ls -l .whl | tee -a "$S"
if want facts; then
  python3 - <<'PY' 2>&1 | tee -a "$S"
import importlib, importlib.metadata as md
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.get_device_name(0))
for mod, dist in (("torch_memory_saver", "torch_memory_saver"), ("apex", "apex"), ("amp_C", "apex"),
                  ("fused_layer_norm_cuda", "apex"), ("megatron.core", "megatron-core")):
    try:
        m = importlib.import_module(mod)
        print(f"import {mod}: ok, {getattr(m, '__file__', '?')}, dist {dist} {md.version(dist)}")
    except Exception as exc:
        print(f"import {mod}: FAILED {type(exc).__name__}: {exc}")
PY
fi
if want apex; then
  timeout 120 python3 - <<'PY' > "$OUT/s6-apex.json" 2> "$OUT/s6-apex.log"
import json, time, torch
from apex.normalization import FusedLayerNorm, FusedRMSNorm
from apex.multi_tensor_apply import multi_tensor_applier
import amp_C
torch.manual_seed(0)
out = {}
x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
ln = FusedLayerNorm(4096).cuda().to(torch.bfloat16)
ref = torch.nn.functional.layer_norm(x.float(), (4096,), ln.weight.float(), ln.bias.float())
y = ln(x); y.float().sum().backward()
out["fused_layer_norm_max_abs_err"] = (y.float() - ref).abs().max().item()
rms = FusedRMSNorm(4096).cuda()
xf = x.detach().float()
ref_rms = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + rms.eps) * rms.weight
out["fused_rms_norm_max_abs_err"] = (rms(xf) - ref_rms).abs().max().item()
ts = [torch.randn(1 << 20, device="cuda") for _ in range(8)]
buf = torch.zeros(1, dtype=torch.int, device="cuda")
norm, _ = multi_tensor_applier(amp_C.multi_tensor_l2norm, buf, [ts], False)
ref_norm = torch.linalg.vector_norm(torch.cat(ts)).item()
out["multi_tensor_l2norm_rel_err"] = abs(norm.item() - ref_norm) / ref_norm
torch.cuda.synchronize(); t0 = time.perf_counter()
for _ in range(50):
    ln(x)
torch.cuda.synchronize(); out["fused_layer_norm_ms"] = (time.perf_counter() - t0) * 20
out["ok"] = out["fused_layer_norm_max_abs_err"] < 0.1 and out["fused_rms_norm_max_abs_err"] < 1e-3 and out["multi_tensor_l2norm_rel_err"] < 1e-4
print(json.dumps(out, indent=1))
PY
  say "apex: exit $? $(tr -d '\n ' < "$OUT/s6-apex.json" | cut -c1-300)"
fi
if want offload; then
  for hook in preload torch; do
    timeout 150 python3 -m envbuild doctor --gpus 0 --check comm.offload_cycle --set offload.backend=tms \
      --set offload.hook=$hook --json "$OUT/s6-offload-tms-$hook.json" > "$OUT/s6-offload-$hook.log" 2>&1
    say "offload ($hook hook): exit $? $(grep -E 'PASS|FAIL|WARN|ERROR|SKIP' "$OUT/s6-offload-$hook.log" | head -2 | tr -s ' ' | cut -c1-250)"
  done
fi
if want train; then
  timeout 330 python3 -m envbuild doctor --gpus 0 --check train.moe_step --set train.offload=tms \
    --json "$OUT/s6-train-tms.json" > "$OUT/s6-train.log" 2>&1
  say "train (offload tms): exit $? $(grep -E 'PASS|FAIL|WARN|ERROR|SKIP' "$OUT/s6-train.log" | head -2 | tr -s ' ' | cut -c1-300)"
fi
