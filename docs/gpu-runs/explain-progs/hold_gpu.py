# Holds most of the GPU's memory and sleeps: a process left over from an earlier run.
import sys
import time

import torch

free, total = torch.cuda.mem_get_info()
held = torch.empty(int(free * float(sys.argv[1])), dtype=torch.uint8, device="cuda")
print(f"holding {held.numel() >> 30} GiB of {total >> 30} GiB", flush=True)
time.sleep(float(sys.argv[2]))
