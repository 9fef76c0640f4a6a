"""`--set train.*` options of the train-step check: what each one is (help, kind, bounds) and their defaults.

The doctor declares these as registry Options (envbuild/doctor/checks/train_moe_step.py) and its settings parse
the user's strings once, refusing an unknown key or a value out of its type or bounds with exit 2 before any
work; `train_options` only gathers the typed values into TrainOptions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

from envbuild.train.presets import PRESETS

PREFIX = "train."
DEFAULT_LAYERS = 4  # quick: 4 of the real 48 layers keep one step well under a second on an H200
DEFAULT_SEQ = 4096
# --full runs 3 slime cycles (each ~60-80x a plain step with torch_memory_saver's CPU backup: 10 took over 570 s on
# one H200, 3 kept the whole --full at 259 s); `doctor --soak N` (= --set train.steps=N) runs long cycle counts.
STEPS_BY_MODE = {"static": 3, "quick": 3, "full": 3}

HELP = {
    "layers": "model depth (the real model has 48)",
    "steps": "steps with the slime cycle (default 3; `doctor --soak N` sets it)",
    "plain_steps": "steps without the cycle, timed for the overhead ratio (default 3)",
    "tp": "tensor-parallel size", "sp": "sequence parallel (0/1; default 1 when TP > 1)",
    "ep": "expert-parallel size", "pp": "pipeline-parallel size", "cp": "context-parallel size",
    "seq": "sequence length (default 4096)", "mbs": "micro-batch size (default 1)",
    "offload": "auto (torch_memory_saver when installed, else host copy) | tms | move | none",
    "spec": "auto (Transformer Engine when installed) | local | te",
    "lr": "Adam learning rate (default 3e-4)", "deadline": "seconds the whole run may take (default: by steps)", "preset": f"model shape ({', '.join(sorted(PRESETS))})",
}
# The kind of every option but sp (0/1) and lr (a positive number), and the bounds of the numbers (inclusive):
# a value outside them cannot be meant (the preset model has 48 layers; no soak runs a week), so it
# is refused before a run rather than laid out, allocated or waited for.
INTS = {"layers", "steps", "plain_steps", "tp", "ep", "pp", "cp", "seq", "mbs", "deadline"}
BOUNDS = {"layers": (1, 1024), "steps": (1, 100_000), "plain_steps": (0, 100_000), "tp": (1, 1024),
          "ep": (1, 1024), "pp": (1, 1024), "cp": (1, 1024), "seq": (1, 1 << 20), "mbs": (1, 4096),
          "deadline": (1, 7 * 86400), "lr": (0.0, 1.0)}
LOW_OPEN = {"lr"}  # a learning rate of 0 trains nothing
CHOICES = {"offload": ("auto", "tms", "move", "none"), "spec": ("auto", "local", "te"),
            "preset": tuple(sorted(PRESETS))}


@dataclass(frozen=True)
class TrainOptions:
    preset: str = "qwen3-30b-a3b"
    layers: int = DEFAULT_LAYERS
    steps: int = 3
    plain_steps: int = 3
    seq: int = DEFAULT_SEQ
    mbs: int = 1
    tp: Optional[int] = None
    sp: Optional[bool] = None
    ep: Optional[int] = None
    pp: Optional[int] = None
    cp: Optional[int] = None
    offload: str = "auto"
    spec: str = "auto"
    lr: float = 3e-4
    deadline: Optional[int] = None


def train_options(options: Mapping[str, Any], mode: str = "static") -> TrainOptions:
    """TrainOptions from the typed `train.*` values of the run's settings (other keys belong to other checks)."""
    values: Dict[str, Any] = {"steps": STEPS_BY_MODE.get(mode, 3)}
    for key, value in options.items():
        if key.startswith(PREFIX) and key[len(PREFIX):] in HELP:
            values[key[len(PREFIX):]] = value
    return TrainOptions(**values)
