"""Bytes per GPU of the train step, and the depth that would fit a GPU.

An estimate, written out so it can be checked: the check prints it next to the peak that torch
measured, and an out-of-memory names the depth this estimate says would fit.

Per parameter on a rank: bf16 weight 2 B, fp32 gradient buffer 4 B (grads accumulated and reduced
in fp32, Megatron's default for bf16), and the distributed optimizer's fp32 master copy plus Adam's
two moments, 12 B, sharded over the data-parallel ranks (dense part over DP, experts over the
expert-data-parallel ranks). Activations for one micro-batch without recomputation: the linear
layers' saved inputs and outputs in bf16, the unfused attention scores of the local layer spec
(heads x s x s: megatron's softmax runs in fp32 and keeps its fp32 output for backward, and the bf16
probabilities are kept for the value matmul, 6 B each), the routed tokens' expert activations, and the
logits (bf16 out of the output layer, then two fp32 copies in the cross entropy: 10 B each). Outside
torch's allocator: the CUDA context and cuBLAS workspaces, and one NCCL communicator per process group
the rank is in (megatron-core 0.19 puts every rank in 20 groups; with the weight-sync group and WORLD,
22). Each costs about 400 MiB of device memory, so NCCL alone holds about 8.6 GiB per GPU.

Checked against the peaks torch measured on the lent H200s (docs/gpu-runs, 2 layers): before the
6 B scores and the bf16 logits were counted, activations came out 1.4-2.6 GiB under the measured
forward/backward peak (EP 2: 13.0 GiB measured vs 10.4 estimated; PP 2: 9.3 vs 7.5; TP 2 + SP: 6.6 vs
5.2); with them the gap is under 0.5 GiB, inside the 10 % headroom depth_that_fits keeps. The NCCL figure
is measured too: on one H200, destroying the 21 groups of a run with nothing offloaded freed 7.96 GiB
(388 MiB each; train-moe-held-fit.json), and 8 layers on one GPU, which a 1.5 GiB allowance let
through, ran out of memory with 9.3 GiB held outside torch's allocator (train-moe-big1.json).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from envbuild.train.layout import Layout, padded_vocab
from envbuild.train.presets import ModelShape

GIB = 1024 ** 3
MIB = 1024 ** 2
CONTEXT_BYTES = 1 * GIB  # CUDA context + cuBLAS workspaces (1.15 GiB in use on an H200 with the context and WORLD)
NCCL_COMM_BYTES = 400 * MIB  # one NCCL 2.28 communicator on an H200 (388 MiB measured, see above)
NCCL_COMMUNICATORS = 22  # megatron-core's 20 groups per rank + the weight-sync group + WORLD
OVERHEAD_BYTES = CONTEXT_BYTES + NCCL_COMMUNICATORS * NCCL_COMM_BYTES
START_BYTES = CONTEXT_BYTES + NCCL_COMM_BYTES  # what a rank holds when it has its context and WORLD only
WEIGHT_B, GRAD_B, OPTIM_B = 2, 4, 12


@dataclass(frozen=True)
class ParamCount:
    dense: int  # parameters sharded (for the optimizer) over DP
    expert: int  # parameters sharded over EDP

    @property
    def total(self) -> int:
        return self.dense + self.expert


def params_per_rank(shape: ModelShape, layout: Layout, layers: int) -> ParamCount:
    """Parameters held by the busiest rank (PP stage 0 holds the embedding; with PP 1 it holds both ends)."""
    h, q, k, tp = shape.hidden, shape.q_width, shape.kv_width, layout.tp
    vocab = padded_vocab(shape.vocab, tp)
    local_layers = layers // layout.pp
    attn = (h * (q + 2 * k) + q * h) // tp
    norms = 2 * h + (2 * shape.head_dim if shape.qk_layernorm else 0)
    router = h * shape.experts
    ends = vocab * h // tp * (1 if layout.pp > 1 else (1 if shape.tied_embeddings else 2))
    experts = (shape.experts // layout.ep) * 3 * h * shape.expert_ffn
    return ParamCount(dense=local_layers * (attn + norms + router) + ends + h, expert=local_layers * experts)


def activation_bytes(shape: ModelShape, layout: Layout, layers: int, seq: int, mbs: int) -> int:
    """Bytes saved for backward on the busiest rank for one micro-batch (see the module docstring)."""
    h, q, k, tp, cp = shape.hidden, shape.q_width, shape.kv_width, layout.tp, layout.cp
    tokens = mbs * seq // cp  # tokens a rank's layers see
    seq_tokens = tokens // tp if layout.sp else tokens  # tokens in sequence-parallel regions
    linear = 2 * (seq_tokens * 2 * h + tokens * ((q + 2 * k) + 2 * q) // tp)
    scores = 6 * mbs * (shape.heads // tp) * (seq // cp) * seq
    routed = seq_tokens * shape.topk
    moe = 2 * routed * (h + 3 * shape.expert_ffn) + 4 * 2 * seq_tokens * shape.experts
    logits = (2 + 2 * 4) * tokens * padded_vocab(shape.vocab, tp) // tp
    return (layers // layout.pp) * (linear + scores + moe) + logits


def estimate_bytes(shape: ModelShape, layout: Layout, layers: int, seq: int, mbs: int) -> Dict[str, int]:
    """Estimated peak bytes on the busiest rank, by part, plus 'total'."""
    p = params_per_rank(shape, layout, layers)
    parts = {
        "weights": WEIGHT_B * p.total,
        "grads": GRAD_B * p.total,
        "optimizer": OPTIM_B * p.dense // layout.dp + OPTIM_B * p.expert // layout.edp,
        "activations": activation_bytes(shape, layout, layers, seq, mbs),
        "overhead": OVERHEAD_BYTES,
    }
    parts["total"] = sum(parts.values())
    return parts


def depth_that_fits(shape: ModelShape, layout: Layout, seq: int, mbs: int, capacity_bytes: int,
                    headroom: float = 0.9, max_layers: Optional[int] = None) -> int:
    """The deepest model (a multiple of PP, at most the real depth) whose estimate fits headroom x capacity; 0 if none."""
    limit = max_layers or shape.full_layers
    best = 0
    for layers in range(layout.pp, limit + 1, layout.pp):
        if estimate_bytes(shape, layout, layers, seq, mbs)["total"] <= headroom * capacity_bytes:
            best = layers
        else:
            break
    return best
