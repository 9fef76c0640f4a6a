"""Torch-free payload: rank 1 raises in phase 'compute'; rank 0 then waits forever for it."""
import time

from _harness import Probe


def main(p: Probe) -> None:
    with p.phase("compute"):
        if p.rank == 1:
            raise RuntimeError("injected failure: Cuda failure 999 'unknown error'")
        while True:
            time.sleep(0.1)


if __name__ == "__main__":
    Probe.run(main)
