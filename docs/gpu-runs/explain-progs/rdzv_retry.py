# A worker joining a multi-node job: it connects to the rendezvous store at MASTER_ADDR:MASTER_PORT (the head node)
# with a short timeout per try, retrying ATTEMPTS times, then joins a gloo group and trains. (The one rank given here
# is rank 1 of 2; the head node's rank 0 runs elsewhere.)
import datetime
import os
import time

import torch
import torch.distributed as dist

addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
attempts, per_try = int(os.environ.get("ATTEMPTS", "4")), float(os.environ.get("TRY_S", "3"))
print(f"torch {torch.__version__}; rank 1/2 on {os.uname().nodename}; rendezvous {addr}:{port}", flush=True)
store = None
for attempt in range(1, attempts + 1):
    t0 = time.time()
    try:
        store = dist.TCPStore(addr, port, 2, False, timeout=datetime.timedelta(seconds=per_try))
        break
    except Exception as e:
        print(f"WARNING rendezvous attempt {attempt}/{attempts} failed after {time.time() - t0:.1f} s: "
              f"{type(e).__name__}: {e}", flush=True)
        if attempt == attempts:
            raise RuntimeError(f"could not reach the rendezvous at {addr}:{port} after {attempts} attempts") from e
        time.sleep(1)
dist.init_process_group("gloo", store=store, rank=1, world_size=2)
