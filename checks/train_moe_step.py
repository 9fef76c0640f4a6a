#!/usr/bin/env python3
"""A short Qwen3-30B-A3B-shaped MoE train loop with megatron-core, inside slime's colocated cycle.

Each step does what slime's colocated RL loop does to the training side, in its order:

  train    forward, backward (all-to-all MoE dispatch), distributed-optimizer step
  sync     NCCL broadcast of every rank's weights over a separate "rollout" group (update_weights)
  offload  destroy every NCCL process group, then release the training state: torch_memory_saver
           pause() when installed (LD_PRELOAD hook, as slime's --offload-train), else copy it to
           host memory and free the storage
  resume   torch_memory_saver resume() / copy back; the state is checked bit for bit
  rebuild  re-create every process group with its original arguments and run one collective on each
           (slime's ReloadableProcessGroup: the model keeps its group objects, their communicators
           are new), the place where slime #1305 saw `Cuda failure 999`

then a few plain train steps without the cycle, so the cost the cycle adds can be given as a ratio.
Rank 0 reports loss, grad norm, times, memory and file descriptors per step as JSON; envbuild turns
them into a verdict (envbuild/doctor/checks/train_moe.py). Torch, megatron-core and the stdlib only.

Why groups are wrapped rather than rebuilt with parallel_state.destroy_model_parallel() +
initialize_model_parallel(): megatron-core 0.19's destroy only forgets its globals, while the model,
DDP buffers and optimizer keep the group objects they were built with. slime therefore patches
torch.distributed.new_group so every group is a wrapper whose communicator can be destroyed and
re-created in place; this payload does the same (its own code), so megatron's groups, the model's
and the rollout group all go through the destroy/re-create cycle.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import Probe  # noqa: E402

TMS_REEXEC_FLAG = "ENVBUILD_TMS_REEXEC"
MIB = 1024 ** 2
GIB = 1024 ** 3


def parse_args(argv: List[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", required=True, help="model shape as JSON (envbuild.train.presets)")
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--steps", type=int, default=3, help="steps with the slime cycle")
    ap.add_argument("--plain-steps", type=int, default=3, help="steps without the cycle, for the ratio")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--mbs", type=int, default=1)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--sp", type=int, default=0)
    ap.add_argument("--ep", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--cp", type=int, default=1)
    ap.add_argument("--vocab", type=int, required=True, help="padded vocabulary")
    ap.add_argument("--offload", choices=("auto", "tms", "move", "none"), default="auto")
    ap.add_argument("--spec", choices=("auto", "local", "te"), default="auto")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--sync-bucket-mib", type=int, default=512)
    return ap.parse_args(argv)


# ------------------------------------------------------------------------------------------------
# torch_memory_saver: slime runs its trainer with LD_PRELOAD=<the preload hook>; do the same by
# re-executing this rank once with the hook preloaded (same PID, so the launcher still tracks it).
# ------------------------------------------------------------------------------------------------
def tms_mode(args: argparse.Namespace) -> Dict[str, Any]:
    """Decide the offload mode; may not return (execve) when TMS needs its preload hook."""
    if args.offload in ("move", "none"):
        return {"offload": args.offload, "tms": None}
    if importlib.util.find_spec("torch_memory_saver") is None:
        if args.offload == "tms":
            raise RuntimeError("--offload tms: torch_memory_saver is not installed in this environment")
        return {"offload": "move", "tms": None, "tms_missing": True}
    preload = os.environ.get("LD_PRELOAD", "")
    if "torch_memory_saver" in preload:
        return {"offload": "tms", "tms": "preload", "ld_preload": preload}
    if os.environ.get(TMS_REEXEC_FLAG) == "1":
        raise RuntimeError("re-executed with the torch_memory_saver hook but LD_PRELOAD lost it")
    from torch_memory_saver.utils import get_binary_path_from_package

    hook = str(get_binary_path_from_package("torch_memory_saver_hook_mode_preload"))
    env = dict(os.environ)
    env["LD_PRELOAD"] = hook + (":" + preload if preload else "")
    env[TMS_REEXEC_FLAG] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-u", os.path.abspath(__file__)] + sys.argv[1:], env)
    raise AssertionError("unreachable")


def retain_host_shadow(tms) -> Optional[bool]:
    """Keep torch_memory_saver's pinned host copy of the training state from one offload to the next.

    Where the offload time went (docs/gpu-runs: s6-train-tms-sourcebuilt-full.json, doctor-full-1gpu-s5.json): each
    of the three TMS offloads took 28-44 s for 74.5 GiB, the second and third as long as the first, and each resume
    8-13 s; the host-copy offload of the same payload took 20.6 s the first time (pinning 38 GiB) and 1.6-2.2 s
    after (train-moe-1gpu-final.json). The copies are pinned in both; what TMS (0.0.10, the profile's pin) repeats
    is the pinning: without TMS_RETAIN_CPU_BACKUP it cudaMallocHost()s a fresh shadow at every pause and
    cudaFreeHost()s it at every resume, at about 2-3 GB/s, where the copy itself ran at 18-26 GB/s.

    slime's trainer runs TMS with the CPU backup (TMS_INIT_ENABLE_CPU_BACKUP=1, slime/ray/actor_group.py) and this
    check keeps it: the whole state is copied out at every offload and must come back bit for bit. Only the shadow
    is kept between cycles, which is what TMS before the retain switch did anyway. What this check exists for
    stays as slime runs it: megatron's state through pause/resume, every process group destroyed and re-created,
    no growth; the first pause still pins the whole state, so a host that cannot hold it still fails here. The
    per-cycle pin/unpin of the shadow itself stays tested every cycle by comm.offload_cycle, with TMS's default.

    Returns True once set, None when this TMS has no such switch (it then keeps or drops the shadow as it does)."""
    if not hasattr(type(tms), "retain_cpu_backup"):
        return None
    tms.retain_cpu_backup = True
    return True


# ------------------------------------------------------------------------------------------------
# Reloadable process groups
# ------------------------------------------------------------------------------------------------
class GroupReloader:
    """Records every torch.distributed.new_group call and can destroy / re-create their communicators.

    Each group a rank belongs to is handed out as a wrapper (a ProcessGroup subclass) that forwards
    every method to the current inner group and is registered in c10d's tables under the inner
    group's entries, so torch.distributed's free functions accept it unchanged. Rebuilding replays
    all recorded calls in their original order on every rank, as new_group requires.
    """

    def __init__(self) -> None:
        import torch.distributed as dist

        self.dist = dist
        self.calls: List[tuple] = []  # (args, kwargs, wrapper or None)
        self.original = dist.new_group
        self.wrapper_cls = self._make_wrapper_class()
        self.destroyed = 0
        self.created = 0

    def install(self) -> None:
        def new_group(*args, **kwargs):
            inner = self.original(*args, **kwargs)
            self.created += 1
            wrapper = None
            # Every group this rank is in is reloadable, one-rank groups too: with device_id bound at
            # init_process_group, new_group creates its NCCL communicator eagerly, so a replayed one-rank
            # group that was never destroyed kept a communicator per cycle (GPU run of 19:39: memory and
            # FDs grew every rebuild).
            if inner is not None and inner != self.dist.GroupMember.NON_GROUP_MEMBER:
                wrapper = self.wrapper_cls(inner)
                self._alias(wrapper, inner)
            self.calls.append((args, kwargs, wrapper))
            return wrapper if wrapper is not None else inner

        self.dist.new_group = new_group

    def uninstall(self) -> None:
        self.dist.new_group = self.original

    def _make_wrapper_class(self):
        dist = self.dist
        base = dist.ProcessGroup

        def forward(name):
            def method(self, *a, **kw):
                inner = object.__getattribute__(self, "_inner")
                if inner is None:
                    raise RuntimeError(f"process group used while destroyed (method {name})")
                return getattr(inner, name)(*a, **kw)
            method.__name__ = name
            return method

        def forward_property(name):
            def get(self):
                return getattr(object.__getattribute__(self, "_inner"), name)

            def put(self, value):
                setattr(object.__getattribute__(self, "_inner"), name, value)
            return property(get, put)

        namespace: Dict[str, Any] = {}
        skip = {"boxed", "unbox", "_pybind11_conduit_v1_"}
        for name in dir(base):
            if name.startswith("__") or name in skip:
                continue
            import inspect

            static = inspect.getattr_static(base, name)
            if isinstance(static, property):
                namespace[name] = forward_property(name)
            elif callable(static) and not isinstance(static, type) and not name.isupper():
                namespace[name] = forward(name)

        def __init__(self, inner):
            base.__init__(self, inner.rank(), inner.size())
            object.__setattr__(self, "_inner", inner)

        namespace["__init__"] = __init__
        namespace["__hash__"] = lambda self: id(self)
        namespace["__eq__"] = lambda self, other: self is other
        return type("ReloadableGroup", (base,), namespace)

    def _alias(self, wrapper, inner) -> None:
        world = self.dist.distributed_c10d._world
        for table in ("pg_map", "pg_names", "pg_group_ranks", "pg_backend_config", "pg_to_tag"):
            mapping = getattr(world, table, None)
            if isinstance(mapping, dict) and inner in mapping:
                mapping[wrapper] = mapping[inner]

    def _unalias(self, wrapper) -> None:
        world = self.dist.distributed_c10d._world
        for table in ("pg_map", "pg_names", "pg_group_ranks", "pg_backend_config", "pg_to_tag",
                      "pg_coalesce_state"):
            mapping = getattr(world, table, None)
            if isinstance(mapping, dict):
                mapping.pop(wrapper, None)

    def wrappers(self) -> list:
        return [w for _a, _k, w in self.calls if w is not None]

    def destroy_all(self) -> int:
        """Destroy the communicator of every recorded group this rank is in; returns how many."""
        n = 0
        for w in self.wrappers():
            inner = object.__getattribute__(w, "_inner")
            if inner is None:
                continue
            self._unalias(w)
            self.dist.destroy_process_group(inner)
            object.__setattr__(w, "_inner", None)
            n += 1
        self.destroyed += n
        return n

    def rebuild_all(self) -> int:
        """Replay every recorded new_group call in order; rebind the wrappers to the new groups."""
        n = 0
        for args, kwargs, wrapper in self.calls:
            inner = self.original(*args, **kwargs)
            self.created += 1
            if wrapper is not None:
                object.__setattr__(wrapper, "_inner", inner)
                self._alias(wrapper, inner)
                n += 1
        return n


# ------------------------------------------------------------------------------------------------
# Offload without torch_memory_saver: copy each storage to pinned host memory and free it
# ------------------------------------------------------------------------------------------------
class HostOffloader:
    """Moves a set of CUDA tensors' storages to host memory and back (verl/slime's offload without TMS)."""

    def __init__(self, tensors) -> None:
        seen = {}
        for t in tensors:
            if t is None or not t.is_cuda:
                continue
            st = t.untyped_storage()
            seen.setdefault(st.data_ptr(), t)
        self.tensors = list(seen.values())
        self.sizes = [t.untyped_storage().nbytes() for t in self.tensors]
        self.host: List[Any] = []  # pinned buffers, allocated once and reused every cycle

    def offload(self) -> None:
        import torch

        if not self.host:
            self.host = [torch.empty(n, dtype=torch.uint8, pin_memory=True) for n in self.sizes]
        for t, cpu in zip(self.tensors, self.host):
            cpu.untyped_storage().copy_(t.untyped_storage(), non_blocking=True)
        torch.cuda.synchronize()
        for t in self.tensors:
            t.untyped_storage().resize_(0)

    def resume(self) -> None:
        import torch

        for t, size, cpu in zip(self.tensors, self.sizes, self.host):
            st = t.untyped_storage()
            st.resize_(size)
            st.copy_(cpu.untyped_storage(), non_blocking=True)
        torch.cuda.synchronize()


# ------------------------------------------------------------------------------------------------
# The model
# ------------------------------------------------------------------------------------------------
def transformer_config(args, shape: Dict[str, Any], grouped_gemm: bool = False):
    """Qwen3-30B-A3B's layer shapes; `grouped_gemm` must match the layer spec (the TE spec's grouped experts)."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    kwargs = dict(
        num_layers=args.layers, hidden_size=shape["hidden"], num_attention_heads=shape["heads"],
        num_query_groups=shape["query_groups"], kv_channels=shape["head_dim"],
        ffn_hidden_size=shape["expert_ffn"], normalization="RMSNorm", layernorm_epsilon=shape["norm_eps"],
        qk_layernorm=shape["qk_layernorm"], gated_linear_unit=True, activation_func=F.silu,
        add_bias_linear=False, add_qkv_bias=False, hidden_dropout=0.0, attention_dropout=0.0,
        num_moe_experts=shape["experts"], moe_router_topk=shape["topk"], moe_ffn_hidden_size=shape["expert_ffn"],
        moe_token_dispatcher_type="alltoall", moe_grouped_gemm=grouped_gemm,
        moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=1e-3,
        bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16,
        tensor_model_parallel_size=args.tp, sequence_parallel=bool(args.sp),
        pipeline_model_parallel_size=args.pp, context_parallel_size=args.cp,
        expert_model_parallel_size=args.ep, expert_tensor_parallel_size=1,
        init_method_std=0.02, use_cpu_initialization=False,
        masked_softmax_fusion=False, bias_activation_fusion=False, bias_dropout_fusion=False,
        apply_rope_fusion=False, gradient_accumulation_fusion=False, persist_layer_norm=False,
        cross_entropy_loss_fusion=False, moe_permute_fusion=False,
    )
    return TransformerConfig(**kwargs)


class Refusal(Exception):
    """A run this environment cannot do, said before any GPU work (the check reports `error`, not a crash)."""

    def __init__(self, summary: str, remediation: str) -> None:
        super().__init__(summary)
        self.remediation = remediation


def layer_spec(args, shape: Dict[str, Any]):
    """TE spec when Transformer Engine imports (and --spec allows it), else the local spec.

    Raises Refusal for what the local spec cannot do: megatron-core's local DotProductAttention asserts
    context_parallel_size == 1 (only TEDotProductAttention implements context parallel).
    """
    from megatron.core.models.gpt import gpt_layer_specs as specs

    te_error = None
    if args.spec in ("te", "auto") and importlib.util.find_spec("transformer_engine") is not None:
        try:
            importlib.import_module("transformer_engine.pytorch")
            return "te", specs.get_gpt_layer_with_transformer_engine_spec(
                num_experts=shape["experts"], moe_grouped_gemm=True, qk_layernorm=shape["qk_layernorm"])
        except ImportError as exc:
            te_error = f"{type(exc).__name__}: {exc}"
    if args.spec == "te":
        raise Refusal(f"train.spec=te but Transformer Engine does not import in {sys.executable}"
                      + (f" ({te_error[:200]})" if te_error else " (not installed)"),
                      "install the profile's transformer-engine in this environment, or use train.spec=local")
    if args.cp > 1:
        raise Refusal(f"train.cp={args.cp} needs Transformer Engine: megatron-core's local attention refuses "
                      f"context parallel, and transformer_engine does not import in {sys.executable}"
                      + (f" ({te_error[:200]})" if te_error else ""),
                      "install transformer-engine in this environment, or use train.cp=1")
    return "local", local_block_spec(args, shape)


def sp_rms_norm_class():
    """torch's RMSNorm in the form megatron's local spec builds norms, usable under sequence parallel.

    megatron-core 0.19's local spec falls back to WrappedTorchNorm without Apex, which refuses
    sequence parallel (seen on the lent machine). Under SP a norm's weight gradient is partial on each
    tensor-parallel rank; Apex's FusedLayerNorm marks the weight `sequence_parallel` so that
    finalize_model_grads sums it over TP, and this class does the same. Weights in params_dtype (bf16).
    """
    import torch

    class SPRMSNorm(torch.nn.RMSNorm):
        def __init__(self, config, hidden_size: int, eps: float = 1e-6, **_ignored):
            super().__init__(hidden_size, eps=eps, dtype=config.params_dtype)
            setattr(self.weight, "sequence_parallel", bool(config.sequence_parallel))

    return SPRMSNorm


def local_block_spec(args, shape: Dict[str, Any]):
    """The local (no Transformer Engine) layer spec with every norm, the final one too, an SPRMSNorm."""
    import dataclasses

    from megatron.core.models.gpt import gpt_layer_specs as specs
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules

    norm = sp_rms_norm_class()
    layer = specs.get_gpt_layer_local_spec(num_experts=shape["experts"], moe_grouped_gemm=False,
                                           qk_layernorm=shape["qk_layernorm"], normalization="RMSNorm")
    attn = layer.submodules.self_attention
    attn_sub = dataclasses.replace(attn.submodules, q_layernorm=norm, k_layernorm=norm) \
        if shape["qk_layernorm"] else attn.submodules
    sub = dataclasses.replace(layer.submodules, input_layernorm=norm, pre_mlp_layernorm=norm,
                              self_attention=dataclasses.replace(attn, submodules=attn_sub))
    layer = dataclasses.replace(layer, submodules=sub)
    return TransformerBlockSubmodules(layer_specs=[layer] * (args.layers // args.pp), layer_norm=norm)


def init_parallel(args) -> None:
    """Megatron's process groups (created through the patched new_group, so all are reloadable)."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    ps.initialize_model_parallel(
        tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp,
        context_parallel_size=args.cp, expert_model_parallel_size=args.ep, expert_tensor_parallel_size=1,
        create_gloo_process_groups=False)
    model_parallel_cuda_manual_seed(args.seed)


def build(args, shape, spec, grouped_gemm: bool = False):
    """Model, DDP buffers and distributed optimizer: the training state that offload releases."""
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.models.gpt import GPTModel
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    config = transformer_config(args, shape, grouped_gemm)
    model = GPTModel(
        config=config, transformer_layer_spec=spec, vocab_size=args.vocab, max_sequence_length=args.seq,
        pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage(),
        share_embeddings_and_output_weights=shape["tied_embeddings"], position_embedding_type="rope",
        rotary_base=int(shape["rope_base"]))
    model.cuda(torch.cuda.current_device())
    ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=False,
                                               use_distributed_optimizer=True)
    ddp = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
    opt_config = OptimizerConfig(optimizer="adam", lr=args.lr, weight_decay=0.0, adam_beta1=0.9,
                                 adam_beta2=0.95, clip_grad=1.0, bf16=True, params_dtype=torch.bfloat16,
                                 use_distributed_optimizer=True)
    optimizer = get_megatron_optimizer(opt_config, [ddp], use_gloo_process_groups=False)
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = optimizer.scale_loss
    return config, ddp, optimizer


def optimizer_tensors(optimizer) -> list:
    """Every tensor an (chained, distributed) megatron optimizer holds: master params and Adam moments."""
    out = []
    chain = getattr(optimizer, "chained_optimizers", None) or [optimizer]
    for opt in chain:
        inner = getattr(opt, "optimizer", None)
        if inner is None:
            continue
        for group in inner.param_groups:
            for p in group["params"]:
                out.append(p)
                for v in inner.state.get(p, {}).values():
                    if hasattr(v, "is_cuda"):
                        out.append(v)
    return out


def train_state_tensors(ddp, optimizer) -> list:
    out = []
    for buf in list(getattr(ddp, "buffers", [])) + list(getattr(ddp, "expert_parallel_buffers", [])):
        out += [buf.param_data, buf.grad_data]
    return out + optimizer_tensors(optimizer)


def fixed_batch(args, vocab: int, dp_rank: int, cp_rank: int):
    """Tokens, labels and positions of one micro-batch, the same every step (seeded per DP rank)."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(args.seed + 1000 * dp_rank)
    tokens = torch.randint(0, vocab, (args.mbs, args.seq + 1), generator=g)
    inputs, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    positions = torch.arange(args.seq).unsqueeze(0).expand(args.mbs, -1).contiguous()
    if args.cp > 1:  # megatron's load-balanced CP split: chunks r and 2*cp-1-r of 2*cp
        n = 2 * args.cp
        def take(t):
            chunks = t.view(t.shape[0], n, -1)
            return torch.cat([chunks[:, cp_rank], chunks[:, n - 1 - cp_rank]], dim=1)
        inputs, labels, positions = take(inputs), take(labels), take(positions)
    dev = torch.cuda.current_device()
    return {"tokens": inputs.to(dev), "labels": labels.to(dev), "position_ids": positions.to(dev),
            "loss_mask": torch.ones_like(labels, dtype=torch.float32).to(dev)}


def train_step(args, ddp, optimizer, batch, opt_region=None) -> Dict[str, float]:
    """One forward/backward/optimizer step; `opt_region` (a TMS region) wraps the optimizer step."""
    import contextlib

    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.pipeline_parallel import get_forward_backward_func

    def loss_func(loss_mask, output_tensor):
        losses = output_tensor.float()
        loss = torch.sum(losses.view(-1) * loss_mask.view(-1)) / loss_mask.sum()
        return loss, {"lm loss": loss.detach()}

    def forward_step(data_iterator, model):
        b = next(data_iterator)
        out = model(b["tokens"], b["position_ids"], None, labels=b["labels"])
        return out, lambda t: loss_func(b["loss_mask"], t)

    ddp.zero_grad_buffer()
    optimizer.zero_grad()
    fwd_bwd = get_forward_backward_func()
    torch.cuda.reset_peak_memory_stats()
    losses = fwd_bwd(forward_step_func=forward_step, data_iterator=iter([batch]), model=[ddp],
                     num_microbatches=1, seq_length=args.seq // args.cp, micro_batch_size=args.mbs,
                     forward_only=False)
    # Peaks of the two halves apart, to check envbuild/train/memory.py's estimate part by part.
    peak_fwd_bwd = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with (opt_region() if opt_region is not None else contextlib.nullcontext()):
        ok, grad_norm, _zeros = optimizer.step()
    peak_optimizer = torch.cuda.max_memory_allocated()
    # The loss lives on the last pipeline stage; average it over the ranks that hold one.
    local = torch.zeros(2, dtype=torch.float64, device=torch.cuda.current_device())
    if ps.is_pipeline_last_stage() and losses:
        local[0] = float(losses[0]["lm loss"])
        local[1] = 1.0
    torch.distributed.all_reduce(local)
    loss = float(local[0] / local[1]) if float(local[1]) else float("nan")
    return {"loss": loss, "grad_norm": float(grad_norm) if grad_norm is not None else float("nan"),
            "update_ok": bool(ok), "peak_fwd_bwd_bytes": peak_fwd_bwd, "peak_optimizer_bytes": peak_optimizer,
            "peak_allocated_bytes": max(peak_fwd_bwd, peak_optimizer)}


def weight_sync(ddp, group, bucket_bytes: int) -> Dict[str, float]:
    """Every rank broadcasts its bf16 weight shards, bucket by bucket, over the rollout group.

    Stands in for slime's update_weights to an inference engine: the same bytes (each rank's shards,
    which together are the whole model) cross NCCL in large broadcasts straight from the parameter
    buffers; an integer checksum travels with each bucket and every receiver compares it.
    """
    import torch
    import torch.distributed as dist

    dev = torch.cuda.current_device()
    me, world = dist.get_rank(group), dist.get_world_size(group)
    mine = [buf.param_data.view(-1).view(torch.uint8) for buf in list(getattr(ddp, "buffers", []))
            + list(getattr(ddp, "expert_parallel_buffers", []))]
    slots = 8
    sizes = torch.zeros(slots, dtype=torch.int64, device=dev)
    for i, t in enumerate(mine[:slots]):
        sizes[i] = t.numel()
    everyone = [torch.zeros_like(sizes) for _ in range(world)]
    dist.all_gather(everyone, sizes, group=group)
    table = [[int(x) for x in t.tolist()] for t in everyone]
    recv = torch.empty(bucket_bytes, dtype=torch.uint8, device=dev)
    check = torch.zeros(1, dtype=torch.int64, device=dev)
    moved, bad = 0, 0
    for src in range(world):
        src_global = dist.get_global_rank(group, src)
        for slot, total in enumerate(table[src]):
            for off in range(0, total, bucket_bytes):
                n = min(bucket_bytes, total - off)
                buf = mine[slot][off:off + n] if src == me else recv[:n]
                if src == me:
                    check.copy_(buf.sum(dtype=torch.int64).view(1))
                dist.broadcast(buf, src=src_global, group=group)
                dist.broadcast(check, src=src_global, group=group)
                if src != me and not bool(torch.equal(buf.sum(dtype=torch.int64).view(1), check)):
                    bad += 1
                moved += n
    del recv
    return {"bytes": moved, "bad_buckets": bad}


CHECKSUM_CHUNK = 1 << 26  # elements summed at a time: the fp64 copy a chunk's sum makes stays at 512 MiB


def checksum(tensors) -> float:
    """fp64 sum of every element, chunk by chunk.

    `t.sum(dtype=torch.float64)` converts the whole tensor to fp64 first: at 8 layers on one H200 that
    asked for 41.8 GiB at once and ran the GPU out of memory in a run whose training fitted (GPU run
    train-moe-big1, first try). The check must never be what runs out of memory.
    """
    import torch

    total = torch.zeros((), dtype=torch.float64, device=torch.cuda.current_device())
    for t in tensors:
        if t is not None and t.is_cuda and t.numel():
            flat = t.detach().reshape(-1)
            for start in range(0, flat.numel(), CHECKSUM_CHUNK):
                total += flat[start:start + CHECKSUM_CHUNK].sum(dtype=torch.float64)
    return float(total)


def same_sum(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def fd_count() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1


def device_used_bytes() -> int:
    import torch

    free, total = torch.cuda.mem_get_info()
    return int(total - free)


def progress(p: Probe, steps: List[Dict[str, Any]]) -> None:
    """Leave the records so far as this rank's result, so a run stopped mid-way still shows them."""
    p.evidence["steps"] = steps
    p.emit({"status": "error", "partial": True,
            "summary": f"stopped after step {steps[-1]['step']} (records so far kept)"})
    p._finished = False  # the final verdict is still to come
    if p.rank == 0:
        print(json.dumps(steps[-1]), flush=True)


def probe_groups(reloader: GroupReloader) -> int:
    """One small all_reduce on every rebuilt group: the first collective after the reload."""
    import torch
    import torch.distributed as dist

    n = 0
    for w in reloader.wrappers():
        t = torch.ones(1, device=torch.cuda.current_device())
        dist.all_reduce(t, group=w)
        if int(t.item()) != dist.get_world_size(w):
            raise RuntimeError(f"all_reduce on rebuilt group of size {dist.get_world_size(w)} gave {t.item()}")
        n += 1
    return n


# ------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------
def main(p: Probe) -> None:
    args = parse_args(sys.argv[1:])
    shape = json.loads(args.shape)
    ev = p.evidence
    ev["args"] = {k: v for k, v in vars(args).items() if k != "shape"}
    with p.phase("import"):
        if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
            p.finish("skip", "megatron-core is not installed in the environment under test",
                     remediation=f"{sys.executable} -m pip install megatron-core==0.19.2")
            return
        mode = tms_mode(args)  # may re-exec this rank under the torch_memory_saver preload hook
        ev["offload_mode"] = mode
        import torch
        import megatron.core

        ev["megatron_core"] = getattr(megatron.core, "__version__", "?")
        ev["megatron_core_path"] = os.path.dirname(megatron.core.__file__)
        ev["torch"] = torch.__version__
        ev["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        ev["transformer_engine"] = bool(importlib.util.find_spec("transformer_engine"))
        tms = None
        if mode["offload"] == "tms":
            from importlib.metadata import version

            from torch_memory_saver import torch_memory_saver as tms

            ev["torch_memory_saver"] = version("torch_memory_saver")

    with p.phase("init"):
        dist = p.init_dist()
        ev["gpu_name"] = torch.cuda.get_device_name()
        # What the GPU had free once this rank's context and NCCL existed: an out-of-memory is judged
        # against it (another process, e.g. a colocated rollout engine, may hold part of the GPU).
        ev["free_at_start_bytes"], ev["device_total_bytes"] = (int(x) for x in torch.cuda.mem_get_info())
        reloader = GroupReloader()
        reloader.install()

    oom = torch.OutOfMemoryError if hasattr(torch, "OutOfMemoryError") else torch.cuda.OutOfMemoryError
    steps: List[Dict[str, Any]] = []
    try:
        _run(p, args, shape, ev, dist, reloader, tms, mode, steps)
    except Refusal as exc:
        p.finish("error", str(exc), refused=True, remediation=exc.remediation, phase="build")
    except oom as exc:
        ev["steps"] = steps
        ev["oom"] = {"phase": p._error_phase or (p._phases[-1] if p._phases else None),
                     "message": str(exc)[:400], "max_allocated_bytes": torch.cuda.max_memory_allocated(),
                     "device_total_bytes": ev["device_total_bytes"], "free_at_start_bytes": ev["free_at_start_bytes"]}
        p.finish("fail", f"out of memory in phase {ev['oom']['phase']!r} at depth {args.layers}",
                 oom=True, phase=ev["oom"]["phase"])
        sys.stdout.flush()
        os._exit(4)  # peers wait in a collective; a non-zero exit lets the launcher end them at once


def _run(p, args, shape, ev, dist, reloader, tms, mode, steps) -> None:
    import torch
    from megatron.core import parallel_state as ps

    with p.phase("build"):
        ev["spec"], spec = layer_spec(args, shape)  # may raise Refusal: nothing on the GPU yet
        before_groups = device_used_bytes()
        init_parallel(args)
        # megatron's groups each hold an NCCL communicator (created eagerly: device_id is bound), device
        # memory outside torch's allocator that envbuild/train/memory.py must count
        ev["groups_device_bytes"] = device_used_bytes() - before_groups
        if tms is not None:
            mode["cpu_backup_retained"] = retain_host_shadow(tms)
            with tms.region(tag="train", enable_cpu_backup=True):
                config, ddp, optimizer = build(args, shape, spec, grouped_gemm=ev["spec"] == "te")
        else:
            config, ddp, optimizer = build(args, shape, spec, grouped_gemm=ev["spec"] == "te")
        ddp.broadcast_params()  # as megatron's trainer does: data-parallel replicas start identical
        rollout = dist.new_group(ranks=list(range(dist.get_world_size())))  # the weight-sync group
        params = sum(q.numel() for q in ddp.parameters())
        weight_bytes = sum(q.numel() * q.element_size() for q in ddp.parameters())
        ev["params_per_rank"] = params
        ev["weight_bytes_per_rank"] = weight_bytes
        ev["groups_recorded"] = len(reloader.calls)
        ev["groups_member"] = len(reloader.wrappers())
        ev["layout"] = {"tp": ps.get_tensor_model_parallel_world_size(), "pp": ps.get_pipeline_model_parallel_world_size(),
                        "ep": ps.get_expert_model_parallel_world_size(), "cp": ps.get_context_parallel_world_size(),
                        "dp": ps.get_data_parallel_world_size(), "sp": bool(args.sp)}
        batch = fixed_batch(args, shape["vocab"], ps.get_data_parallel_rank(), ps.get_context_parallel_rank())
        offloader = None  # built at the first offload, once the optimizer has created its moments
        # Adam creates its moments in the first optimizer step: that step runs inside the TMS region so
        # the moments are pausable; later steps run outside it, so their temporaries stay out of what
        # every pause copies to the host.
        opt_region = (lambda: tms.region(tag="train", enable_cpu_backup=True)) if tms is not None else None

    def timed(fn):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        return out, time.perf_counter() - t0

    bucket = args.sync_bucket_mib * MIB
    for k in range(args.steps):
        rec: Dict[str, Any] = {"step": k, "cycle": True}
        with p.phase(f"train {k}"):
            region = opt_region if k == 0 else None
            out, rec["train_s"] = timed(lambda: train_step(args, ddp, optimizer, batch, region))
            rec.update(out)
        with p.phase(f"sync {k}"):
            sync, rec["sync_s"] = timed(lambda: weight_sync(ddp, rollout, bucket))
            rec["sync_bytes"] = sync["bytes"]
            rec["sync_bad_buckets"] = sync["bad_buckets"]
        with p.phase(f"offload {k}"):
            before_sum = checksum(train_state_tensors(ddp, optimizer))
            torch.cuda.empty_cache()
            rec["used_before_offload"] = device_used_bytes()

            def offload():
                rec["groups_destroyed"] = reloader.destroy_all()
                nonlocal offloader
                if tms is not None:
                    tms.pause("train")  # the allocator's cache was emptied above; never free paused memory
                elif mode["offload"] == "move":
                    if offloader is None:
                        offloader = HostOffloader(train_state_tensors(ddp, optimizer))
                    offloader.offload()
                    torch.cuda.empty_cache()
            _, rec["offload_s"] = timed(offload)
            rec["used_after_offload"] = device_used_bytes()
            rec["released_bytes"] = rec["used_before_offload"] - rec["used_after_offload"]
        with p.phase(f"resume {k}"):
            def resume():
                if tms is not None:
                    tms.resume("train")
                elif offloader is not None:
                    offloader.resume()
            _, rec["resume_s"] = timed(resume)
            after_sum = checksum(train_state_tensors(ddp, optimizer))
            rec["state_intact"] = same_sum(after_sum, before_sum)
            if not rec["state_intact"]:
                raise RuntimeError(f"training state changed across offload/resume: checksum {before_sum!r} "
                                   f"before, {after_sum!r} after")
        with p.phase(f"rebuild {k}"):
            def rebuild():
                rec["groups_rebuilt"] = reloader.rebuild_all()
                rec["groups_probed"] = probe_groups(reloader)
            _, rec["rebuild_s"] = timed(rebuild)
        rec["used_after_step"] = device_used_bytes()
        rec["fds"] = fd_count()
        rec["cycle_s"] = sum(rec[x] for x in ("train_s", "sync_s", "offload_s", "resume_s", "rebuild_s"))
        steps.append(rec)
        progress(p, steps)

    for j in range(args.plain_steps):
        k = args.steps + j
        rec = {"step": k, "cycle": False}
        with p.phase(f"plain {k}"):
            out, rec["train_s"] = timed(lambda: train_step(args, ddp, optimizer, batch))
            rec.update(out)
        rec["used_after_step"] = device_used_bytes()
        rec["fds"] = fd_count()
        steps.append(rec)
        progress(p, steps)

    ev["steps"] = steps
    ev["sync_group_size"] = dist.get_world_size(rollout)
    ev["groups_destroyed_total"] = reloader.destroyed
    ev["new_group_calls_total"] = reloader.created
    # The verdict (loss, growth, release) is judged by envbuild from these records.
    p.finish("pass", f"{args.steps} cycle steps + {args.plain_steps} plain steps ran")
    # Destroy our groups (as every cycle did) and leave without destroying WORLD and without
    # interpreter teardown: on the lent machine destroy_process_group() of WORLD once sat for a minute
    # after a passing one-GPU run, and torch_memory_saver's hooks and NCCL's atexit handlers at exit
    # are not what this check tests (measured on the lent 2xH200, 2026-11-29: TMS in torch hook mode exits 1 there).
    with p.phase("teardown"):
        reloader.destroy_all()
        reloader.uninstall()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    Probe.run(main)
