# Two DDP ranks (gloo, both on the one GPU) under torchrun train a classifier with Keras-style early stopping: each
# epoch every rank scores its own validation shard; rank 1's shard comes from a later month whose labels drifted, so
# its loss stops improving early. Started through rank_gpu.sh (CUDA_VISIBLE_DEVICES from LOCAL_RANK).
#   default: the decision uses the validation loss averaged over the ranks (all_reduce), so both ranks stop at the
#     same epoch ("EarlyStopping ... stopping"), restore the best weights and report test accuracy; healthy
#   LOCAL_DECISION=1: each rank decides on its own shard's loss (a per-rank callback): rank 1 stops first and goes to
#     the final all_gather while rank 0 trains on into DDP's gradient all_reduce
#   PATIENCE (3), MIN_DELTA (0.005), EPOCHS (60), PG_TIMEOUT (s, 20), DEVICE (cuda; cpu for a dry run)
import copy
import datetime
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "20"))))
rank, world = dist.get_rank(), dist.get_world_size()
dev = torch.device(os.environ.get("DEVICE", "cuda"))
if dev.type == "cuda":
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
local = os.environ.get("LOCAL_DECISION") == "1"
patience = int(os.environ.get("PATIENCE", "3"))
min_delta = float(os.environ.get("MIN_DELTA", "0.005"))
epochs = int(os.environ.get("EPOCHS", "60"))
name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
print(f"[rank{rank}] world {world} pid {os.getpid()} CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')} "
      f"device {dev} ({name})", flush=True)

D, C = 32, 10
g = torch.Generator().manual_seed(0)
w_true = torch.randn(D, C, generator=g)
w_drift = w_true[:, torch.randperm(C, generator=g)]  # later month: the classes moved


def make(n, seed, w, shift=0.0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, D, generator=gen) + shift
    y = (x @ w + 0.5 * torch.randn(n, C, generator=gen)).argmax(1)
    return x.to(dev), y.to(dev)


xtr, ytr = make(4096, 100 + rank, w_true)
if rank == 1:
    wv = w_true.clone()
    wv[:, :5] = w_drift[:, :5]  # half the classes drifted
    xva, yva = make(1024, 200 + rank, wv, shift=0.3)
else:
    xva, yva = make(1024, 200 + rank, w_true)
xte, yte = make(2048, 300 + rank, w_true)

torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(D, 128), torch.nn.ReLU(), torch.nn.Linear(128, C)).to(dev)
model = DDP(net)
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
lossf = torch.nn.CrossEntropyLoss()
best, best_epoch, wait, best_state = float("inf"), 0, 0, None
for epoch in range(1, epochs + 1):
    model.train()
    perm = torch.randperm(xtr.shape[0], generator=torch.Generator().manual_seed(epoch)).to(dev)
    for i in range(0, xtr.shape[0], 256):
        idx = perm[i:i + 256]
        loss = lossf(model(xtr[idx]), ytr[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        vloss = lossf(net(xva), yva)
        vacc = (net(xva).argmax(1) == yva).float().mean()
    local_v = vloss.item()
    if local:
        monitored = local_v
    else:
        t = torch.tensor([local_v, 1.0], device=dev)
        dist.all_reduce(t)
        monitored = (t[0] / t[1]).item()
    print(f"[rank{rank}] Epoch {epoch}/{epochs} - loss: {loss.item():.4f} - val_loss: {monitored:.4f} "
          f"- val_accuracy: {vacc.item():.4f}", flush=True)
    if monitored < best - min_delta:
        best, best_epoch, wait = monitored, epoch, 0
        best_state = copy.deepcopy(net.state_dict())
    else:
        wait += 1
        if wait >= patience:
            print(f"[rank{rank}] Epoch {epoch}: early stopping: val_loss did not improve by more than {min_delta} for "
                  f"{patience} epochs (best {best:.4f} at epoch {best_epoch})", flush=True)
            break
print(f"[rank{rank}] Restoring model weights from the end of the best epoch: {best_epoch}.", flush=True)
net.load_state_dict(best_state)
with torch.no_grad():
    acc = (net(xte).argmax(1) == yte).float().mean().item()
mine = torch.tensor([float(epoch), float(best_epoch), acc], device=dev)
results = [torch.zeros(3, device=dev) for _ in range(world)]
dist.all_gather(results, mine)
if rank == 0:
    print("rank  stopped  best  test_acc")
    for r, t in enumerate(results):
        print(f"{r:>4}  {int(t[0]):>7}  {int(t[1]):>4}  {t[2].item():.4f}")
    mean = sum(t[2].item() for t in results) / world
    print(f"training stopped early at epoch {epoch} of {epochs}; mean test accuracy {mean:.4f}", flush=True)
del model, opt  # DDP holds the process group: drop it before the group is destroyed, not at interpreter exit
dist.barrier()
dist.destroy_process_group()
