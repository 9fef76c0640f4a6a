# The trainer publishes its weights to rollout workers through shared memory (tensor.share_memory_()), then a
# spawned worker reads them.
import faulthandler

import torch
import torch.multiprocessing as mp

faulthandler.enable()


def rollout_worker(q):
    sd = q.get(timeout=30)
    print(f"[rollout] got {len(sd)} tensors, {sum(t.numel() for t in sd.values()) * 4 >> 20} MiB", flush=True)


if __name__ == "__main__":
    print(f"torch {torch.__version__}; sharing strategy {mp.get_sharing_strategy()}", flush=True)
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(4)]).cuda()
    sd = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    print(f"publishing {len(sd)} tensors, {sum(t.numel() for t in sd.values()) * 4 >> 20} MiB", flush=True)
    for v in sd.values():
        v.share_memory_()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=rollout_worker, args=(q,))
    p.start()
    q.put(sd)
    p.join(60)
    print("rollout worker exit code", p.exitcode, flush=True)
    raise SystemExit(p.exitcode or 0)
