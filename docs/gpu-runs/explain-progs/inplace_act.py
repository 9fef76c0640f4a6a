"""A gated-MLP regression trained with "memory-saving" in-place activations (sigmoid_ then a scale mul_ on the same
buffer). Autograd refuses the first backward (a saved tensor was modified in place); the trainer logs the error and
rebuilds the block out-of-place, then trains and saves a checkpoint. INPLACE_FALLBACK=0 re-raises instead.
DEVICE=cpu runs on the CPU."""
import hashlib, logging, os, time
import torch

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
log = logging.getLogger("trainer")


class GatedBlock(torch.nn.Module):
    def __init__(self, d, inplace):
        super().__init__()
        self.up = torch.nn.Linear(d, 4 * d)
        self.gate = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d)
        self.inplace = inplace

    def forward(self, x):
        g = self.gate(x)
        if self.inplace:
            g = g.sigmoid_()          # the output of sigmoid is saved for its backward ...
            g.mul_(1.702)             # ... and then changed in place
        else:
            g = torch.sigmoid(g) * 1.702
        return x + self.down(self.up(x) * g)


def main():
    dev = torch.device("cpu") if os.environ.get("DEVICE") == "cpu" else torch.device("cuda", 0)
    fallback = os.environ.get("INPLACE_FALLBACK", "1") == "1"
    torch.manual_seed(0)
    d = 256
    blocks = torch.nn.ModuleList([GatedBlock(d, inplace=True) for _ in range(4)]).to(dev)
    head = torch.nn.Linear(d, 1).to(dev)
    params = list(blocks.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=3e-4)
    w_true = torch.randn(d, 1, device=dev)
    steps, t0, losses = int(os.environ.get("STEPS", 300)), time.time(), []
    step = 0
    while step < steps:
        x = torch.randn(512, d, device=dev)
        y = torch.tanh(x @ w_true / 8)
        h = x
        for b in blocks:
            h = b(h)
        loss = torch.nn.functional.mse_loss(head(h), y)
        try:
            loss.backward()
        except RuntimeError:
            if not fallback or not blocks[0].inplace:
                raise
            log.exception("backward failed at step %d with in-place activations", step)
            log.warning("disabling in-place activations (about %.0f MiB more activation memory) and redoing step %d",
                        4 * 512 * 4 * d * 4 / 2**20, step)
            for b in blocks:
                b.inplace = False
            opt.zero_grad(set_to_none=True)
            continue
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % 50 == 0:
            log.info("step %d loss %.5f", step, losses[-1])
        step += 1
    os.makedirs("ckpt", exist_ok=True)
    path = f"ckpt/gated-mlp-step{steps}.pt"
    state = {"blocks": blocks.state_dict(), "head": head.state_dict(), "step": steps}
    torch.save(state, path)
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()[:16]
    log.info("final loss %.5f (first %.5f) after %d steps in %.1f s", losses[-1], losses[0], steps, time.time() - t0)
    print(f"checkpoint saved: {path} ({sum(p.numel() for p in params)} parameters, sha256 {digest})")


if __name__ == "__main__":
    main()
