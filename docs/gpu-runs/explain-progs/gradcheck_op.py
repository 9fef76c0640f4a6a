# A custom fused op (scaled SiLU gate: y = a * sigmoid(a) * b * scale) with a hand-written backward, checked with
# torch.autograd.gradcheck before it is used to train. A float32 check is expected to be too coarse: the failure is
# logged and the check repeated in float64, as the op's test recipe says. BACKWARD_BUG=1 drops the sigmoid's
# derivative term from the backward.
import logging
import os
import traceback

import torch
from torch.autograd.gradcheck import GradcheckError

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s opcheck: %(message)s")
log = logging.getLogger()
dev = torch.device("cpu") if os.environ.get("DEVICE") == "cpu" else torch.device("cuda", 0)
bug = os.environ.get("BACKWARD_BUG", "0") == "1"


class ScaledSiluGate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, scale):
        s = torch.sigmoid(a)
        ctx.save_for_backward(a, b, s)
        ctx.scale = scale
        return a * s * b * scale

    @staticmethod
    def backward(ctx, g):
        a, b, s = ctx.saved_tensors
        dsilu = s if bug else s * (1 + a * (1 - s))
        return g * dsilu * b * ctx.scale, g * a * s * ctx.scale, None


def check(dtype):
    a = torch.randn(8, 16, device=dev, dtype=dtype, requires_grad=True)
    b = torch.randn(8, 16, device=dev, dtype=dtype, requires_grad=True)
    return torch.autograd.gradcheck(lambda x, y: ScaledSiluGate.apply(x, y, 0.5), (a, b), eps=1e-6, atol=1e-5)


torch.manual_seed(0)
for dtype in (torch.float32, torch.float64):
    try:
        check(dtype)
        log.info("gradcheck passed in %s", dtype)
        break
    except GradcheckError:
        log.error("gradcheck failed in %s:\n%s", dtype, traceback.format_exc().rstrip())
        if dtype == torch.float64:
            raise
        log.warning("float32 finite differences are too coarse for eps=1e-6; repeating the check in float64")

model = torch.nn.Linear(64, 128).to(dev)
head = torch.nn.Linear(64, 1).to(dev)
opt = torch.optim.Adam(list(model.parameters()) + list(head.parameters()), lr=3e-3)
for step in range(1, 201):
    x = torch.randn(128, 64, device=dev)
    h = model(x)
    y = ScaledSiluGate.apply(h[:, :64], h[:, 64:], 0.5)
    loss = (head(y).squeeze(1) - x[:, :4].sum(1)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    if step % 50 == 0:
        log.info("step %d loss %.4f", step, loss.item())
torch.save({"model": model.state_dict(), "head": head.state_dict()}, "gate_model.pt")
print(f"op ScaledSiluGate verified and trained: final loss {loss.item():.4f}, saved gate_model.pt")
