"""Torch-free payload whose rank answers, then spends its teardown as TEARDOWN_MODE says: "slow" (sleeps
TEARDOWN_S), "hang" (never ends), "crash" (exits 7 after TEARDOWN_S). TEARDOWN_SETTLE=1: it first waits for an earlier launch's
ranks still exiting (Probe.settle) and reports that wait. TEARDOWN_FIRST_RECORD=1: it writes a first record (an
"error" result a later one replaces, as comm_weight_sync.py does) TEARDOWN_S before its final one."""
import os
import time

from _harness import Probe


def main(p: Probe) -> None:
    pause = float(os.environ.get("TEARDOWN_S", "1.5"))
    if os.environ.get("TEARDOWN_SETTLE") == "1":
        p.settle()
    if os.environ.get("TEARDOWN_FIRST_RECORD") == "1":
        p.emit({"status": "error", "summary": "first record", "preliminary": True})
        time.sleep(pause)
    with p.phase("work"):
        p.evidence["pid"] = os.getpid()
        p.evidence["settled_at"] = time.time()
    p.finish("pass", f"rank {p.rank} answered")
    mode = os.environ.get("TEARDOWN_MODE", "slow")
    with p.phase("teardown"):
        time.sleep(10_000 if mode == "hang" else pause)
        if mode == "crash":
            os._exit(7)


if __name__ == "__main__":
    Probe.run(main)
