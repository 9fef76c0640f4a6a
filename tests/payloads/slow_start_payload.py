"""Torch-free payload whose last rank is stuck before its first phase, as a rank whose import or cuInit wedges:
argument 'sleep' makes it sleep there, 'stop' makes it SIGSTOP itself there; the other ranks finish. Argument
'gap' instead makes every rank sleep between its two phases, outside any phase (a wait with no phase of its own).
"""
import os
import signal
import sys
import time

from _harness import Probe


def main(p: Probe) -> None:
    last = p.rank == p.world_size - 1
    if last and "sleep" in sys.argv[1:]:
        time.sleep(600)
    if last and "stop" in sys.argv[1:]:
        os.kill(os.getpid(), signal.SIGSTOP)
    with p.phase("first"):
        pass
    if last and "gap" in sys.argv[1:]:
        time.sleep(600)
    with p.phase("second"):
        pass
    p.finish("pass", "started in time")


if __name__ == "__main__":
    Probe.run(main)
