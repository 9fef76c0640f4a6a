"""Parallel layout of the train-step check: TP, SP, EP, PP, CP from flags, the rest derived.

Megatron-core lays a world of N GPUs out twice: the dense part as TP x CP x DP x PP and the expert
part as ETP x EP x EDP x PP. The check fixes the expert tensor-parallel size ETP to 1, as slime's
Qwen3-30B-A3B script does (--expert-tensor-parallel-size 1), so experts are split only by EP.

Defaults follow slime's 8-GPU example (TP 4 with sequence parallel, EP 8, PP 1), scaled to the GPUs
present: the largest TP in (4, 2, 1) that divides the GPUs and the query groups, the largest EP that
divides both the GPUs and the experts. Every rule megatron-core would reject later, deep in a
traceback, is checked here first and reported as one sentence naming the flag.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional

from envbuild.train.presets import ModelShape


class LayoutError(ValueError):
    """A layout that cannot run; the message names the flag and says what would."""


@dataclass(frozen=True)
class Layout:
    world: int
    tp: int
    sp: bool
    ep: int
    pp: int
    cp: int
    etp: int = 1

    @property
    def dp(self) -> int:
        """Data-parallel size of the dense part (what the distributed optimizer shards dense state over)."""
        return self.world // (self.tp * self.pp * self.cp)

    @property
    def edp(self) -> int:
        """Data-parallel size of the expert part (what expert optimizer state is sharded over)."""
        return self.world // (self.etp * self.ep * self.pp)

    def describe(self) -> str:
        """One phrase for summaries, every size spelled out so a reader can rerun the same layout."""
        sp = " + SP" if self.sp else ""
        return (f"TP {self.tp}{sp}, EP {self.ep}, PP {self.pp}, CP {self.cp}, DP {self.dp} "
                f"on {self.world} GPU{'s' if self.world != 1 else ''}")

    def to_dict(self) -> Dict[str, Any]:
        """The fields plus the derived DP and EDP, for the evidence (JSON)."""
        data = asdict(self)
        data.update(dp=self.dp, edp=self.edp)
        return data


def _divisors_desc(n: int) -> List[int]:
    return [d for d in range(n, 0, -1) if n % d == 0]


def default_tp(world: int, shape: ModelShape) -> int:
    """slime's TP 4 where the GPUs, heads and query groups allow it, else 2, else 1."""
    for t in (4, 2, 1):
        if world % t == 0 and shape.query_groups % t == 0 and shape.heads % t == 0:
            return t
    return 1


def default_ep(world: int, pp: int, shape: ModelShape) -> int:
    """The largest EP that divides both the GPUs of one pipeline stage and the experts (slime runs EP = GPUs)."""
    room = world // pp if world % pp == 0 else 1
    return next(d for d in _divisors_desc(room) if shape.experts % d == 0)


def derive_layout(world: int, shape: ModelShape, layers: int, seq: int, *, tp: Optional[int] = None,
                  sp: Optional[bool] = None, ep: Optional[int] = None, pp: Optional[int] = None,
                  cp: Optional[int] = None) -> Layout:
    """The layout for `world` GPUs; flags left None are derived. Raises LayoutError with a clear message."""
    if world < 1:
        raise LayoutError("no GPU to lay the model out on")
    for flag, value in (("train.tp", tp), ("train.ep", ep), ("train.pp", pp), ("train.cp", cp),
                        ("train.layers", layers), ("train.seq", seq)):
        if value is not None and value < 1:
            raise LayoutError(f"{flag}={value}: must be a positive integer")
    pp = 1 if pp is None else pp
    cp = 1 if cp is None else cp
    tp = default_tp(world // (pp * cp) if world % (pp * cp) == 0 else 1, shape) if tp is None else tp
    sp = tp > 1 if sp is None else sp
    ep = default_ep(world, pp, shape) if ep is None else ep
    gpus = f"the {world} GPU{'s' if world != 1 else ''}"

    if world % (tp * pp * cp):
        raise LayoutError(f"TP {tp} x PP {pp} x CP {cp} = {tp * pp * cp} does not divide {gpus}; "
                          f"choose train.tp/train.pp/train.cp whose product divides {world}")
    if shape.experts % ep:
        raise LayoutError(f"train.ep={ep} does not divide the {shape.experts} experts; "
                          f"use one of {[d for d in _divisors_desc(shape.experts) if d <= world][::-1]}")
    if world % (ep * pp):
        raise LayoutError(f"EP {ep} x PP {pp} = {ep * pp} does not divide {gpus} "
                          f"(experts use ETP 1, so EP x PP must divide the GPUs)")
    if shape.heads % tp or shape.query_groups % tp:
        raise LayoutError(f"train.tp={tp} does not divide the {shape.query_groups} query groups and "
                          f"{shape.heads} heads of {shape.name}")
    if sp and tp == 1:
        raise LayoutError("train.sp=1 needs train.tp > 1: sequence parallel splits the sequence across "
                          "the tensor-parallel group")
    if tp > 1 and not sp:
        raise LayoutError(f"train.tp={tp} with train.sp=0: megatron-core refuses to train MoE layers with "
                          f"tensor parallel but without sequence parallel; set train.sp=1")
    if layers % pp:
        raise LayoutError(f"train.pp={pp} does not divide train.layers={layers}")
    if sp and seq % tp:
        raise LayoutError(f"train.seq={seq} is not a multiple of TP {tp} (sequence parallel splits it)")
    if cp > 1 and seq % (2 * cp):
        raise LayoutError(f"train.seq={seq} is not a multiple of 2 x CP = {2 * cp} (context parallel "
                          f"splits it into 2 x CP chunks)")
    return Layout(world=world, tp=tp, sp=sp, ep=ep, pp=pp, cp=cp)


def padded_vocab(vocab: int, tp: int, multiple: int = 128) -> int:
    """Vocabulary padded as Megatron does (--make-vocab-size-divisible-by 128, times TP)."""
    step = multiple * tp
    return -(-vocab // step) * step
