# Two gloo ranks on the CPU (run under torchrun); MODE picks the fault (ok, stop, kill, skip, mismatch, order).
import datetime
import os
import signal
import time

import torch
import torch.distributed as dist

mode = os.environ.get("MODE", "ok")
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=int(os.environ.get("PG_TIMEOUT", "20"))))
r = dist.get_rank()
if mode == "stop" and r == 1:
    print(f"[rank{r}] stopping myself with SIGSTOP before the all_reduce", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
if mode == "kill" and r == 1:
    print(f"[rank{r}] leaving with SIGKILL before the all_reduce", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "skip" and r == 1:
    time.sleep(40)
x = torch.ones(3 if (mode == "mismatch" and r == 1) else 2)
if mode == "order" and r == 1:
    dist.barrier()  # rank 1 calls the collectives in another order than rank 0
dist.all_reduce(x)
print(f"[rank{r}] all_reduce ok {x.tolist()}", flush=True)
dist.barrier()
dist.destroy_process_group()
