# A Megatron-style pretraining loop for a tiny GPT on one GPU: looks for the checkpoint tracker file and starts from
# random when there is none (Megatron's warning), fp16 with a dynamic loss scaler starting at 2**32 (the first
# iterations overflow and are skipped, counted in the iteration lines), a validation block and a final save.
import datetime
import math
import os
import time

import torch
import torch.nn.functional as F


def stamp(what):
    print(f"[{what}] datetime: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S')} ", flush=True)


ITERS = int(os.environ.get("TRAIN_ITERS", "60"))
LOG = int(os.environ.get("LOG_INTERVAL", "10"))
SAVE = os.environ.get("SAVE", "checkpoints/gpt-tiny")
V, H, S, GBS = 32000, 512, 256, 16
print("using world size: 1, data-parallel size: 1, context-parallel size: 1, tensor-model-parallel size: 1, "
      "pipeline-model-parallel size: 1", flush=True)
print(f"> setting random seeds to 1234 ...\n> compiling dataset index builder ... (torch {torch.__version__})", flush=True)
torch.manual_seed(1234)


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, H)
        layer = torch.nn.TransformerEncoderLayer(H, 8, 4 * H, dropout=0.0, batch_first=True, norm_first=True)
        self.layers = torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        self.head = torch.nn.Linear(H, V, bias=False)

    def forward(self, ids):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(ids.shape[1], device=ids.device)
        return self.head(self.layers(self.emb(ids), mask=mask, is_causal=True))


model = GPT().cuda()
n = sum(p.numel() for p in model.parameters())
print(f" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): {n}", flush=True)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
tracker = os.path.join(SAVE, "latest_checkpointed_iteration.txt")
if os.path.exists(tracker):
    raise SystemExit(f"a checkpoint exists in {SAVE}; this loop only starts fresh")
print(f"WARNING: could not find the metadata file {tracker} ", flush=True)
print("    will not load any checkpoints and will start from random", flush=True)
stamp("after model, optimizer, and learning rate scheduler are built")
print("> building train, validation, and test datasets ...\n > finished creating GPT datasets ...", flush=True)
stamp("after dataloaders are built")
print("done with setup ...\ntraining ...", flush=True)
scaler = torch.amp.GradScaler("cuda", init_scale=2.0 ** 32, growth_interval=1000)
data = torch.Generator(device="cuda").manual_seed(7)
skipped = nans = 0
t0 = time.time()
for it in range(1, ITERS + 1):
    ids = torch.randint(V, (GBS, S + 1), device="cuda", generator=data)
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, V), ids[:, 1:].reshape(-1))
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
    before = scaler.get_scale()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    if scaler.get_scale() < before:
        skipped += 1
        nans += 0 if math.isinf(gnorm) else int(math.isnan(gnorm))
    if it % LOG == 0:
        ms = (time.time() - t0) * 1000 / LOG
        print(f" iteration {it:8d}/{ITERS:8d} | consumed samples: {it * GBS:12d} | elapsed time per iteration (ms): "
              f"{ms:.1f} | learning rate: {3e-4:.6E} | global batch size: {GBS:5d} | lm loss: {loss.item():.6E} | "
              f"loss scale: {scaler.get_scale():.1f} | grad norm: {gnorm:.3f} | number of skipped iterations: "
              f"{skipped:3d} | number of nan iterations: {nans:3d} |", flush=True)
        skipped = nans = 0
        t0 = time.time()
model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
    ids = torch.randint(V, (GBS, S + 1), device="cuda", generator=data)
    val = F.cross_entropy(model(ids[:, :-1]).float().view(-1, V), ids[:, 1:].reshape(-1)).item()
line = (f" validation loss at iteration {ITERS} on validation set | lm loss value: {val:.6E} | "
        f"lm loss PPL: {math.exp(min(val, 50)):.6E} | ")
print("-" * len(line) + "\n" + line + "\n" + "-" * len(line), flush=True)
print(f"saving checkpoint at iteration {ITERS:7d} to {SAVE} in torch format", flush=True)
os.makedirs(f"{SAVE}/iter_{ITERS:07d}", exist_ok=True)
torch.save({"model": model.state_dict(), "iteration": ITERS}, f"{SAVE}/iter_{ITERS:07d}/model_optim_rng.pt")
with open(tracker, "w") as f:
    f.write(str(ITERS))
print(f"  successfully saved checkpoint from iteration {ITERS:7d} to {SAVE}", flush=True)
stamp("after training is done")
