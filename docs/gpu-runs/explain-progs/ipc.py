# Share a CUDA tensor with a child through torch.multiprocessing (CUDA IPC), under PYTORCH_CUDA_ALLOC_CONF.
import os

import torch
import torch.multiprocessing as mp


def child(q):
    t = q.get(timeout=30)
    print("child got", t.sum().item(), flush=True)


if __name__ == "__main__":
    mp.set_start_method("spawn")
    print(f"torch {torch.__version__}; PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF')}", flush=True)
    q = mp.Queue()
    p = mp.Process(target=child, args=(q,))
    p.start()
    t = torch.ones(1 << 20, device="cuda")
    q.put(t)
    p.join(60)
    print("child exit code", p.exitcode, flush=True)
    raise SystemExit(0 if p.exitcode == 0 else 1)
