# Supervised fine-tuning on packed sequences: several samples share one row and attention must not cross them, so
# the script uses flash-attn's variable-length kernel (flash_attn_varlen_func with cu_seqlens), imported when the
# config asks for attn_implementation=flash_attention_2 (there is no fallback for packing).
import os
import sys

import torch

print(f"[sft] torch {torch.__version__} (CUDA {torch.version.cuda}), python {sys.version.split()[0]}, "
      f"GPU {torch.cuda.get_device_name(0)}", flush=True)
print("[sft] config: packing=True max_seq_len=8192 attn_implementation=flash_attention_2 bf16=True", flush=True)
from flash_attn import flash_attn_varlen_func  # noqa: E402
from flash_attn.bert_padding import unpad_input  # noqa: E402,F401

lens = [1200, 3000, 800, 3192]
cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
q = torch.randn(sum(lens), 16, 128, device="cuda", dtype=torch.bfloat16)
out = flash_attn_varlen_func(q, q, q, cu, cu, max(lens), max(lens), causal=True)
print(f"[sft] packed attention ok: {tuple(out.shape)}", flush=True)
