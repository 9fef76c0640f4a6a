"""Torch-free payload: every rank passes through two phases and emits a result."""
import os

from _harness import Probe


def main(p: Probe) -> None:
    with p.phase("work"):
        p.metric("value", p.rank * 10 + 1, "count")
        p.evidence["pid"] = os.getpid()
        for key in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "CUDA_VISIBLE_DEVICES", "ENVBUILD_GPU",
                    "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "EXTRA", "PER_RANK"):
            p.evidence[key] = os.environ.get(key)
        with open("/proc/self/status") as fh:  # the launcher must not hand its held-back stop signals down
            p.evidence["sig_blocked"] = next(ln.split()[1] for ln in fh if ln.startswith("SigBlk:"))
    p.finish("pass", f"rank {p.rank} of {p.world_size} ok")


if __name__ == "__main__":
    Probe.run(main)
