# An incident-routing model: a hashed character-trigram bag (EmbeddingBag) classifier that sorts lines from GPU job
# logs into the team that should look at them. Its training lines are made from templates (GPU out-of-memory
# messages, NCCL warnings, Xid lines, import/ABI errors, device asserts, ordinary progress lines); after training it
# prints its predictions for held-out lines, quoted, and a per-class table. The lines it prints are its data: this
# job itself is healthy.
#   default: 250 steps on the GPU, sample predictions, a precision/recall table, the model saved; healthy
#   TB=1: metrics also go to TensorBoard (torch.utils.tensorboard is imported at start-up)
#   STEPS (250), DEVICE (cuda; cpu for a dry run)
import os
import random
import time

import torch

if os.environ.get("TB") == "1":
    from torch.utils.tensorboard import SummaryWriter
else:
    SummaryWriter = None

dev = torch.device(os.environ.get("DEVICE", "cuda"))
steps = int(os.environ.get("STEPS", "250"))
BUCKETS = 1 << 18
CLASSES = ["memory", "comm", "hardware", "packaging", "code", "info"]
TEMPLATES = {
    "memory": ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {a}.00 GiB. GPU {g} has a total capacity "
               "of 79.19 GiB of which {b}.25 MiB is free.",
               "RuntimeError: CUDA error: out of memory",
               "CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
               "NCCL WARN Cuda failure 'out of memory' at alloc.h:{n}"],
    "comm": ["NCCL WARN NET/Socket : connect to 10.0.{g}.{n}<{p}> failed : Connection refused",
             "Watchdog caught collective operation timeout: WorkNCCL(SeqNum={n}, OpType=ALLREDUCE) ran for 600000 "
             "milliseconds before timing out.", "torch.distributed.DistNetworkError: Connection reset by peer",
             "[E ProcessGroupNCCL.cpp:{n}] [Rank {g}] NCCL watchdog thread terminated with exception"],
    "hardware": ["NVRM: Xid (PCI:0000:{g}b:00): 79, pid={n}, GPU has fallen off the bus.",
                 "NVRM: Xid (PCI:0000:{g}b:00): 48, pid={n}, An uncorrectable double bit error (DBE) has been detected",
                 "RuntimeError: CUDA error: uncorrectable ECC error encountered",
                 "nvidia-smi: Unable to determine the device handle for GPU{g}: Unknown Error"],
    "packaging": ["ImportError: flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: "
                  "_ZN3c104cuda9SetDeviceEi",
                  "ImportError: libcudart.so.{g}: cannot open shared object file: No such file or directory",
                  "RuntimeError: The NVIDIA driver on your system is too old (found version {n}).",
                  "ModuleNotFoundError: No module named 'torch._six'"],
    "code": ["RuntimeError: CUDA error: device-side assert triggered",
             "../aten/src/ATen/native/cuda/Loss.cu:{n}: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], "
             "thread: [{g},0,0] Assertion `t >= 0 && t < n_classes` failed.",
             "RuntimeError: CUDA error: an illegal memory access was encountered",
             "RuntimeError: mat1 and mat2 shapes cannot be multiplied ({n}x{a} and {b}x{p})"],
    "info": ["step {n}/{p} loss 2.{a}{b} lr 3.0e-04 tokens/s {p}", "Saving checkpoint to /ckpt/step_{n}.pt",
             "[rank{g}] world 8 pid {n} device cuda:{g}", "epoch {a} done in {b}.{g} s, val_loss 1.{n}"],
}


def render(t, rng):
    return t.format(a=rng.randint(1, 64), b=rng.randint(0, 999), g=rng.randint(0, 7), n=rng.randint(10, 99999),
                    p=rng.randint(1000, 60000))


def featurize(lines):
    ids, offs = [], []
    for s in lines:
        offs.append(len(ids))
        s = f"^{s.lower()}$"
        ids.extend(hash(s[i:i + 3]) % BUCKETS for i in range(len(s) - 2))
    return torch.tensor(ids, device=dev), torch.tensor(offs, device=dev)


class Router(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.EmbeddingBag(BUCKETS, 128, mode="mean")
        self.head = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, len(CLASSES)))

    def forward(self, ids, offs):
        return self.head(self.emb(ids, offs))


def batch(rng, n):
    lab = [rng.randrange(len(CLASSES)) for _ in range(n)]
    lines = [render(rng.choice(TEMPLATES[CLASSES[c]]), rng) for c in lab]
    return lines, torch.tensor(lab, device=dev)


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    writer = SummaryWriter("runs/log-router") if SummaryWriter else None
    model = Router().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    t0 = time.time()
    for step in range(1, steps + 1):
        lines, y = batch(rng, 256)
        loss = torch.nn.functional.cross_entropy(model(*featurize(lines)), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if writer:
            writer.add_scalar("train/loss", loss.item(), step)
        if step % 50 == 0:
            print(f"step {step}/{steps} loss {loss.item():.4f} ({time.time() - t0:.1f} s)", flush=True)
    model.eval()
    test_rng = random.Random(7)
    lines, y = batch(test_rng, 2000)
    with torch.no_grad():
        prob = torch.softmax(model(*featurize(lines)), -1)
    pred = prob.argmax(1)
    print("\nsample predictions (held-out lines):")
    shown = [i for c in range(len(CLASSES)) for i in (y == c).nonzero().flatten()[:2].tolist()]
    for i in shown:
        c = int(pred[i])
        print(f"  {CLASSES[c]:<9} {prob[i, c].item():.2f}  \"{lines[i]}\"")
    print(f"\n{'class':<10}{'precision':>10}{'recall':>8}{'support':>9}")
    for c, name in enumerate(CLASSES):
        tp = int(((pred == c) & (y == c)).sum())
        npred, nsup = int((pred == c).sum()), int((y == c).sum())
        print(f"{name:<10}{tp / max(npred, 1):>10.3f}{tp / max(nsup, 1):>8.3f}{nsup:>9}")
    acc = (pred == y).float().mean().item()
    os.makedirs("router-out", exist_ok=True)
    torch.save(model.state_dict(), "router-out/log-router.pt")
    if writer:
        writer.close()
    print(f"\naccuracy {acc:.4f} on {len(lines)} held-out lines; model saved to router-out/log-router.pt", flush=True)


if __name__ == "__main__":
    main()
