#!/usr/bin/env bash
# Session 10 (issue 28): the source builds `envbuild create` compiled on the CPU-only development machine, run
# together on the lent GPU beside the node's torch 2.11.0+cu130 (the torch the profile pins and they were built
# against). .whl10 holds (made on the CPU machine, see docs/real-build.md "session 10"):
#   - transformer_engine 2.16.1+c9877be and apex 0.1 @10417ace from the wheel cache, re-zipped with LZMA members
#     to fit the device's 64 MiB carry (same files: step "facts" checks every installed file against the RECORD
#     the build wrote, and ORIGINAL-SHA256 holds the cache's wheel hashes);
#   - torch_memory_saver 0.0.10b1 compiled from fzyzcjy/torch_memory_saver@4a43c977 (the profile's 8d30c59c is
#     in zhuzilin's fork only, which no mirror here holds);
#   - megatron-lm-1dcf0daf-core.tar.xz: megatron/core of the Megatron-LM checkout create made at the image's commit;
#   - megatron-core 0.19.2, py-spy, and TE's pure-Python needs (einops, pydantic).
#   carry .whl10; from the repo root, one call (timeout 480): bash docs/gpu-runs/s10-real-build.sh
# Parts (PARTS to choose): facts, te (TE's GPU kernels against torch: Linear bf16 and FP8, LayerNormLinear, RMSNorm,
# fused attention), offload (the doctor's comm.offload_cycle through the source-built TMS), train (the doctor's
# train.moe_step with train.spec=te and offload through TMS, megatron-core 0.19.2), train-mlm (the same with the
# image's Megatron-LM 1dcf0daf). Each writes its JSON into $OUT; $OUT/s10-summary.txt says what held.
set -u
OUT=${OUT:?set OUT}
PARTS=${PARTS:-facts te offload train train-mlm}
W=.whl10
S=$OUT/s10-summary.txt; : > "$S"
say() { echo "$*" | tee -a "$S"; }
want() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $W/*.whl \
  > /tmp/s10-pip.log 2>&1 || { cat /tmp/s10-pip.log; echo "wheel install failed"; exit 1; }
mkdir -p /tmp/mlm && tar -xJf $W/megatron-lm-*-core.tar.xz -C /tmp/mlm || { echo "megatron-lm unpack failed"; exit 1; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  NVSHMEM_DISABLE_NVLS=1 PYTHONWARNINGS=ignore::SyntaxWarning
export PATH=/tmp/site/bin:$PATH
say "== $(date -u +%FT%TZ) $(git log --oneline -1 2>/dev/null | cut -c1-70)"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader >> "$S" 2>&1
ls -l $W | tail -n +2 | awk '{print "  " $5 " " $9}' >> "$S"
if want facts; then
  timeout 120 python3 - "$OUT/s10-facts.json" <<'PY' 2>&1 | tee -a "$S"
import base64, hashlib, importlib, importlib.metadata as md, json, os, sys
import torch
facts = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0),
         "capability": list(torch.cuda.get_device_capability(0)), "imports": {}, "record_check": {}}
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", facts["gpu"], "sm", facts["capability"])
for mod, dist in (("transformer_engine", "transformer_engine"), ("transformer_engine.pytorch", "transformer_engine"),
                  ("transformer_engine_torch", "transformer_engine"), ("torch_memory_saver", "torch_memory_saver"),
                  ("apex", "apex"), ("amp_C", "apex"), ("fused_layer_norm_cuda", "apex"),
                  ("megatron.core", "megatron-core")):
    try:
        m = importlib.import_module(mod)
        row = f"ok, {getattr(m, '__file__', '?')}, dist {dist} {md.version(dist)}"
    except Exception as exc:
        row = f"FAILED {type(exc).__name__}: {str(exc)[:300]}"
    facts["imports"][mod] = row
    print(f"import {mod}: {row}")
# Every installed file of the source-built wheels against the sha256 their build wrote into RECORD: what runs
# here is byte for byte what was compiled on the CPU machine (the LZMA re-zip changed only the container).
for dist in ("transformer_engine", "apex", "torch_memory_saver"):
    d = md.distribution(dist)
    checked = bad = 0
    for f in d.files or []:
        if not f.hash:
            continue
        data = open(d.locate_file(f), "rb").read()
        digest = base64.urlsafe_b64encode(hashlib.new(f.hash.mode, data).digest()).rstrip(b"=").decode()
        checked += 1
        bad += digest != f.hash.value
    facts["record_check"][dist] = {"version": d.version, "files_checked": checked, "mismatched": bad}
    print(f"RECORD {dist} {d.version}: {checked} files checked, {bad} differ")
json.dump(facts, open(sys.argv[1], "w"), indent=1)
PY
fi
if want te; then
  timeout 150 python3 - <<'PY' > "$OUT/s10-te.json" 2> /tmp/s10-te.log
import json, time, torch, torch.nn.functional as F
import transformer_engine.pytorch as te
from transformer_engine.common import recipe
torch.manual_seed(0)
out, bf = {}, torch.bfloat16
def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()
x = torch.randn(2048, 4096, device="cuda", dtype=bf, requires_grad=True)
lin = te.Linear(4096, 4096, bias=True, params_dtype=bf).cuda()
y = lin(x); ref = F.linear(x, lin.weight, lin.bias)
out["linear_bf16_rel_err"] = rel(y, ref)
y.float().sum().backward(); gx = x.grad.clone(); x.grad = None
ref.float().sum().backward(); out["linear_bf16_dgrad_rel_err"] = rel(gx, x.grad); x.grad = None
autocast = getattr(te, "fp8_autocast", None) or te.autocast
with autocast(enabled=True, fp8_recipe=recipe.DelayedScaling()):
    y8 = lin(x)
out["linear_fp8_rel_err"] = rel(y8, ref)
rms = te.RMSNorm(4096, params_dtype=bf).cuda()
xf = x.detach()
ref_rms = (xf.float() * torch.rsqrt(xf.float().pow(2).mean(-1, keepdim=True) + rms.eps)) * rms.weight.float()
out["rmsnorm_rel_err"] = rel(rms(xf), ref_rms)
lnl = te.LayerNormLinear(4096, 4096, normalization="RMSNorm", params_dtype=bf).cuda()
ref_lnl = F.linear(((xf.float() * torch.rsqrt(xf.float().pow(2).mean(-1, keepdim=True) + lnl.eps))
                    * lnl.layer_norm_weight.float()).to(bf), lnl.weight, lnl.bias)
out["layernorm_linear_rel_err"] = rel(lnl(xf), ref_lnl)
s, b, h, d = 1024, 2, 32, 128
q, k, v = (torch.randn(s, b, h, d, device="cuda", dtype=bf) for _ in range(3))
attn = te.DotProductAttention(num_attention_heads=h, kv_channels=d, attn_mask_type="causal")
o = attn(q, k, v)
ref_o = F.scaled_dot_product_attention(*(t.permute(1, 2, 0, 3) for t in (q, k, v)), is_causal=True)
out["attention_rel_err"] = rel(o, ref_o.permute(2, 0, 1, 3).reshape(s, b, h * d))
torch.cuda.synchronize(); t0 = time.perf_counter()
for _ in range(20):
    lin(x)
torch.cuda.synchronize(); out["linear_bf16_ms"] = (time.perf_counter() - t0) * 50
out["ok"] = (out["linear_bf16_rel_err"] < 1e-2 and out["linear_bf16_dgrad_rel_err"] < 1e-2
             and out["linear_fp8_rel_err"] < 0.1 and out["rmsnorm_rel_err"] < 1e-2
             and out["layernorm_linear_rel_err"] < 2e-2 and out["attention_rel_err"] < 2e-2)
print(json.dumps(out, indent=1))
PY
  say "te: exit $? $(tr -d '\n ' < "$OUT/s10-te.json" | cut -c1-400) $(grep -m2 -E 'Error|error' /tmp/s10-te.log | cut -c1-300)"
fi
if want offload; then
  timeout 120 python3 -m envbuild doctor --gpus 0 --check comm.offload_cycle --set offload.backend=tms \
    --set offload.hook=preload --json "$OUT/s10-offload-tms-src.json" > /tmp/s10-offload.log 2>&1
  say "offload (TMS 4a43c977, preload hook): exit $? $(grep -E 'PASS|FAIL|WARN|ERROR|SKIP' /tmp/s10-offload.log | head -2 | tr -s ' ' | cut -c1-250)"
fi
if want train; then
  timeout 200 python3 -m envbuild doctor --gpus 0 --check train.moe_step --set train.spec=te \
    --set train.offload=tms --set train.layers=2 --json "$OUT/s10-train-te-tms-mcore0192.json" > /tmp/s10-train.log 2>&1
  say "train (TE spec, TMS, apex, megatron-core 0.19.2): exit $? $(grep -E 'PASS|FAIL|WARN|ERROR|SKIP' /tmp/s10-train.log | head -2 | tr -s ' ' | cut -c1-300)"
fi
if want train-mlm; then
  PYTHONPATH=/tmp/mlm:$PYTHONPATH timeout 200 python3 -m envbuild doctor --gpus 0 --check train.moe_step \
    --set train.spec=te --set train.offload=tms --set train.layers=2 \
    --json "$OUT/s10-train-te-tms-megatron-1dcf0daf.json" > /tmp/s10-train-mlm.log 2>&1
  say "train (TE spec, TMS, apex, Megatron-LM 1dcf0daf): exit $? $(grep -E 'PASS|FAIL|WARN|ERROR|SKIP' /tmp/s10-train-mlm.log | head -2 | tr -s ' ' | cut -c1-300)"
  PYTHONPATH=/tmp/mlm:$PYTHONPATH python3 -c 'import megatron.core as m; print("megatron.core from", m.__file__)' >> "$S" 2>&1
fi
tar -czf "$OUT/s10-logs.tar.gz" -C /tmp s10-pip.log s10-te.log s10-offload.log s10-train.log s10-train-mlm.log 2>/dev/null
say "== done"
