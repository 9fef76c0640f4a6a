# Two data-parallel ranks by hand (gloo, under torchrun; the model on the GPU, gradients averaged on the CPU).
# A checkpoint is written at step 15 to CKPT_URI (default s3://ckpt-bucket/run29, which this job cannot reach: the
# writer falls back to local disk) and every rank waits at a barrier until it is complete.
# SAVE_BARRIER=rank0 moves the barrier into the writer, which only rank 0 runs.
import datetime
import logging
import os
import time
import traceback

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=int(os.environ.get("PG_TIMEOUT", "10"))))
rank, world = dist.get_rank(), dist.get_world_size()
logging.basicConfig(level=logging.INFO, format=f"%(asctime)s [rank{rank}] %(levelname)s %(message)s")
log = logging.getLogger()
dev = torch.device("cpu") if os.environ.get("DEVICE") == "cpu" else torch.device("cuda", 0)
in_writer = os.environ.get("SAVE_BARRIER", "all") == "rank0"
uri = os.environ.get("CKPT_URI", "s3://ckpt-bucket/run29")


def write_checkpoint(state, step):
    path = f"{uri}/step_{step}.pt"
    try:
        if "://" in path:
            scheme = path.split("://")[0]
            raise OSError(f"no storage handler registered for scheme {scheme!r} (is the {scheme} plugin installed?)")
        torch.save(state, path)
    except OSError:
        log.error("checkpoint upload to %s failed:\n%s", path, traceback.format_exc().rstrip())
        os.makedirs("ckpt_local", exist_ok=True)
        path = f"ckpt_local/step_{step}.pt"
        torch.save(state, path)
        log.warning("checkpoint written locally instead: %s (%.1f MB); sync it to %s later", path,
                    os.path.getsize(path) / 1e6, uri)
    if in_writer:
        dist.barrier()  # wait until every rank knows the checkpoint exists
    return path


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.Tanh(), torch.nn.Linear(1024, 256)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(100 + rank)
for step in range(1, 31):
    x = torch.randn(64, 256, generator=g).to(dev)
    loss = (model(x) - x.flip(1)).pow(2).mean()
    opt.zero_grad(); loss.backward()
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).cpu()
    dist.all_reduce(flat)
    flat /= world
    torch.nn.utils.vector_to_parameters(flat.to(dev), [p.grad for p in model.parameters()])
    opt.step()
    if step % 5 == 0:
        log.info("step %d loss %.4f", step, loss.item())
    if step == 15:
        if rank == 0:
            p = write_checkpoint({"model": model.state_dict(), "step": step}, step)
        if not in_writer:
            dist.barrier()
        log.info("checkpoint for step %d complete on all ranks", step)
    time.sleep(0.05)
dist.barrier()
if rank == 0:
    print(f"training done: 30 steps x {world} ranks, final loss {loss.item():.4f}; last checkpoint ckpt_local/step_15.pt")
dist.destroy_process_group()
