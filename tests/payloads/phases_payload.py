"""Torch-free payload shaped like a probe: an init phase, four work phases with a short gap outside any phase
between two of them, about 3 s in all. benchmarks/stop_rank.py stops one of its ranks at random moments on a
CPU machine (the launcher is the same for every payload)."""
import time

from _harness import Probe


def main(p: Probe) -> None:
    with p.phase("init"):
        time.sleep(0.5)
    for k in range(4):
        with p.phase(f"work {k}"):
            time.sleep(0.5)
        if k == 1:
            time.sleep(0.3)  # between two phases
    p.finish("pass", "all phases done")


if __name__ == "__main__":
    Probe.run(main)
