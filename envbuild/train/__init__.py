"""The train-step check's arithmetic, kept free of torch so CI and the doctor process can use it.

presets.py  model shapes (Qwen3-30B-A3B), layout.py  parallel layout from flags and GPU count,
flops.py    FLOPs per token and MFU, peaks.py  dense bf16 peak by GPU SKU (with sources),
memory.py   bytes per rank and the depth that would fit, options.py  the `--set train.*` options,
assess.py   the verdict from the payload's per-step records.
"""
