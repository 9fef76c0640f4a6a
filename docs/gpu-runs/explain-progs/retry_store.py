# A rendezvous whose master comes up late: the first connects time out and are retried, then a one-rank NCCL
# group is made over the store and all_reduces (a healthy run that prints connect errors it recovered from).
import datetime
import socket
import time

import torch
import torch.distributed as dist

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
print(f"torch {torch.__version__}; rendezvous at 127.0.0.1:{port}", flush=True)
server = store = None
for attempt in range(1, 6):
    try:
        store = dist.TCPStore("127.0.0.1", port, 1, False, timeout=datetime.timedelta(seconds=2))
        break
    except Exception as e:
        print(f"WARNING rendezvous attempt {attempt}/5 failed: {type(e).__name__}: {e}; retrying in 1 s", flush=True)
        if attempt == 2:  # the master process starts its store now
            server = dist.TCPStore("127.0.0.1", port, 1, True, wait_for_workers=False)
        time.sleep(1)
if store is None:
    raise SystemExit("no rendezvous after 5 attempts")
print("rendezvous ok", flush=True)
dev = torch.device("cuda:0")
dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=dev,
                        timeout=datetime.timedelta(minutes=10))
x = torch.ones(1 << 20, device=dev)
dist.all_reduce(x)
torch.cuda.synchronize()
print("all_reduce ok", x[0].item(), flush=True)
dist.destroy_process_group()
