"""Session 12 (issue 22): PyTorch NCCL flight-recorder dumps made on the GPU, for the CPU tests to replay
(tests/record/fixtures/fr-*). One rank, one GPU (NCCL allows no two ranks on one GPU):

  pending  the rank queues an all_reduce behind a 20 s GPU sleep and dumps its flight recorder by hand
           (torch._C._distributed_c10d._dump_nccl_trace) while the collective waits: a dump whose last entry
           never completed, as a hung rank's would be;
  timeout  the same with a 4 s process-group timeout and TORCH_NCCL_DUMP_ON_TIMEOUT=1: does the watchdog write the
           dump itself before it aborts (the ncclhang job of s8-record.sh left none)?

    python3 docs/gpu-runs/s12_fr_capture.py MODE OUT_DIR
Writes OUT_DIR/<mode>.nccl_trace_rank_0 (when torch writes one) and prints what happened as one JSON line."""
import datetime
import json
import os
import sys
import tempfile
import time

mode, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
os.environ.setdefault("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000")
os.environ["TORCH_FR_DUMP_TEMP_FILE"] = os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = \
    os.path.join(out, mode + ".nccl_trace_rank_")
os.environ["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1"
os.environ.setdefault("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", "8000")
import torch
import torch.distributed as dist

store = dist.FileStore(tempfile.mktemp(prefix="fr-store-"), 1)
torch.cuda.set_device(0)
timeout = datetime.timedelta(seconds=4 if mode == "timeout" else 120)
dist.init_process_group("nccl", store=store, rank=0, world_size=1, timeout=timeout,
                        device_id=torch.device("cuda", 0))
x = torch.ones(1 << 20, device="cuda")
for _ in range(3):  # completed entries before the one that hangs
    dist.all_reduce(x)
torch.cuda.synchronize()
torch.cuda._sleep(int(20 * 1.9e9))  # ~20 s of GPU clock cycles ahead of the next collective
dist.all_reduce(x)
report = {"mode": mode, "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version()))}
if mode == "pending":
    time.sleep(1.0)
    data = torch._C._distributed_c10d._dump_nccl_trace()
    with open(os.path.join(out, "pending.nccl_trace_rank_0"), "wb") as fh:
        fh.write(data)
    report["bytes"] = len(data)
    print(json.dumps(report), flush=True)
    os._exit(0)
t0 = time.time()
try:
    torch.cuda.synchronize()
    report["synchronized_after_s"] = round(time.time() - t0, 1)
except Exception as exc:  # the watchdog's abort may surface here
    report["error"] = f"{type(exc).__name__}: {exc}"[:300]
report["files"] = sorted(os.listdir(out))
print(json.dumps(report), flush=True)
os._exit(0)
