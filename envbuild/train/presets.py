"""Model shape presets for the train-step check.

Only the shapes matter: the check trains a randomly initialised model of the given depth, so no
weights are downloaded. Qwen3-30B-A3B's numbers are from its Hugging Face config.json
(Qwen/Qwen3-30B-A3B: hidden_size 2048, num_attention_heads 32, num_key_value_heads 4, head_dim 128,
num_experts 128, num_experts_per_tok 8, moe_intermediate_size 768, vocab_size 151936,
rope_theta 1000000, tie_word_embeddings false, num_hidden_layers 48, rms_norm_eps 1e-6) and match
slime's scripts/models/qwen3-30B-A3B.sh.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden: int
    heads: int
    query_groups: int  # key/value heads (GQA)
    head_dim: int
    experts: int
    topk: int
    expert_ffn: int
    vocab: int
    rope_base: float
    full_layers: int  # depth of the real model; the check runs fewer
    qk_layernorm: bool = True
    tied_embeddings: bool = False
    norm_eps: float = 1e-6

    @property
    def q_width(self) -> int:
        """Width of the query projection output (heads x head_dim); 4096 for Qwen3-30B-A3B, not hidden."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of each of the key and value projections (query_groups x head_dim; GQA shares them)."""
        return self.query_groups * self.head_dim


PRESETS: Dict[str, ModelShape] = {
    "qwen3-30b-a3b": ModelShape(
        name="qwen3-30b-a3b", hidden=2048, heads=32, query_groups=4, head_dim=128, experts=128, topk=8,
        expert_ffn=768, vocab=151936, rope_base=1_000_000.0, full_layers=48,
    ),
}


def get_preset(name: str) -> ModelShape:
    """The shape named `name`; ValueError naming the known ones otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown model preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None
