"""Torch-free payload: the last rank hangs in phase 'collective' (a sleep loop); the others finish.

With argument 'children' every rank first starts two sleeping children, one of which leaves the
process group (setsid), to prove the launcher kills descendants too.
"""
import subprocess
import sys
import time

from _harness import Probe


def main(p: Probe) -> None:
    with p.phase("setup"):
        if "children" in sys.argv[1:]:
            kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]),
                    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                     start_new_session=True)]
            with open(p.path(".kids"), "w") as fh:
                fh.write(" ".join(str(k.pid) for k in kids))
    with p.phase("collective"):
        if p.rank == p.world_size - 1 or "all" in sys.argv[1:]:
            while True:
                time.sleep(0.1)
    p.finish("pass", "not the hanging rank")


if __name__ == "__main__":
    Probe.run(main)
