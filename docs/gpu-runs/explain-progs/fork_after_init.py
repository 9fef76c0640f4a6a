# CUDA used in a child forked after the parent initialised CUDA.
import multiprocessing as mp

import torch

torch.zeros(1, device="cuda")


def child():
    torch.zeros(1, device="cuda")


if __name__ == "__main__":
    mp.set_start_method("fork")
    p = mp.Process(target=child)
    p.start()
    p.join()
    print("child exit code", p.exitcode)
    raise SystemExit(p.exitcode or 0)
