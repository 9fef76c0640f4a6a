"""`--set train.*` options of the train-step check: parsing, defaults and their errors.

Options arrive as strings from the CLI (`--set train.layers=4`). Every malformed or unknown key is
an OptionError naming the key, so a typo never silently runs the default.
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
# the kind of every option but sp (0/1) and lr (a positive number); the doctor declares them from these
INTS = {"layers", "steps", "plain_steps", "tp", "ep", "pp", "cp", "seq", "mbs", "deadline"}
CHOICES = {"offload": ("auto", "tms", "move", "none"), "spec": ("auto", "local", "te"),
            "preset": tuple(sorted(PRESETS))}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


class OptionError(ValueError):
    """A `--set train.*` value that cannot be used; the message names the key."""


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


def known_keys() -> str:
    """Every option with its prefix, for the error that names an unknown key."""
    return ", ".join(PREFIX + k for k in HELP)


def parse_options(options: Mapping[str, Any], mode: str = "static") -> TrainOptions:
    """TrainOptions from the `train.*` entries of ctx.options (other keys belong to other checks)."""
    values: Dict[str, Any] = {"steps": STEPS_BY_MODE.get(mode, 3)}
    for key, raw in options.items():
        if not key.startswith(PREFIX):
            continue
        name = key[len(PREFIX):]
        text = str(raw).strip()
        if name not in HELP:
            raise OptionError(f"unknown option {key}; known: {known_keys()}")
        if name in INTS:
            try:
                value: Any = int(text)
            except ValueError:
                raise OptionError(f"{key}={text!r}: expected a whole number ({HELP[name]})") from None
            if value < (0 if name == "plain_steps" else 1):
                raise OptionError(f"{key}={value}: must be at least {0 if name == 'plain_steps' else 1}")
        elif name == "sp":
            if text.lower() not in _TRUE | _FALSE:
                raise OptionError(f"{key}={text!r}: expected 0 or 1")
            value = text.lower() in _TRUE
        elif name == "lr":
            try:
                value = float(text)
            except ValueError:
                raise OptionError(f"{key}={text!r}: expected a number such as 3e-4") from None
            if not value > 0:
                raise OptionError(f"{key}={text}: must be positive")
        else:
            if text not in CHOICES[name]:
                raise OptionError(f"{key}={text!r}: expected one of {', '.join(CHOICES[name])}")
            value = text
        values[name] = value
    return TrainOptions(**values)
