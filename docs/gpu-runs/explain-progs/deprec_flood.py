# A training script written for torch 1.x, run on a new torch with every warning shown each time
# (warnings.simplefilter("always"), as its debug config does): the old TF32 flags, torch.cuda.amp.autocast and
# GradScaler, torch.backends.cuda.sdp_kernel, activation checkpointing without use_reentrant (a compat shim passes
# use_reentrant=False where the new torch refuses the call, logging the refusal with its traceback), the scheduler's
# get_lr() and a non-leaf .grad read in the logging. Each step's warnings repeat; training ends normally. Healthy.
#   STEPS, DEVICE (cuda; cpu for a dry run, where the cuda-only calls warn about CUDA being absent)
import logging
import os
import warnings

import torch
import torch.nn.functional as F
import torch.utils.checkpoint as ckpt

warnings.simplefilter("always")
logging.basicConfig(level=logging.INFO, format="%(asctime)s - %(name)s - %(levelname)s - %(message)s")
log = logging.getLogger("legacy_train")
dev = torch.device(os.environ.get("DEVICE", "cuda"))
STEPS = int(os.environ.get("STEPS", "25"))

torch.backends.cuda.matmul.allow_tf32 = True  # torch 1.x way to turn TF32 on
torch.backends.cudnn.allow_tf32 = True
torch.backends.cudnn.benchmark = True


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)
        self.ff = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, 8, d // 8).permute(2, 0, 3, 1, 4)
        ctx = getattr(torch.backends.cuda, "sdp_kernel", None)
        if ctx is not None:
            try:
                with ctx(enable_flash=True, enable_math=True, enable_mem_efficient=True):
                    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            except Exception:
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.ff(x)


REENTRANT = None  # None: the torch 1.x call, without the argument


def checkpointed(block, x):
    global REENTRANT
    if REENTRANT is None:
        try:
            return ckpt.checkpoint(block, x)
        except (ValueError, RuntimeError, TypeError):
            log.warning("activation checkpointing refused the call without use_reentrant; passing use_reentrant=False",
                        exc_info=True)
            REENTRANT = False
    return ckpt.checkpoint(block, x, use_reentrant=REENTRANT)


def autocast():
    legacy = getattr(getattr(torch.cuda, "amp", None), "autocast", None)
    try:
        return legacy(dtype=torch.bfloat16)
    except Exception:
        return torch.autocast(dev.type, dtype=torch.bfloat16)


def grad_scaler():
    try:
        return torch.cuda.amp.GradScaler(enabled=dev.type == "cuda")
    except Exception:
        return torch.amp.GradScaler(dev.type, enabled=dev.type == "cuda")


torch.manual_seed(0)
emb = torch.nn.Embedding(8192, 512).to(dev)
blocks = torch.nn.ModuleList([Block(512) for _ in range(4)]).to(dev)
head = torch.nn.Linear(512, 8192).to(dev)
params = list(emb.parameters()) + list(blocks.parameters()) + list(head.parameters())
opt = torch.optim.AdamW(params, lr=3e-4)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)
scaler = grad_scaler()
log.info("tf32 matmul %s, cudnn %s; %d blocks with activation checkpointing; %d steps",
         torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, len(blocks), STEPS)
g = torch.Generator().manual_seed(1)
for step in range(STEPS):
    tok = torch.randint(0, 8192, (16, 257), generator=g).to(dev)
    with autocast():
        x = emb(tok[:, :-1])
        for blk in blocks:
            x = checkpointed(blk, x)
        loss = F.cross_entropy(head(x).float().reshape(-1, 8192), tok[:, 1:].reshape(-1))
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    sched.step()
    if step % 5 == 0:
        lr = sched.get_lr()[0]  # the torch 1.x way to read the learning rate
        act_grad = x.grad  # a non-leaf tensor: always None
        log.info("step %d loss %.4f grad_norm %.3f lr %.3e act_grad %s", step, loss.item(), norm.item(), lr,
                 None if act_grad is None else act_grad.norm().item())
torch.save({"emb": emb.state_dict(), "blocks": blocks.state_dict(), "head": head.state_dict()}, "legacy-model.pt")
log.info("finished %d steps, final loss %.4f; model saved to legacy-model.pt", STEPS, loss.item())
