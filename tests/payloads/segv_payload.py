"""Torch-free payload: rank 0 dies from SIGSEGV in phase 'kernel' (no result file)."""
import ctypes

from _harness import Probe


def main(p: Probe) -> None:
    with p.phase("kernel"):
        if p.rank == 0:
            ctypes.string_at(0)
    p.finish("pass", "survived")


if __name__ == "__main__":
    Probe.run(main)
