"""Model FLOPs per token and model FLOPs utilisation (MFU) of the train step.

Convention (stated so a reader can redo the sum): matrix multiplies only, 2 FLOPs per
multiply-add, backward = 2 x forward, so training = 3 x forward. Attention scores use the full
sequence per token (no causal halving), as in PaLM's MFU definition (Chowdhery et al. 2022,
appendix B: 6N + 12 L H Q T). For an MoE layer only the routed experts a token visits count
(top-k), plus the router. Norms, softmax, rotary and the loss are left out (well under 1 %).

Forward FLOPs per token and layer, with h hidden, q = heads x head_dim, k = query_groups x
head_dim, E experts, f expert FFN, t top-k, s sequence:
    QKV projection   2 h (q + 2k)
    attention        2 q s (scores) + 2 q s (weighted sum of values)
    output proj.     2 q h
    router           2 h E
    experts          t x 3 x 2 h f   (SwiGLU: gate, up, down)
plus the LM head 2 h V per token (the embedding lookup has no FLOPs).
"""
from __future__ import annotations

from typing import Dict

from envbuild.train.presets import ModelShape


def forward_flops_per_token(shape: ModelShape, layers: int, seq: int, vocab: int = 0) -> Dict[str, int]:
    """Forward FLOPs per token, by part. `vocab` defaults to the shape's (unpadded) vocabulary."""
    h, q, k = shape.hidden, shape.q_width, shape.kv_width
    v = vocab or shape.vocab
    per_layer = {
        "qkv": 2 * h * (q + 2 * k),
        "attention": 4 * q * seq,
        "out_proj": 2 * q * h,
        "router": 2 * h * shape.experts,
        "experts": shape.topk * 3 * 2 * h * shape.expert_ffn,
    }
    parts = {name: layers * value for name, value in per_layer.items()}
    parts["lm_head"] = 2 * h * v
    return parts


def train_flops_per_token(shape: ModelShape, layers: int, seq: int, vocab: int = 0) -> int:
    """Training FLOPs per token: 3 x forward (forward, and backward for inputs and for weights)."""
    return 3 * sum(forward_flops_per_token(shape, layers, seq, vocab).values())


def mfu(tokens_per_s: float, flops_per_token: float, gpus: int, peak_flops_per_gpu: float) -> float:
    """Achieved model FLOPs over the peak of all GPUs taking part, as a fraction (0.42 = 42 %)."""
    if gpus < 1 or peak_flops_per_gpu <= 0:
        raise ValueError("mfu needs at least one GPU and a positive peak")
    return tokens_per_s * flops_per_token / (gpus * peak_flops_per_gpu)
